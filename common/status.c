/* status.c - message and name tables generated from WST_STATUS_LIST. */
#include <wstream/status.h>

#include <stddef.h>

const char *wst_status_string(wst_status_t status)
{
    switch ((int)status) {
#define WST_STATUS_MSG_(name, value, msg)                                      \
    case value:                                                                \
        return msg;
        WST_STATUS_LIST(WST_STATUS_MSG_)
#undef WST_STATUS_MSG_
    }
    return "unknown status";
}

const char *wst_status_name(wst_status_t status)
{
    switch ((int)status) {
#define WST_STATUS_NAME_(name, value, msg)                                     \
    case value:                                                                \
        return #name;
        WST_STATUS_LIST(WST_STATUS_NAME_)
#undef WST_STATUS_NAME_
    }
    return NULL;
}

int wst_status_is_known(int value)
{
    return wst_status_name((wst_status_t)value) != NULL;
}
