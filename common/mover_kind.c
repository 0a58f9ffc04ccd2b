/* mover_kind.c - the movers' names on the wire (see mover_kind.h). */
#include "mover_kind.h"

#include <string.h>

const char *wst_mover_kind_name(enum wst_mover_kind kind)
{
    switch (kind) {
    case WST_MOVER_PUT:
        return "put";
    case WST_MOVER_AM:
        return "am";
    case WST_MOVER_NCCL:
        return "nccl";
    }
    return "invalid";
}

enum wst_mover_kind wst_mover_kind_parse(const char *name)
{
    if (name != NULL && strcmp(name, "put") == 0)
        return WST_MOVER_PUT;
    if (name != NULL && strcmp(name, "am") == 0)
        return WST_MOVER_AM;
    return 0;
}
