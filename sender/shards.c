/* shards.c - registering shards (before the first push): each one's have
 * entry for the manifest, its memory checked against what it declares and
 * registered with UCX; the first device shard brings up the GPU side. A
 * name may be registered several times, one slice of the tensor each
 * (slices.c checks them against each other).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "array.h"
#include "device.h"
#include "dtype.h"
#include "gpu.h"
#include "gpu_probe.h"
#include "gpu_worker.h"
#include "log.h"
#include "manifest.h"
#include "sender_internal.h"
#include "worker.h"

static wst_status_t shard_to_have(const struct wst_shard *sh,
                                  struct wst_have *h, uint64_t *bytes_p)
{
    uint64_t elems;

    memset(h, 0, sizeof(*h));
    if (sh->name == NULL || strlen(sh->name) >= WST_NAME_MAX || sh->ndim == 0 ||
        sh->ndim > WST_MAX_DIMS || sh->shape == NULL || sh->box_start == NULL ||
        sh->box_stop == NULL)
        return WST_ERR_INVALID;
    strcpy(h->tensor.name, sh->name);
    h->tensor.dtype = (enum wst_dtype)sh->dtype;
    h->tensor.ndim = sh->ndim;
    memcpy(h->tensor.shape, sh->shape, sh->ndim * sizeof(uint64_t));
    h->flat = sh->flat != 0;
    h->box.ndim = h->flat ? 1 : sh->ndim;
    memcpy(h->box.start, sh->box_start, h->box.ndim * sizeof(uint64_t));
    memcpy(h->box.stop, sh->box_stop, h->box.ndim * sizeof(uint64_t));
    h->mem = (enum wst_mem_type)sh->mem_type;
    wst_status_t st = wst_have_check(h);
    if (st != WST_OK)
        return st;
    elems = wst_box_elems(&h->box);
    *bytes_p = elems * wst_dtype_size(h->tensor.dtype);
    return WST_OK;
}

/* The shard's memory must be what it says (UCX given a device pointer it
 * cannot read crashes); the first device shard brings up the GPU side. */
static wst_status_t shard_memory(struct wst_sender *s,
                                 const struct wst_shard *sh,
                                 struct shard *entry)
{
    int device = -1;
    enum wst_mem_type found = wst_gpu_mem_type(sh->data, &device);

    entry->device = -1;
    if (entry->bytes > 0 && (int)found != sh->mem_type) {
        WST_ERROR(&s->log,
                  "register '%s': declared %s memory, but the pointer is %s "
                  "memory%s",
                  sh->name, wst_mem_type_name((enum wst_mem_type)sh->mem_type),
                  wst_mem_type_name(found),
                  wst_kernels_built_with_cuda() ? "" : " (built without CUDA)");
        return WST_ERR_INVALID;
    }
    if (found != WST_MEM_CUDA || entry->bytes == 0)
        return WST_OK;
    if (s->dev != NULL && wst_send_device_ordinal(s->dev) != device) {
        WST_ERROR(&s->log,
                  "register '%s': on GPU %d, but other shards are on GPU %d; "
                  "one sender reads one GPU",
                  sh->name, device, wst_send_device_ordinal(s->dev));
        return WST_ERR_UNSUPPORTED;
    }
    if (s->dev == NULL) {
        wst_status_t st =
            wst_send_device_create(&s->log, s->worker, device, s->bounce_slots,
                                   wst_send_pump_all, s, &s->dev);
        if (st != WST_OK) {
            WST_ERROR(&s->log, "register '%s': cannot set up GPU %d (%s)",
                      sh->name, device, wst_status_string(st));
            return st;
        }
        st = wst_gpu_worker_bind(&s->log, s->worker, device);
        if (st != WST_OK)
            return st;
        char name[128] = "?";
        wst_gpu_device_name(&s->log, device, name, sizeof(name));
        WST_INFO(&s->log,
                 "device shards on GPU %d (%s); bounce ring %u x %llu MiB "
                 "pinned, registered once",
                 device, name, s->bounce_slots,
                 (unsigned long long)(WST_BOUNCE_SLOT_BYTES >> 20));
    }
    entry->device = device;
    return WST_OK;
}

/* A refused registration: the message goes to the log and, for the
 * application (wst_sender_last_error), into last_error. */
static wst_status_t register_refused(struct wst_sender *s,
                                     const struct wst_shard *sh,
                                     wst_status_t st, const char *why)
{
    snprintf(s->last_error, sizeof(s->last_error), "register '%s': %s (%s)",
             sh->name ? sh->name : "(null)", why, wst_status_name(st));
    WST_ERROR(&s->log, "%s", s->last_error);
    return st;
}

wst_status_t wst_sender_register(wst_sender_t *s, const struct wst_shard *sh)
{
    struct shard entry = {0};
    char why[WST_ERROR_MSG_MAX];
    wst_status_t st;

    s->last_error[0] = '\0';
    if (s->version != 0)
        return register_refused(s, sh, WST_ERR_STATE,
                                "shards are registered before the first push");
    if (sh->mem_type != WST_MEM_HOST && sh->mem_type != WST_MEM_CUDA) {
        char why[48];
        snprintf(why, sizeof(why), "unknown memory type %d", sh->mem_type);
        return register_refused(s, sh, WST_ERR_INVALID, why);
    }
    st = shard_to_have(sh, &entry.have, &entry.bytes);
    if (st != WST_OK)
        return register_refused(s, sh, st, "invalid shard description");
    st = wst_send_slice_check(s, wst_send_slice_latest(s, sh->name),
                              &entry.have, why, sizeof(why));
    if (st != WST_OK)
        return register_refused(s, sh, st, why);
    if (entry.bytes > 0 && sh->data == NULL)
        return register_refused(s, sh, WST_ERR_INVALID, "no data pointer");
    entry.data = sh->data;
    st = shard_memory(s, sh, &entry);
    if (st != WST_OK)
        return register_refused(s, sh, st,
                                "its memory cannot be used (the log says why)");
    /* Device memory is registered only with a UCX that can read it; the
     * bounce path reads it through its own registered ring. */
    if (entry.bytes > 0 &&
        (entry.device < 0 || wst_worker_supports_cuda(s->worker))) {
        st = wst_worker_mem_map(s->worker, (void *)sh->data, entry.bytes,
                                &entry.memh);
        if (st != WST_OK)
            return register_refused(s, sh, st,
                                    "UCX cannot register its memory");
    }
    if (wst_array_grow(&s->shards, &s->shards_cap, s->n_shards + 1,
                       sizeof(*s->shards)) != WST_OK ||
        wst_send_slice_reserve(s) != WST_OK) {
        wst_worker_mem_unmap(s->worker, entry.memh);
        return register_refused(s, sh, WST_ERR_NO_MEMORY, "out of memory");
    }
    s->shards[s->n_shards++] = entry;
    wst_send_slice_add(s, s->n_shards - 1);
    return WST_OK;
}
