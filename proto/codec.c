/* codec.c - control messages to and from protobuf-c "Control" envelopes.
 *
 * Decoding runs in three steps, so a lying peer never makes us allocate,
 * copy or index with a value nobody has checked:
 *   1. refuse a buffer longer than max_len before protobuf-c parses it;
 *   2. unpack, then validate the protobuf-c structs (check_*): counts against
 *      the caps, blob and string sizes, enum values, tensors and boxes
 *      through common/manifest.c, plan item ranges and their overflow;
 *   3. convert into the plain owned structs of codec.h (convert_*), which
 *      after step 2 can only fail for lack of memory.
 * Encoding builds protobuf-c structs that borrow the caller's memory and runs
 * the very same check_* functions on them before packing, so we never emit a
 * message the peer would refuse. Only what the wire form cannot express (a
 * plan item's sender, a name without its NUL, arrays too short for their
 * counts) is checked on the plain structs first (precheck_*).
 */
#include "codec.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtype.h"
#include "errbuf.h"
#include "label.h"
#include "wstream.pb-c.h"

/* Room for "[" + 8 values of up to 20 digits + 7 commas + "]" + NUL. */
#define DIMS_STR_MAX 200

/* Formats up to WST_MAX_DIMS values as "[a,b,c]" for error messages. */
static const char *fmt_dims(char *buf, const uint64_t *v, size_t n)
{
    size_t off = 0;
    size_t i;

    if (n > WST_MAX_DIMS) {
        n = WST_MAX_DIMS;
    }
    off += (size_t)snprintf(buf, DIMS_STR_MAX, "[");
    for (i = 0; i < n; i++) {
        off += (size_t)snprintf(buf + off, DIMS_STR_MAX - off, "%s%" PRIu64,
                                i > 0 ? "," : "", v[i]);
    }
    snprintf(buf + off, DIMS_STR_MAX - off, "]");
    return buf;
}

/* ---- step 2: validation of protobuf-c structs (decode and encode) ---- */

static wst_status_t check_blob(const ProtobufCBinaryData *b, const char *what,
                               char *err, size_t errlen)
{
    if (b->len > WST_MAX_BLOB) {
        wst_errf(err, errlen, "%s: %zu bytes, limit %d", what, b->len,
                 WST_MAX_BLOB);
        return WST_ERR_PROTOCOL;
    }
    return WST_OK;
}

/* protobuf-c NUL-terminates strings, so an embedded NUL only shortens the
 * string; what matters is that the result fits our fixed arrays. */
static wst_status_t check_text(const char *s, size_t limit, const char *what,
                               char *err, size_t errlen)
{
    size_t n = strnlen(s != NULL ? s : "", limit);

    if (n >= limit) {
        wst_errf(err, errlen, "%s: %zu bytes or more, limit %zu", what, n,
                 limit - 1);
        return WST_ERR_PROTOCOL;
    }
    return WST_OK;
}

/* A version's label, as bytes: its length and every byte, NULs included,
 * against the rule of common/label.h. */
static wst_status_t check_label(const ProtobufCBinaryData *b, const char *what,
                                char *err, size_t errlen)
{
    char why[256];

    if (wst_label_check((const char *)b->data, b->len, why, sizeof(why)) ==
        WST_OK)
        return WST_OK;
    wst_errf(err, errlen, "%s: %s", what, why);
    return WST_ERR_PROTOCOL;
}

/* A label into out[WST_LABEL_MAX], after check_label. */
static void copy_label(char *out, const ProtobufCBinaryData *b)
{
    if (b->len > 0)
        memcpy(out, b->data, b->len);
    out[b->len] = '\0';
}

static ProtobufCBinaryData pb_label(const char *label)
{
    return (ProtobufCBinaryData){.len = strlen(label),
                                 .data = (uint8_t *)label};
}

static int role_is_known(uint32_t role)
{
    return role == WST_ROLE_SENDER || role == WST_ROLE_RECEIVER;
}

/* What a receiver may offer in a plan: movers over its UCX regions. */
static int plan_mover_is_known(uint32_t mover)
{
    return mover == WST_MOVER_PUT || mover == WST_MOVER_AM;
}

/* What a sender may use, named in its begin request: the plan's movers, or
 * NCCL when both sides can (Plan.caps). */
static int begin_mover_is_known(uint32_t mover)
{
    return mover == WST_MOVER_PUT || mover == WST_MOVER_AM ||
           mover == WST_MOVER_NCCL;
}

static int mem_is_known(uint32_t mem)
{
    return mem == WST_MEM_HOST || mem == WST_MEM_CUDA;
}

static wst_status_t check_lane_addresses(const Wst__Hello *m, char *err,
                                         size_t errlen)
{
    char what[64];
    size_t i;
    wst_status_t status;

    if (m->n_lane_addresses > WST_HELLO_LANES_MAX) {
        wst_errf(err, errlen, "hello lane_addresses: %zu, limit %d",
                 m->n_lane_addresses, WST_HELLO_LANES_MAX);
        return WST_ERR_PROTOCOL;
    }
    for (i = 0; i < m->n_lane_addresses; i++) {
        snprintf(what, sizeof(what), "hello lane_addresses[%zu]", i);
        status = check_blob(&m->lane_addresses[i], what, err, errlen);
        if (status != WST_OK) {
            return status;
        }
    }
    return WST_OK;
}

static wst_status_t check_hello(const Wst__Hello *m, char *err, size_t errlen)
{
    wst_status_t status;

    if (!role_is_known(m->role)) {
        wst_errf(err, errlen, "hello: unknown role %" PRIu32, m->role);
        return WST_ERR_PROTOCOL;
    }
    status = check_blob(&m->auth, "hello auth", err, errlen);
    if (status != WST_OK) {
        return status;
    }
    status =
        check_blob(&m->worker_address, "hello worker_address", err, errlen);
    if (status != WST_OK) {
        return status;
    }
    return check_lane_addresses(m, err, errlen);
}

/* Copies a have entry whose counts check_have_raw accepted. */
static void fill_have(const Wst__HaveEntry *e, struct wst_have *h)
{
    memset(h, 0, sizeof(*h));
    strcpy(h->tensor.name, e->name);
    h->tensor.dtype = (enum wst_dtype)e->dtype;
    h->tensor.ndim = (uint32_t)e->n_shape;
    memcpy(h->tensor.shape, e->shape, e->n_shape * sizeof(uint64_t));
    h->box.ndim = (uint32_t)e->n_box_start;
    memcpy(h->box.start, e->box_start, e->n_box_start * sizeof(uint64_t));
    memcpy(h->box.stop, e->box_stop, e->n_box_stop * sizeof(uint64_t));
    h->flat = e->flat ? 1 : 0;
    h->mem = (enum wst_mem_type)e->mem_type;
}

/* What must hold before the entry can be copied into a struct wst_have. */
static wst_status_t check_have_raw(const Wst__HaveEntry *e, size_t i, char *err,
                                   size_t errlen)
{
    size_t box_dims = e->flat ? 1 : e->n_shape;
    size_t n = strnlen(e->name != NULL ? e->name : "", WST_NAME_MAX);

    if (n == 0 || n >= WST_NAME_MAX) {
        wst_errf(err, errlen,
                 "have entry %zu: name of %zu%s bytes, expected "
                 "1..%d",
                 i, n, n >= WST_NAME_MAX ? " or more" : "", WST_NAME_MAX - 1);
        return WST_ERR_PROTOCOL;
    }
    if (!wst_dtype_is_valid((int)e->dtype)) {
        wst_errf(err, errlen, "have entry %zu '%s': unknown dtype %" PRIu32, i,
                 e->name, e->dtype);
        return WST_ERR_PROTOCOL;
    }
    if (!mem_is_known(e->mem_type)) {
        wst_errf(err, errlen, "have entry %zu '%s': unknown mem_type %" PRIu32,
                 i, e->name, e->mem_type);
        return WST_ERR_PROTOCOL;
    }
    if (e->n_shape < 1 || e->n_shape > WST_MAX_DIMS) {
        wst_errf(err, errlen, "have entry %zu '%s': %zu dims, expected 1..%d",
                 i, e->name, e->n_shape, WST_MAX_DIMS);
        return WST_ERR_PROTOCOL;
    }
    if (e->n_box_start != box_dims || e->n_box_stop != box_dims) {
        wst_errf(err, errlen,
                 "have entry %zu '%s': box with %zu start and %zu "
                 "stop values, expected %zu",
                 i, e->name, e->n_box_start, e->n_box_stop, box_dims);
        return WST_ERR_PROTOCOL;
    }
    return WST_OK;
}

/* Full check of one entry; the semantic part is common/manifest.c's. */
static wst_status_t check_have_entry(const Wst__HaveEntry *e, size_t i,
                                     char *err, size_t errlen)
{
    char d0[DIMS_STR_MAX], d1[DIMS_STR_MAX], d2[DIMS_STR_MAX];
    struct wst_have h;
    wst_status_t status;

    status = check_have_raw(e, i, err, errlen);
    if (status != WST_OK) {
        return status;
    }
    fill_have(e, &h);
    status = wst_tensor_desc_check(&h.tensor, NULL, NULL);
    if (status != WST_OK) {
        wst_errf(err, errlen,
                 "have entry %zu '%s': invalid tensor: %s shape "
                 "%s (%s)",
                 i, e->name, wst_dtype_name(h.tensor.dtype),
                 fmt_dims(d0, e->shape, e->n_shape), wst_status_string(status));
        return WST_ERR_PROTOCOL;
    }
    status = wst_box_check(&h.tensor, &h.box, h.flat);
    if (status == WST_OK) {
        status = wst_have_check(&h);
    }
    if (status != WST_OK) {
        wst_errf(err, errlen,
                 "have entry %zu '%s': %sbox start %s stop %s "
                 "invalid for shape %s (%s)",
                 i, e->name, h.flat ? "flat " : "",
                 fmt_dims(d0, e->box_start, e->n_box_start),
                 fmt_dims(d1, e->box_stop, e->n_box_stop),
                 fmt_dims(d2, e->shape, e->n_shape), wst_status_string(status));
        return WST_ERR_PROTOCOL;
    }
    return WST_OK;
}

static wst_status_t check_have(const Wst__HaveManifest *m, char *err,
                               size_t errlen)
{
    wst_status_t status;
    size_t i;

    if (m->n_entries > WST_MAX_HAVES) {
        wst_errf(err, errlen, "have manifest: %zu entries, limit %u",
                 m->n_entries, WST_MAX_HAVES);
        return WST_ERR_PROTOCOL;
    }
    for (i = 0; i < m->n_entries; i++) {
        status = check_have_entry(m->entries[i], i, err, errlen);
        if (status != WST_OK) {
            return status;
        }
    }
    return WST_OK;
}

static wst_status_t check_want_summary(const Wst__WantSummary *m, char *err,
                                       size_t errlen)
{
    wst_status_t st = check_text(m->reason, WST_ERROR_MSG_MAX,
                                 "want_summary reason", err, errlen);

    if (st == WST_OK)
        st = check_text(m->group, WST_GROUP_NAME_MAX, "want_summary group", err,
                        errlen);
    if (st == WST_OK)
        st = check_label(&m->committed_label, "want_summary committed_label",
                         err, errlen);
    if (st != WST_OK)
        return st;
    if (m->group_size < 1 || m->group_size > WST_GROUP_SIZE_MAX ||
        m->group_member >= m->group_size) {
        wst_errf(err, errlen,
                 "want_summary: group member %" PRIu32 " of %" PRIu32
                 " (size 1..%d)",
                 m->group_member, m->group_size, WST_GROUP_SIZE_MAX);
        return WST_ERR_PROTOCOL;
    }
    return WST_OK;
}

static wst_status_t check_region(const Wst__Region *r, size_t i, char *err,
                                 size_t errlen)
{
    if (r->rkey.len > WST_MAX_BLOB) {
        wst_errf(err, errlen, "plan region %zu: rkey of %zu bytes, limit %d", i,
                 r->rkey.len, WST_MAX_BLOB);
        return WST_ERR_PROTOCOL;
    }
    if (r->message_max != 0 &&
        (r->message_max % WST_REGION_MESSAGE_ALIGN != 0 ||
         r->message_max < WST_REGION_MESSAGE_MIN ||
         r->message_max > WST_REGION_MESSAGE_MAX)) {
        wst_errf(err, errlen,
                 "plan region %zu: messages of at most %" PRIu64
                 " bytes (0, or a multiple of %llu from %llu to %llu)",
                 i, r->message_max, WST_REGION_MESSAGE_ALIGN,
                 WST_REGION_MESSAGE_MIN, WST_REGION_MESSAGE_MAX);
        return WST_ERR_PROTOCOL;
    }
    /* No real mapping wraps around the address space. */
    if (r->address + r->length < r->address) {
        wst_errf(err, errlen,
                 "plan region %zu: base 0x%" PRIx64 " + length "
                 "%" PRIu64 " overflows",
                 i, r->address, r->length);
        return WST_ERR_PROTOCOL;
    }
    return WST_OK;
}

static wst_status_t check_plan_item(const Wst__Plan *m, size_t i, char *err,
                                    size_t errlen)
{
    const Wst__PlanItem *it = m->items[i];
    uint64_t bytes = 0, src_last = 0, dst_end;
    int rows_ok = !__builtin_mul_overflow(
                      it->length, (uint64_t)it->more_rows + 1, &bytes) &&
                  !__builtin_mul_overflow(it->src_stride,
                                          (uint64_t)it->more_rows, &src_last);
    dst_end = it->dst_offset + bytes;

    if (it->length == 0) {
        wst_errf(err, errlen, "plan item %zu: length 0", i);
    } else if (it->more_rows != 0 && !(m->caps & WST_CAP_ROWS)) {
        wst_errf(err, errlen,
                 "plan item %zu: %" PRIu32 " more rows in a plan without "
                 "the rows capability",
                 i, it->more_rows);
    } else if (it->more_rows == 0 ? it->src_stride != 0
                                  : it->length >= WST_PLAN_ROW_MAX ||
                                        it->src_stride < it->length) {
        wst_errf(err, errlen,
                 "plan item %zu: %" PRIu32 " more rows of %" PRIu64
                 " bytes, %" PRIu64 " apart in the source (rows are shorter "
                 "than %u bytes and do not overlap; one row has no stride)",
                 i, it->more_rows, it->length, it->src_stride,
                 WST_PLAN_ROW_MAX);
    } else if (it->more_rows != 0 &&
               (!rows_ok || it->src_offset + src_last < it->src_offset ||
                it->src_offset + src_last + it->length <
                    it->src_offset + src_last)) {
        wst_errf(err, errlen,
                 "plan item %zu: %" PRIu32 " more rows of %" PRIu64
                 " bytes %" PRIu64 " apart from src_offset %" PRIu64
                 " overflow",
                 i, it->more_rows, it->length, it->src_stride, it->src_offset);
    } else if (it->src_offset + it->length < it->src_offset) {
        wst_errf(err, errlen,
                 "plan item %zu: src_offset %" PRIu64 " + length "
                 "%" PRIu64 " overflows",
                 i, it->src_offset, it->length);
    } else if (dst_end < it->dst_offset) {
        wst_errf(err, errlen,
                 "plan item %zu: dst_offset %" PRIu64 " + length "
                 "%" PRIu64 " overflows",
                 i, it->dst_offset, bytes);
    } else if (it->region >= m->n_regions) {
        wst_errf(err, errlen, "plan item %zu: region %" PRIu32 " of %zu", i,
                 it->region, m->n_regions);
    } else if (dst_end > m->regions[it->region]->length) {
        wst_errf(err, errlen,
                 "plan item %zu: dst_offset %" PRIu64 " + length "
                 "%" PRIu64 " past the end of region %" PRIu32 " (%" PRIu64
                 " bytes)",
                 i, it->dst_offset, bytes, it->region,
                 m->regions[it->region]->length);
    } else if (it->layer >= m->n_layers) {
        wst_errf(err, errlen, "plan item %zu: layer %" PRIu32 " of %" PRIu32, i,
                 it->layer, m->n_layers);
    } else {
        return WST_OK;
    }
    return WST_ERR_PROTOCOL;
}

static wst_status_t check_plan_header(const Wst__Plan *m, char *err,
                                      size_t errlen)
{
    if (m->n_layers < 1) {
        wst_errf(err, errlen, "plan: n_layers 0");
    } else if (m->sender >= m->n_senders) {
        wst_errf(err, errlen, "plan: sender %" PRIu32 " of n_senders %" PRIu32,
                 m->sender, m->n_senders);
    } else if (!plan_mover_is_known(m->mover)) {
        wst_errf(err, errlen, "plan: unknown mover %" PRIu32, m->mover);
    } else if (m->caps & ~(uint32_t)WST_CAP_ALL) {
        wst_errf(err, errlen, "plan: unknown capability bits 0x%" PRIx32,
                 m->caps & ~(uint32_t)WST_CAP_ALL);
    } else if (m->n_items > WST_MAX_PLAN_ITEMS) {
        wst_errf(err, errlen, "plan: %zu items, limit %u", m->n_items,
                 WST_MAX_PLAN_ITEMS);
    } else if (m->n_regions > WST_MAX_REGIONS) {
        wst_errf(err, errlen, "plan: %zu regions, limit %u", m->n_regions,
                 WST_MAX_REGIONS);
    } else {
        return WST_OK;
    }
    return WST_ERR_PROTOCOL;
}

static wst_status_t check_plan(const Wst__Plan *m, char *err, size_t errlen)
{
    wst_status_t status;
    size_t i;

    status = check_plan_header(m, err, errlen);
    for (i = 0; status == WST_OK && i < m->n_regions; i++) {
        status = check_region(m->regions[i], i, err, errlen);
    }
    for (i = 0; status == WST_OK && i < m->n_items; i++) {
        status = check_plan_item(m, i, err, errlen);
    }
    return status;
}

static wst_status_t check_version(uint64_t version, const char *what, char *err,
                                  size_t errlen)
{
    if (version < 1) {
        wst_errf(err, errlen, "%s: version 0", what);
        return WST_ERR_PROTOCOL;
    }
    return WST_OK;
}

static wst_status_t check_error(const Wst__Error *m, char *err, size_t errlen)
{
    if (m->status >= 0 || !wst_status_is_known(m->status)) {
        wst_errf(err, errlen, "error: status %" PRId32 " is not a known error",
                 m->status);
        return WST_ERR_PROTOCOL;
    }
    return check_text(m->message, WST_ERROR_MSG_MAX, "error message", err,
                      errlen);
}

/* Further layers: as many byte counts as digests, a bounded number, and
 * layer numbers that do not wrap. */
static wst_status_t check_layer_done(const Wst__LayerDone *m, char *err,
                                     size_t errlen)
{
    wst_status_t st = check_version(m->version, "layer_done", err, errlen);

    if (st != WST_OK)
        return st;
    if (m->n_more_bytes != m->n_more_digests ||
        m->n_more_bytes > WST_LAYER_DONE_MORE_MAX ||
        m->layer > UINT32_MAX - m->n_more_bytes) {
        wst_errf(err, errlen,
                 "layer_done: %zu more byte counts, %zu more digests (at most "
                 "%u) from layer %" PRIu32,
                 m->n_more_bytes, m->n_more_digests, WST_LAYER_DONE_MORE_MAX,
                 m->layer);
        return WST_ERR_PROTOCOL;
    }
    return WST_OK;
}

/* Requests name the sender's mover; acknowledgements carry none. */
static wst_status_t check_begin(const Wst__Begin *b, char *err, size_t errlen)
{
    wst_status_t st = check_version(b->version, "begin", err, errlen);

    if (st != WST_OK)
        return st;
    if (b->ack ? b->mover != 0 : !begin_mover_is_known(b->mover)) {
        wst_errf(err, errlen, "begin: bad mover %" PRIu32, b->mover);
        return WST_ERR_PROTOCOL;
    }
    return check_label(&b->label, "begin", err, errlen);
}

static wst_status_t check_barrier(const Wst__Barrier *m, char *err,
                                  size_t errlen)
{
    wst_status_t st = check_version(m->version, "barrier", err, errlen);

    if (st == WST_OK &&
        (m->step < WST_BARRIER_READY || m->step > WST_BARRIER_PREPARED)) {
        wst_errf(err, errlen, "barrier: unknown step %" PRIu32, m->step);
        st = WST_ERR_PROTOCOL;
    }
    return st;
}

/* The id is copied into a fixed array, so its length must be exact. */
static wst_status_t check_nccl_setup(const Wst__NcclSetup *m, char *err,
                                     size_t errlen)
{
    if (m->unique_id.len != WST_NCCL_UNIQUE_ID_BYTES) {
        wst_errf(err, errlen, "nccl setup: unique id of %zu bytes, want %d",
                 m->unique_id.len, WST_NCCL_UNIQUE_ID_BYTES);
        return WST_ERR_PROTOCOL;
    }
    return WST_OK;
}

/* A set case whose submessage pointer is NULL can only come from a caller
 * bug on encode, but costs nothing to refuse. */
static wst_status_t check_control(const Wst__Control *pb, char *err,
                                  size_t errlen)
{
    if (pb->msg_case != WST__CONTROL__MSG__NOT_SET && pb->hello == NULL) {
        wst_errf(err, errlen, "control: message %d set but empty",
                 (int)pb->msg_case);
        return WST_ERR_PROTOCOL;
    }
    switch (pb->msg_case) {
    case WST__CONTROL__MSG_HELLO:
        return check_hello(pb->hello, err, errlen);
    case WST__CONTROL__MSG_HAVE:
        return check_have(pb->have, err, errlen);
    case WST__CONTROL__MSG_WANT_SUMMARY:
        return check_want_summary(pb->want_summary, err, errlen);
    case WST__CONTROL__MSG_PLAN:
        return check_plan(pb->plan, err, errlen);
    case WST__CONTROL__MSG_BEGIN:
        return check_begin(pb->begin, err, errlen);
    case WST__CONTROL__MSG_LAYER_DONE:
        return check_layer_done(pb->layer_done, err, errlen);
    case WST__CONTROL__MSG_COMMIT:
        return check_version(pb->commit->version, "commit", err, errlen);
    case WST__CONTROL__MSG_ERROR:
        return check_error(pb->error, err, errlen);
    case WST__CONTROL__MSG_HEARTBEAT:
        return WST_OK;
    case WST__CONTROL__MSG_CREDIT:
        return check_version(pb->credit->version, "credit", err, errlen);
    case WST__CONTROL__MSG_NCCL_SETUP:
        return check_nccl_setup(pb->nccl_setup, err, errlen);
    case WST__CONTROL__MSG_NCCL_READY:
        return WST_OK;
    case WST__CONTROL__MSG_BARRIER:
        return check_barrier(pb->barrier, err, errlen);
    default:
        wst_errf(err, errlen, "control: no message set");
        return WST_ERR_PROTOCOL;
    }
}

/* ---- step 3: conversion into owned plain structs ---- */

static wst_status_t copy_blob(struct wst_blob *dst,
                              const ProtobufCBinaryData *src)
{
    if (src->len == 0) {
        return WST_OK;
    }
    dst->data = malloc(src->len);
    if (dst->data == NULL) {
        return WST_ERR_NO_MEMORY;
    }
    memcpy(dst->data, src->data, src->len);
    dst->len = src->len;
    return WST_OK;
}

static wst_status_t convert_hello(const Wst__Hello *m, struct wst_hello *out)
{
    size_t i;
    wst_status_t status;

    out->protocol_version = m->protocol_version;
    out->role = (enum wst_role)m->role;
    out->rank = m->rank;
    out->world_size = m->world_size;
    out->session = m->session;
    out->tcp_rx_seg = m->tcp_rx_seg;
    status = copy_blob(&out->auth, &m->auth);
    if (status != WST_OK) {
        return status;
    }
    status = copy_blob(&out->worker_address, &m->worker_address);
    if (status != WST_OK) {
        return status;
    }
    for (i = 0; i < m->n_lane_addresses; i++) {
        status = copy_blob(&out->lane_addresses[i], &m->lane_addresses[i]);
        if (status != WST_OK) {
            return status;
        }
        out->n_lane_addresses = i + 1;
    }
    return WST_OK;
}

static wst_status_t convert_have(const Wst__HaveManifest *m,
                                 struct wst_have_manifest *out)
{
    size_t i;

    out->rank = m->rank;
    if (m->n_entries == 0) {
        return WST_OK;
    }
    out->entries = calloc(m->n_entries, sizeof(*out->entries));
    if (out->entries == NULL) {
        return WST_ERR_NO_MEMORY;
    }
    out->n_entries = m->n_entries;
    for (i = 0; i < m->n_entries; i++) {
        fill_have(m->entries[i], &out->entries[i]);
    }
    return WST_OK;
}

static void convert_want_summary(const Wst__WantSummary *m,
                                 struct wst_want_summary *out)
{
    out->receiver_rank = m->receiver_rank;
    out->n_wants = m->n_wants;
    out->n_layers = m->n_layers;
    out->total_bytes = m->total_bytes;
    out->committed_version = m->committed_version;
    out->usable = m->usable ? 1 : 0;
    strcpy(out->reason, m->reason != NULL ? m->reason : "");
    strcpy(out->group, m->group != NULL ? m->group : "");
    out->group_size = m->group_size;
    out->group_member = m->group_member;
    copy_label(out->committed_label, &m->committed_label);
}

static void convert_plan_item(const Wst__PlanItem *it, uint32_t sender,
                              struct wst_plan_item *out)
{
    out->sender = sender;
    out->have = it->have;
    out->src_offset = it->src_offset;
    out->region = it->region;
    out->dst_offset = it->dst_offset;
    out->length = it->length;
    out->layer = it->layer;
    out->staged = it->staged ? 1 : 0;
    out->more_rows = it->more_rows;
    out->src_stride = it->src_stride;
}

/* On failure the caller releases what was already attached to 'out'. */
static wst_status_t convert_plan(const Wst__Plan *m, struct wst_plan_msg *out)
{
    wst_status_t status;
    size_t i;

    out->plan_hash = m->plan_hash;
    out->sender = m->sender;
    out->n_senders = m->n_senders;
    out->n_layers = m->n_layers;
    out->mover = (enum wst_mover_kind)m->mover;
    out->caps = m->caps;
    out->data_token = m->data_token;
    if (m->n_items > 0) {
        out->items = calloc(m->n_items, sizeof(*out->items));
        if (out->items == NULL) {
            return WST_ERR_NO_MEMORY;
        }
        out->n_items = m->n_items;
    }
    for (i = 0; i < m->n_items; i++) {
        convert_plan_item(m->items[i], m->sender, &out->items[i]);
    }
    if (m->n_regions > 0) {
        out->regions = calloc(m->n_regions, sizeof(*out->regions));
        if (out->regions == NULL) {
            return WST_ERR_NO_MEMORY;
        }
        out->n_regions = m->n_regions;
    }
    for (i = 0; i < m->n_regions; i++) {
        out->regions[i].base = m->regions[i]->address;
        out->regions[i].length = m->regions[i]->length;
        out->regions[i].message_max = m->regions[i]->message_max;
        status = copy_blob(&out->regions[i].rkey, &m->regions[i]->rkey);
        if (status != WST_OK) {
            return status;
        }
    }
    return WST_OK;
}

static void convert_small(const Wst__Control *pb, struct wst_msg *msg)
{
    switch (pb->msg_case) {
    case WST__CONTROL__MSG_BEGIN:
        msg->u.begin.version = pb->begin->version;
        msg->u.begin.plan_hash = pb->begin->plan_hash;
        msg->u.begin.ack = pb->begin->ack ? 1 : 0;
        msg->u.begin.mover = (enum wst_mover_kind)pb->begin->mover;
        copy_label(msg->u.begin.label, &pb->begin->label);
        break;
    case WST__CONTROL__MSG_LAYER_DONE:
        msg->u.layer_done.layer = pb->layer_done->layer;
        msg->u.layer_done.version = pb->layer_done->version;
        msg->u.layer_done.bytes = pb->layer_done->bytes;
        msg->u.layer_done.digest = pb->layer_done->digest;
        msg->u.layer_done.n_more = (uint32_t)pb->layer_done->n_more_bytes;
        for (size_t i = 0; i < pb->layer_done->n_more_bytes; i++) {
            msg->u.layer_done.more_bytes[i] = pb->layer_done->more_bytes[i];
            msg->u.layer_done.more_digests[i] = pb->layer_done->more_digests[i];
        }
        break;
    case WST__CONTROL__MSG_COMMIT:
        msg->u.commit.version = pb->commit->version;
        break;
    case WST__CONTROL__MSG_ERROR:
        msg->u.error.status = pb->error->status;
        strcpy(msg->u.error.message,
               pb->error->message != NULL ? pb->error->message : "");
        break;
    case WST__CONTROL__MSG_HEARTBEAT:
        msg->u.heartbeat.seq = pb->heartbeat->seq;
        break;
    case WST__CONTROL__MSG_CREDIT:
        msg->u.credit.version = pb->credit->version;
        msg->u.credit.layer = pb->credit->layer;
        break;
    case WST__CONTROL__MSG_NCCL_SETUP:
        memcpy(msg->u.nccl_setup.unique_id, pb->nccl_setup->unique_id.data,
               WST_NCCL_UNIQUE_ID_BYTES);
        break;
    case WST__CONTROL__MSG_NCCL_READY:
        msg->u.nccl_ready.plan_hash = pb->nccl_ready->plan_hash;
        break;
    case WST__CONTROL__MSG_BARRIER:
        msg->u.barrier.version = pb->barrier->version;
        msg->u.barrier.step = (enum wst_barrier_step)pb->barrier->step;
        break;
    default:
        break;
    }
}

/* 'pb' has passed check_control. */
static wst_status_t convert_control(const Wst__Control *pb, struct wst_msg *msg)
{
    msg->type = (enum wst_msg_type)pb->msg_case;
    switch (pb->msg_case) {
    case WST__CONTROL__MSG_HELLO:
        return convert_hello(pb->hello, &msg->u.hello);
    case WST__CONTROL__MSG_HAVE:
        return convert_have(pb->have, &msg->u.have);
    case WST__CONTROL__MSG_WANT_SUMMARY:
        convert_want_summary(pb->want_summary, &msg->u.want_summary);
        return WST_OK;
    case WST__CONTROL__MSG_PLAN:
        return convert_plan(pb->plan, &msg->u.plan);
    default:
        convert_small(pb, msg);
        return WST_OK;
    }
}

wst_status_t wst_msg_decode(const void *buf, size_t len, size_t max_len,
                            struct wst_msg *msg, char *err, size_t errlen)
{
    Wst__Control *pb = NULL;
    wst_status_t status;

    wst_errf(err, errlen, "%s", "");
    if (msg == NULL || (buf == NULL && len > 0)) {
        wst_errf(err, errlen, "decode: no message or buffer");
        return WST_ERR_INVALID;
    }
    memset(msg, 0, sizeof(*msg));
    /* Before protobuf-c allocates anything for it. */
    if (len > max_len) {
        wst_errf(err, errlen, "control message of %zu bytes, limit %zu", len,
                 max_len);
        return WST_ERR_TOO_LARGE;
    }
    pb = wst__control__unpack(NULL, len, buf);
    if (pb == NULL) {
        wst_errf(err, errlen, "control message of %zu bytes: unparsable", len);
        return WST_ERR_PROTOCOL;
    }
    status = check_control(pb, err, errlen);
    if (status != WST_OK) {
        goto out_free_unpacked;
    }
    status = convert_control(pb, msg);
    if (status != WST_OK) {
        wst_errf(err, errlen, "decode %s: out of memory",
                 wst_msg_type_name(msg->type));
        wst_msg_release(msg);
    }
out_free_unpacked:
    wst__control__free_unpacked(pb, NULL);
    return status;
}

void wst_msg_release(struct wst_msg *msg)
{
    size_t i;

    if (msg == NULL) {
        return;
    }
    switch (msg->type) {
    case WST_MSG_HELLO:
        free(msg->u.hello.auth.data);
        free(msg->u.hello.worker_address.data);
        for (i = 0; i < msg->u.hello.n_lane_addresses; i++) {
            free(msg->u.hello.lane_addresses[i].data);
        }
        break;
    case WST_MSG_HAVE:
        free(msg->u.have.entries);
        break;
    case WST_MSG_PLAN:
        for (i = 0; i < msg->u.plan.n_regions; i++) {
            free(msg->u.plan.regions[i].rkey.data);
        }
        free(msg->u.plan.regions);
        free(msg->u.plan.items);
        break;
    default:
        break;
    }
    memset(msg, 0, sizeof(*msg));
}

/* ---- encoding ---- */

/* protobuf-c structs that borrow the caller's message, plus the arrays
 * encoding had to allocate to hold them. */
struct pb_build {
    Wst__Control ctl;
    Wst__Hello hello;
    Wst__HaveManifest have;
    Wst__WantSummary want_summary;
    Wst__Plan plan;
    Wst__Begin begin;
    Wst__LayerDone layer_done;
    Wst__Commit commit;
    Wst__Error error;
    Wst__Heartbeat heartbeat;
    Wst__Credit credit;
    Wst__NcclSetup nccl_setup;
    Wst__NcclReady nccl_ready;
    Wst__Barrier barrier;
    ProtobufCBinaryData lane_addresses[WST_HELLO_LANES_MAX];
    Wst__HaveEntry *entries;
    Wst__HaveEntry **entry_ptrs;
    Wst__PlanItem *items;
    Wst__PlanItem **item_ptrs;
    Wst__Region *regions;
    Wst__Region **region_ptrs;
};

static int blob_ok(const struct wst_blob *b)
{
    return b->len <= WST_MAX_BLOB && (b->len == 0 || b->data != NULL);
}

static int hello_ok(const struct wst_hello *h)
{
    size_t i;

    if (!blob_ok(&h->auth) || !blob_ok(&h->worker_address) ||
        h->n_lane_addresses > WST_HELLO_LANES_MAX) {
        return 0;
    }
    for (i = 0; i < h->n_lane_addresses; i++) {
        if (!blob_ok(&h->lane_addresses[i])) {
            return 0;
        }
    }
    return 1;
}

static int have_ok(const struct wst_have *h)
{
    return strnlen(h->tensor.name, WST_NAME_MAX) < WST_NAME_MAX &&
           h->tensor.ndim <= WST_MAX_DIMS && h->box.ndim <= WST_MAX_DIMS;
}

static int plan_ok(const struct wst_plan_msg *p)
{
    size_t i;

    if (p->n_items > WST_MAX_PLAN_ITEMS || p->n_regions > WST_MAX_REGIONS ||
        (p->n_items > 0 && p->items == NULL) ||
        (p->n_regions > 0 && p->regions == NULL)) {
        return 0;
    }
    for (i = 0; i < p->n_items; i++) {
        if (p->items[i].sender != p->sender) {
            return 0;
        }
    }
    for (i = 0; i < p->n_regions; i++) {
        if (!blob_ok(&p->regions[i].rkey)) {
            return 0;
        }
    }
    return 1;
}

/* What check_control cannot see once the message is in protobuf-c form,
 * and what must hold before building that form reads the arrays. */
static int precheck(const struct wst_msg *msg)
{
    size_t i;

    switch (msg->type) {
    case WST_MSG_HELLO:
        return hello_ok(&msg->u.hello);
    case WST_MSG_HAVE:
        if (msg->u.have.n_entries > WST_MAX_HAVES ||
            (msg->u.have.n_entries > 0 && msg->u.have.entries == NULL)) {
            return 0;
        }
        for (i = 0; i < msg->u.have.n_entries; i++) {
            if (!have_ok(&msg->u.have.entries[i])) {
                return 0;
            }
        }
        return 1;
    case WST_MSG_WANT_SUMMARY:
        return strnlen(msg->u.want_summary.reason, WST_ERROR_MSG_MAX) <
                   WST_ERROR_MSG_MAX &&
               strnlen(msg->u.want_summary.group, WST_GROUP_NAME_MAX) <
                   WST_GROUP_NAME_MAX &&
               strnlen(msg->u.want_summary.committed_label, WST_LABEL_MAX) <
                   WST_LABEL_MAX;
    case WST_MSG_PLAN:
        return plan_ok(&msg->u.plan);
    case WST_MSG_ERROR:
        return strnlen(msg->u.error.message, WST_ERROR_MSG_MAX) <
               WST_ERROR_MSG_MAX;
    case WST_MSG_BEGIN:
        return strnlen(msg->u.begin.label, WST_LABEL_MAX) < WST_LABEL_MAX;
    case WST_MSG_LAYER_DONE:
    case WST_MSG_COMMIT:
    case WST_MSG_HEARTBEAT:
        return 1;
    case WST_MSG_CREDIT:
        return msg->u.credit.version >= 1;
    case WST_MSG_NCCL_SETUP:
    case WST_MSG_NCCL_READY:
    case WST_MSG_BARRIER:
        return 1;
    }
    return 0;
}

static ProtobufCBinaryData pb_blob(const struct wst_blob *b)
{
    ProtobufCBinaryData d = {b->len, b->data};
    return d;
}

static void build_hello(const struct wst_hello *h, struct pb_build *b)
{
    Wst__Hello *m = &b->hello;
    size_t i;

    wst__hello__init(m);
    m->protocol_version = h->protocol_version;
    m->role = (uint32_t)h->role;
    m->rank = h->rank;
    m->world_size = h->world_size;
    m->session = h->session;
    m->tcp_rx_seg = h->tcp_rx_seg;
    m->auth = pb_blob(&h->auth);
    m->worker_address = pb_blob(&h->worker_address);
    for (i = 0; i < h->n_lane_addresses; i++) {
        b->lane_addresses[i] = pb_blob(&h->lane_addresses[i]);
    }
    m->n_lane_addresses = h->n_lane_addresses;
    m->lane_addresses = b->lane_addresses;
}

/* The casts drop const only because protobuf-c's structs are shared between
 * packing (reads) and unpacking (writes); packing never writes. */
static void build_have_entry(const struct wst_have *h, Wst__HaveEntry *e)
{
    wst__have_entry__init(e);
    e->name = (char *)h->tensor.name;
    e->dtype = (uint32_t)h->tensor.dtype;
    e->n_shape = h->tensor.ndim;
    e->shape = (uint64_t *)h->tensor.shape;
    e->n_box_start = h->box.ndim;
    e->box_start = (uint64_t *)h->box.start;
    e->n_box_stop = h->box.ndim;
    e->box_stop = (uint64_t *)h->box.stop;
    e->flat = h->flat != 0;
    e->mem_type = (uint32_t)h->mem;
}

static wst_status_t build_have(const struct wst_have_manifest *h,
                               struct pb_build *b)
{
    size_t n = h->n_entries;
    size_t i;

    wst__have_manifest__init(&b->have);
    b->have.rank = h->rank;
    if (n == 0) {
        return WST_OK;
    }
    b->entries = calloc(n, sizeof(*b->entries));
    b->entry_ptrs = calloc(n, sizeof(*b->entry_ptrs));
    if (b->entries == NULL || b->entry_ptrs == NULL) {
        return WST_ERR_NO_MEMORY;
    }
    for (i = 0; i < n; i++) {
        build_have_entry(&h->entries[i], &b->entries[i]);
        b->entry_ptrs[i] = &b->entries[i];
    }
    b->have.n_entries = n;
    b->have.entries = b->entry_ptrs;
    return WST_OK;
}

static void build_want_summary(const struct wst_want_summary *w,
                               Wst__WantSummary *m)
{
    wst__want_summary__init(m);
    m->receiver_rank = w->receiver_rank;
    m->n_wants = w->n_wants;
    m->n_layers = w->n_layers;
    m->total_bytes = w->total_bytes;
    m->committed_version = w->committed_version;
    m->usable = w->usable != 0;
    m->reason = (char *)w->reason;
    m->group = (char *)w->group;
    m->group_size = w->group_size;
    m->group_member = w->group_member;
    m->committed_label = pb_label(w->committed_label);
}

static void build_plan_item(const struct wst_plan_item *it, Wst__PlanItem *m)
{
    wst__plan_item__init(m);
    m->have = it->have;
    m->src_offset = it->src_offset;
    m->region = it->region;
    m->dst_offset = it->dst_offset;
    m->length = it->length;
    m->layer = it->layer;
    m->staged = it->staged != 0;
    m->more_rows = it->more_rows;
    m->src_stride = it->src_stride;
}

static wst_status_t build_plan_arrays(const struct wst_plan_msg *p,
                                      struct pb_build *b)
{
    size_t i;

    b->items = calloc(p->n_items + 1, sizeof(*b->items));
    b->item_ptrs = calloc(p->n_items + 1, sizeof(*b->item_ptrs));
    b->regions = calloc(p->n_regions + 1, sizeof(*b->regions));
    b->region_ptrs = calloc(p->n_regions + 1, sizeof(*b->region_ptrs));
    if (b->items == NULL || b->item_ptrs == NULL || b->regions == NULL ||
        b->region_ptrs == NULL) {
        return WST_ERR_NO_MEMORY;
    }
    for (i = 0; i < p->n_items; i++) {
        build_plan_item(&p->items[i], &b->items[i]);
        b->item_ptrs[i] = &b->items[i];
    }
    for (i = 0; i < p->n_regions; i++) {
        wst__region__init(&b->regions[i]);
        b->regions[i].address = p->regions[i].base;
        b->regions[i].length = p->regions[i].length;
        b->regions[i].rkey = pb_blob(&p->regions[i].rkey);
        b->regions[i].message_max = p->regions[i].message_max;
        b->region_ptrs[i] = &b->regions[i];
    }
    return WST_OK;
}

static wst_status_t build_plan(const struct wst_plan_msg *p, struct pb_build *b)
{
    wst__plan__init(&b->plan);
    b->plan.plan_hash = p->plan_hash;
    b->plan.sender = p->sender;
    b->plan.n_senders = p->n_senders;
    b->plan.n_layers = p->n_layers;
    b->plan.mover = (uint32_t)p->mover;
    b->plan.caps = p->caps;
    b->plan.data_token = p->data_token;
    b->plan.n_items = p->n_items;
    b->plan.n_regions = p->n_regions;
    return build_plan_arrays(p, b);
}

/* Begin, layer_done, commit, error, heartbeat, credit, the nccl pair and
 * barrier: no arrays to build. */
static void build_small(const struct wst_msg *msg, struct pb_build *b)
{
    switch (msg->type) {
    case WST_MSG_BEGIN:
        wst__begin__init(&b->begin);
        b->begin.version = msg->u.begin.version;
        b->begin.plan_hash = msg->u.begin.plan_hash;
        b->begin.ack = msg->u.begin.ack != 0;
        b->begin.mover = (uint32_t)msg->u.begin.mover;
        b->begin.label = pb_label(msg->u.begin.label);
        b->ctl.begin = &b->begin;
        break;
    case WST_MSG_LAYER_DONE:
        wst__layer_done__init(&b->layer_done);
        b->layer_done.layer = msg->u.layer_done.layer;
        b->layer_done.version = msg->u.layer_done.version;
        b->layer_done.bytes = msg->u.layer_done.bytes;
        b->layer_done.digest = msg->u.layer_done.digest;
        /* Borrowed from msg, which outlives the packing. */
        b->layer_done.n_more_bytes = msg->u.layer_done.n_more;
        b->layer_done.more_bytes = (uint64_t *)msg->u.layer_done.more_bytes;
        b->layer_done.n_more_digests = msg->u.layer_done.n_more;
        b->layer_done.more_digests = (uint64_t *)msg->u.layer_done.more_digests;
        b->ctl.layer_done = &b->layer_done;
        break;
    case WST_MSG_COMMIT:
        wst__commit__init(&b->commit);
        b->commit.version = msg->u.commit.version;
        b->ctl.commit = &b->commit;
        break;
    case WST_MSG_ERROR:
        wst__error__init(&b->error);
        b->error.status = msg->u.error.status;
        b->error.message = (char *)msg->u.error.message;
        b->ctl.error = &b->error;
        break;
    case WST_MSG_CREDIT:
        wst__credit__init(&b->credit);
        b->credit.version = msg->u.credit.version;
        b->credit.layer = msg->u.credit.layer;
        b->ctl.credit = &b->credit;
        break;
    case WST_MSG_NCCL_SETUP:
        wst__nccl_setup__init(&b->nccl_setup);
        b->nccl_setup.unique_id.len = WST_NCCL_UNIQUE_ID_BYTES;
        b->nccl_setup.unique_id.data = (uint8_t *)msg->u.nccl_setup.unique_id;
        b->ctl.nccl_setup = &b->nccl_setup;
        break;
    case WST_MSG_NCCL_READY:
        wst__nccl_ready__init(&b->nccl_ready);
        b->nccl_ready.plan_hash = msg->u.nccl_ready.plan_hash;
        b->ctl.nccl_ready = &b->nccl_ready;
        break;
    case WST_MSG_BARRIER:
        wst__barrier__init(&b->barrier);
        b->barrier.version = msg->u.barrier.version;
        b->barrier.step = (uint32_t)msg->u.barrier.step;
        b->ctl.barrier = &b->barrier;
        break;
    default:
        wst__heartbeat__init(&b->heartbeat);
        b->heartbeat.seq = msg->u.heartbeat.seq;
        b->ctl.heartbeat = &b->heartbeat;
        break;
    }
}

/* Fills b->ctl; msg has passed precheck, so msg->type is known. */
static wst_status_t build_control(const struct wst_msg *msg, struct pb_build *b)
{
    wst_status_t status = WST_OK;

    wst__control__init(&b->ctl);
    b->ctl.msg_case = (Wst__Control__MsgCase)msg->type;
    switch (msg->type) {
    case WST_MSG_HELLO:
        build_hello(&msg->u.hello, b);
        b->ctl.hello = &b->hello;
        break;
    case WST_MSG_HAVE:
        status = build_have(&msg->u.have, b);
        b->ctl.have = &b->have;
        break;
    case WST_MSG_WANT_SUMMARY:
        build_want_summary(&msg->u.want_summary, &b->want_summary);
        b->ctl.want_summary = &b->want_summary;
        break;
    case WST_MSG_PLAN:
        status = build_plan(&msg->u.plan, b);
        b->plan.items = b->item_ptrs;
        b->plan.regions = b->region_ptrs;
        b->ctl.plan = &b->plan;
        break;
    default:
        build_small(msg, b);
        break;
    }
    return status;
}

static void pb_build_free(struct pb_build *b)
{
    free(b->entries);
    free(b->entry_ptrs);
    free(b->items);
    free(b->item_ptrs);
    free(b->regions);
    free(b->region_ptrs);
}

wst_status_t wst_msg_encode(const struct wst_msg *msg, uint8_t **buf_p,
                            size_t *len_p)
{
    struct pb_build b;
    uint8_t *buf = NULL;
    size_t len;
    wst_status_t status;

    if (msg == NULL || buf_p == NULL || len_p == NULL || !precheck(msg)) {
        return WST_ERR_INVALID;
    }
    memset(&b, 0, sizeof(b));
    status = build_control(msg, &b);
    if (status != WST_OK) {
        goto out_free_build;
    }
    if (check_control(&b.ctl, NULL, 0) != WST_OK) {
        status = WST_ERR_INVALID;
        goto out_free_build;
    }
    len = wst__control__get_packed_size(&b.ctl);
    buf = malloc(len > 0 ? len : 1);
    if (buf == NULL) {
        status = WST_ERR_NO_MEMORY;
        goto out_free_build;
    }
    wst__control__pack(&b.ctl, buf);
    *buf_p = buf;
    *len_p = len;
out_free_build:
    pb_build_free(&b);
    return status;
}

/* ---- sender-side plan check and names ---- */

/* Bytes of a have's shard buffer (manifest.h: dense box, or flat range).
 * The have is the sender's own and already validated; nonsense still
 * yields 0 so every item is refused rather than trusted. */
static uint64_t have_shard_bytes(const struct wst_have *h)
{
    uint64_t esize = wst_dtype_size(h->tensor.dtype);
    uint64_t elems;
    uint64_t bytes;

    if (h->flat) {
        elems = h->box.stop[0] >= h->box.start[0]
                    ? h->box.stop[0] - h->box.start[0]
                    : 0;
    } else {
        elems = wst_box_elems(&h->box);
    }
    if (__builtin_mul_overflow(elems, esize, &bytes)) {
        return 0;
    }
    return bytes;
}

static wst_status_t check_item_local(const struct wst_plan_msg *plan, size_t i,
                                     const struct wst_have *haves,
                                     size_t n_haves, char *err, size_t errlen)
{
    const struct wst_plan_item *it = &plan->items[i];
    /* The codec checked that rows neither overflow nor overlap. */
    uint64_t src_end =
        it->src_offset + (uint64_t)it->more_rows * it->src_stride + it->length;
    uint64_t dst_end = it->dst_offset + wst_plan_item_bytes(it);
    uint64_t shard;

    if (it->sender != plan->sender) {
        wst_errf(err, errlen,
                 "plan item %zu: sender %" PRIu32 ", plan is for "
                 "sender %" PRIu32,
                 i, it->sender, plan->sender);
        return WST_ERR_PROTOCOL;
    }
    if (it->have >= n_haves) {
        wst_errf(err, errlen, "plan item %zu: have %" PRIu32 " of %zu", i,
                 it->have, n_haves);
        return WST_ERR_PROTOCOL;
    }
    shard = have_shard_bytes(&haves[it->have]);
    if (src_end < it->src_offset || src_end > shard) {
        wst_errf(err, errlen,
                 "plan item %zu: source bytes [%" PRIu64 ", %" PRIu64
                 ") past the end of have %" PRIu32 " '%s' (%" PRIu64 " bytes)",
                 i, it->src_offset, src_end, it->have,
                 haves[it->have].tensor.name, shard);
        return WST_ERR_PROTOCOL;
    }
    if (it->region >= plan->n_regions || dst_end < it->dst_offset ||
        dst_end > plan->regions[it->region].length) {
        wst_errf(err, errlen,
                 "plan item %zu: dst_offset %" PRIu64 " + length "
                 "%" PRIu64 " outside region %" PRIu32 " of %zu",
                 i, it->dst_offset, it->length, it->region, plan->n_regions);
        return WST_ERR_PROTOCOL;
    }
    if (it->layer >= plan->n_layers) {
        wst_errf(err, errlen, "plan item %zu: layer %" PRIu32 " of %" PRIu32, i,
                 it->layer, plan->n_layers);
        return WST_ERR_PROTOCOL;
    }
    return WST_OK;
}

wst_status_t wst_plan_msg_check(const struct wst_plan_msg *plan,
                                const struct wst_have *haves, size_t n_haves,
                                char *err, size_t errlen)
{
    wst_status_t status;
    uint64_t hash;
    size_t i;

    if (plan == NULL || (plan->n_items > 0 && plan->items == NULL) ||
        (plan->n_regions > 0 && plan->regions == NULL) ||
        (n_haves > 0 && haves == NULL)) {
        wst_errf(err, errlen, "plan check: missing plan, items or haves");
        return WST_ERR_INVALID;
    }
    for (i = 0; i < plan->n_items; i++) {
        status = check_item_local(plan, i, haves, n_haves, err, errlen);
        if (status != WST_OK) {
            return status;
        }
    }
    hash = wst_plan_hash_items(plan->n_senders, plan->n_layers, plan->items,
                               plan->n_items);
    if (hash != plan->plan_hash) {
        wst_errf(err, errlen,
                 "plan: hash 0x%016" PRIx64 " of %zu items, "
                 "message says 0x%016" PRIx64,
                 hash, plan->n_items, plan->plan_hash);
        return WST_ERR_PROTOCOL;
    }
    return WST_OK;
}

const char *wst_msg_type_name(enum wst_msg_type type)
{
    switch (type) {
    case WST_MSG_HELLO:
        return "hello";
    case WST_MSG_HAVE:
        return "have";
    case WST_MSG_WANT_SUMMARY:
        return "want_summary";
    case WST_MSG_PLAN:
        return "plan";
    case WST_MSG_BEGIN:
        return "begin";
    case WST_MSG_LAYER_DONE:
        return "layer_done";
    case WST_MSG_COMMIT:
        return "commit";
    case WST_MSG_ERROR:
        return "error";
    case WST_MSG_HEARTBEAT:
        return "heartbeat";
    case WST_MSG_CREDIT:
        return "credit";
    case WST_MSG_NCCL_SETUP:
        return "nccl_setup";
    case WST_MSG_NCCL_READY:
        return "nccl_ready";
    case WST_MSG_BARRIER:
        return "barrier";
    }
    return "unknown";
}
