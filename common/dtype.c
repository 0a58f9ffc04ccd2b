/* dtype.c - tables for enum wst_dtype and enum wst_mem_type. */
#include "dtype.h"

#include <string.h>

size_t wst_dtype_size(enum wst_dtype dtype)
{
    switch (dtype) {
#define WST_DTYPE_SIZE_(name, value, str, size)                                \
    case name:                                                                 \
        return size;
        WST_DTYPE_LIST(WST_DTYPE_SIZE_)
#undef WST_DTYPE_SIZE_
    default:
        return 0;
    }
}

const char *wst_dtype_name(enum wst_dtype dtype)
{
    switch (dtype) {
#define WST_DTYPE_NAME_(name, value, str, size)                                \
    case name:                                                                 \
        return str;
        WST_DTYPE_LIST(WST_DTYPE_NAME_)
#undef WST_DTYPE_NAME_
    default:
        return "invalid";
    }
}

enum wst_dtype wst_dtype_parse(const char *name)
{
#define WST_DTYPE_PARSE_(id, value, str, size)                                 \
    if (name != NULL && strcmp(name, str) == 0)                                \
        return id;
    WST_DTYPE_LIST(WST_DTYPE_PARSE_)
#undef WST_DTYPE_PARSE_
    return WST_DTYPE_INVALID;
}

int wst_dtype_is_valid(int value)
{
    return wst_dtype_size((enum wst_dtype)value) != 0;
}

const char *wst_mem_type_name(enum wst_mem_type mem)
{
    switch (mem) {
    case WST_MEM_HOST:
        return "host";
    case WST_MEM_CUDA:
        return "cuda";
    }
    return "invalid";
}
