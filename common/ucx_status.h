/* ucx_status.h - the one place ucs_status_t becomes wst_status_t. */
#ifndef WST_UCX_STATUS_H
#define WST_UCX_STATUS_H

#include <ucs/type/status.h>
#include <wstream/status.h>

wst_status_t wst_status_from_ucs(ucs_status_t status);

#endif
