/* ucx_status.c - translation of UCX statuses into wst_status_t. */
#include "ucx_status.h"

wst_status_t wst_status_from_ucs(ucs_status_t status)
{
    switch (status) {
    case UCS_OK:
        return WST_OK;
    case UCS_INPROGRESS:
        return WST_INPROGRESS;
    case UCS_ERR_NO_MEMORY:
        return WST_ERR_NO_MEMORY;
    case UCS_ERR_INVALID_PARAM:
        return WST_ERR_INVALID;
    case UCS_ERR_TIMED_OUT:
        return WST_ERR_TIMED_OUT;
    case UCS_ERR_CANCELED:
        return WST_ERR_CANCELED;
    case UCS_ERR_UNREACHABLE:
    case UCS_ERR_REJECTED:
    case UCS_ERR_NOT_CONNECTED:
        return WST_ERR_UNREACHABLE;
    case UCS_ERR_ENDPOINT_TIMEOUT:
    case UCS_ERR_CONNECTION_RESET:
    case UCS_ERR_IO_ERROR:
        return WST_ERR_PEER_FAILED;
    case UCS_ERR_UNSUPPORTED:
        return WST_ERR_UNSUPPORTED;
    default:
        return WST_ERR_TRANSPORT;
    }
}
