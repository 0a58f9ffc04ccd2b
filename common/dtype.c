/* dtype.c - tables for enum wst_dtype and enum wst_mem_type. */
#include "dtype.h"

#include <string.h>
#include <strings.h>

/* Other names for our dtypes, as torch, numpy and safetensors spell them;
 * compared without case after a "torch." prefix. */
static const struct {
    const char *alias;
    enum wst_dtype dtype;
} dtype_aliases[] = {
    {"bfloat16", WST_DTYPE_BF16},
    {"float16", WST_DTYPE_F16},
    {"half", WST_DTYPE_F16},
    {"fp16", WST_DTYPE_F16},
    {"float32", WST_DTYPE_F32},
    {"float", WST_DTYPE_F32},
    {"fp32", WST_DTYPE_F32},
    {"float64", WST_DTYPE_F64},
    {"double", WST_DTYPE_F64},
    {"fp64", WST_DTYPE_F64},
    {"float8_e4m3fn", WST_DTYPE_FP8_E4M3},
    {"f8_e4m3", WST_DTYPE_FP8_E4M3},
    {"float8_e5m2", WST_DTYPE_FP8_E5M2},
    {"f8_e5m2", WST_DTYPE_FP8_E5M2},
    {"int8", WST_DTYPE_I8},
    {"uint8", WST_DTYPE_U8},
    {"int32", WST_DTYPE_I32},
    {"int64", WST_DTYPE_I64},
};

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

static enum wst_dtype dtype_alias(const char *name)
{
    size_t i;

    if (strncmp(name, "torch.", 6) == 0)
        name += 6;
#define WST_DTYPE_ALIAS_(id, value, str, size)                                 \
    if (strcasecmp(name, str) == 0)                                            \
        return id;
    WST_DTYPE_LIST(WST_DTYPE_ALIAS_)
#undef WST_DTYPE_ALIAS_
    for (i = 0; i < sizeof(dtype_aliases) / sizeof(dtype_aliases[0]); i++)
        if (strcasecmp(name, dtype_aliases[i].alias) == 0)
            return dtype_aliases[i].dtype;
    return WST_DTYPE_INVALID;
}

/* Appends 's' to the string in buf (len bytes), cutting it to fit. */
static void append(char *buf, size_t len, const char *s)
{
    size_t n = strlen(buf), k = strlen(s);

    if (n + 1 >= len)
        return;
    if (k > len - 1 - n)
        k = len - 1 - n;
    memcpy(buf + n, s, k);
    buf[n + k] = '\0';
}

void wst_dtype_hint(const char *name, char *buf, size_t len)
{
    enum wst_dtype guess = name != NULL ? dtype_alias(name) : WST_DTYPE_INVALID;
    const char *sep = " ";

    if (len == 0)
        return;
    buf[0] = '\0';
    if (guess != WST_DTYPE_INVALID) {
        append(buf, len, "did you mean \"");
        append(buf, len, wst_dtype_name(guess));
        append(buf, len, "\"? ");
    }
    append(buf, len, "valid:");
#define WST_DTYPE_HINT_(id, value, str, size)                                  \
    append(buf, len, sep);                                                     \
    append(buf, len, str);                                                     \
    sep = ", ";
    WST_DTYPE_LIST(WST_DTYPE_HINT_)
#undef WST_DTYPE_HINT_
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
