/* memory.c - memory registration on the worker's UCX context: map, unmap
 * and packed remote keys. Context-level, so any thread may call these.
 */
#include <stdlib.h>
#include <string.h>

#include "ucx_status.h"
#include "worker_internal.h"

wst_status_t wst_worker_mem_map(wst_worker_t *w, void *ptr, size_t len,
                                ucp_mem_h *memh_p)
{
    ucp_mem_map_params_t mp = {
        .field_mask =
            UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH,
        .address = ptr,
        .length = len,
    };
    ucs_status_t st = ucp_mem_map(w->context, &mp, memh_p);

    if (st != UCS_OK) {
        WST_ERROR(w->log, "ucp_mem_map of %zu bytes at %p: %s", len, ptr,
                  ucs_status_string(st));
        return wst_status_from_ucs(st);
    }
    return WST_OK;
}

void wst_worker_mem_unmap(wst_worker_t *w, ucp_mem_h memh)
{
    if (memh != NULL)
        ucp_mem_unmap(w->context, memh);
}

wst_status_t wst_worker_rkey_pack(wst_worker_t *w, ucp_mem_h memh, void **buf_p,
                                  size_t *len_p)
{
    void *rkey = NULL;
    size_t len = 0;
    ucs_status_t st = ucp_rkey_pack(w->context, memh, &rkey, &len);

    if (st != UCS_OK) {
        WST_ERROR(w->log, "ucp_rkey_pack: %s", ucs_status_string(st));
        return wst_status_from_ucs(st);
    }
    void *copy = malloc(len ? len : 1);
    if (copy == NULL) {
        ucp_rkey_buffer_release(rkey);
        return WST_ERR_NO_MEMORY;
    }
    memcpy(copy, rkey, len);
    ucp_rkey_buffer_release(rkey);
    *buf_p = copy;
    *len_p = len;
    return WST_OK;
}
