/* test_codec.c - control message encoding, decoding and validation.
 *
 * Round trips of every message type, then messages that lie (built by
 * packing protobuf-c structs directly, as a hostile or buggy peer would),
 * the sender-side plan check, and random mutations of valid messages.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "codec.h"
#include "heartbeat_msg.h"
#include "wstream.pb-c.h"

#define ERRLEN 512

static const struct wst_msg zero_msg;

/* Asserts the documented failure contract: status, zeroed msg, a reason. */
static void assert_decode_fails(const void *buf, size_t len, size_t max_len,
                                wst_status_t expected, const char *reason)
{
    struct wst_msg msg;
    char err[ERRLEN] = "";

    memset(&msg, 0xa5, sizeof(msg));
    assert_int_equal(wst_msg_decode(buf, len, max_len, &msg, err, ERRLEN),
                     expected);
    assert_memory_equal(&msg, &zero_msg, sizeof(msg));
    assert_string_equal(err, reason);
}

/* Packs a hand-built envelope, as a lying peer would send it. */
static uint8_t *pack_control(const Wst__Control *ctl, size_t *len_p)
{
    size_t len = wst__control__get_packed_size(ctl);
    uint8_t *buf = malloc(len > 0 ? len : 1);

    assert_non_null(buf);
    assert_int_equal(wst__control__pack(ctl, buf), len);
    *len_p = len;
    return buf;
}

/* Packs ctl and decodes it into *msg, which must succeed. */
static void decode_control(const Wst__Control *ctl, struct wst_msg *msg)
{
    char err[ERRLEN];
    size_t len;
    uint8_t *buf = pack_control(ctl, &len);

    assert_int_equal(
        wst_msg_decode(buf, len, WST_MSG_MAX_DEFAULT, msg, err, ERRLEN),
        WST_OK);
    free(buf);
}

static void assert_control_refused(const Wst__Control *ctl, const char *reason)
{
    size_t len;
    uint8_t *buf = pack_control(ctl, &len);

    assert_decode_fails(buf, len, WST_MSG_MAX_DEFAULT, WST_ERR_PROTOCOL,
                        reason);
    free(buf);
}

/* With WST_FUZZ_SEED_DIR set, every message a round trip encodes is also
 * written there, one file each: the codec fuzz harness's seed corpus
 * (tests/fuzz/make_corpus.sh). */
static void write_seed(const struct wst_msg *m, const uint8_t *buf, size_t len)
{
    static unsigned seq;
    const char *dir = getenv("WST_FUZZ_SEED_DIR");
    char path[4096];
    FILE *f;

    if (dir == NULL || dir[0] == '\0')
        return;
    snprintf(path, sizeof(path), "%s/%s-%02u", dir, wst_msg_type_name(m->type),
             seq++);
    f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(buf, 1, len, f), len);
    assert_int_equal(fclose(f), 0);
}

/* Encodes 'in' and decodes it into 'out' (caller releases). */
static void roundtrip(const struct wst_msg *in, struct wst_msg *out)
{
    uint8_t *buf = NULL;
    size_t len = 0;
    char err[ERRLEN] = "";

    assert_int_equal(wst_msg_encode(in, &buf, &len), WST_OK);
    write_seed(in, buf, len);
    assert_int_equal(
        wst_msg_decode(buf, len, WST_MSG_MAX_DEFAULT, out, err, ERRLEN),
        WST_OK);
    assert_string_equal(err, "");
    assert_int_equal(out->type, in->type);
    free(buf);
}

/* ---- sample messages ---- */

static uint8_t auth_bytes[3] = {1, 2, 3};
static uint8_t addr_bytes[5] = {9, 8, 7, 6, 5};
static uint8_t rkey_bytes[4] = {0xde, 0xad, 0xbe, 0xef};

static void sample_haves(struct wst_have h[2])
{
    memset(h, 0, 2 * sizeof(*h));
    strcpy(h[0].tensor.name, "model.layers.0.self_attn.q_proj.weight");
    h[0].tensor.dtype = WST_DTYPE_BF16;
    h[0].tensor.ndim = 2;
    h[0].tensor.shape[0] = 8;
    h[0].tensor.shape[1] = 16;
    h[0].box.ndim = 2;
    h[0].box.start[0] = 0;
    h[0].box.start[1] = 0;
    h[0].box.stop[0] = 4;
    h[0].box.stop[1] = 16; /* 64 elements, 128 bytes */
    h[0].mem = WST_MEM_HOST;

    strcpy(h[1].tensor.name, "model.norm.weight");
    h[1].tensor.dtype = WST_DTYPE_F32;
    h[1].tensor.ndim = 1;
    h[1].tensor.shape[0] = 100;
    h[1].box.ndim = 1;
    h[1].box.start[0] = 10;
    h[1].box.stop[0] = 30; /* 20 elements, 80 bytes */
    h[1].flat = 1;
    h[1].mem = WST_MEM_HOST;
}

static struct wst_plan_item sample_items[2] = {
    {.sender = 1,
     .have = 0,
     .src_offset = 0,
     .region = 0,
     .dst_offset = 0,
     .length = 128,
     .layer = 0,
     .staged = 1},
    {.sender = 1,
     .have = 1,
     .src_offset = 0,
     .region = 1,
     .dst_offset = 16,
     .length = 80,
     .layer = 1},
};

static struct wst_wire_region sample_regions[2] = {
    {.base = 0x7f0000001000,
     .length = 4096,
     .rkey = {.len = sizeof(rkey_bytes), .data = rkey_bytes}},
    {.base = 0x7f0000100000, .length = 96, .rkey = {.len = 0, .data = NULL}},
};

static void sample_plan(struct wst_msg *m)
{
    memset(m, 0, sizeof(*m));
    m->type = WST_MSG_PLAN;
    m->u.plan.sender = 1;
    m->u.plan.n_senders = 2;
    m->u.plan.n_layers = 2;
    m->u.plan.mover = WST_MOVER_PUT;
    m->u.plan.caps = WST_CAP_DEVICE_DST | WST_CAP_NCCL;
    m->u.plan.n_items = 2;
    m->u.plan.items = sample_items;
    m->u.plan.n_regions = 2;
    m->u.plan.regions = sample_regions;
    m->u.plan.plan_hash = wst_plan_hash_items(2, 2, sample_items, 2);
}

/* ---- round trips ---- */

static void test_codec_roundtrip_hello(void **state)
{
    struct wst_msg in, out;

    (void)state;
    memset(&in, 0, sizeof(in));
    in.type = WST_MSG_HELLO;
    in.u.hello.protocol_version = WST_PROTOCOL_VERSION;
    in.u.hello.role = WST_ROLE_RECEIVER;
    in.u.hello.rank = 3;
    in.u.hello.world_size = 8;
    in.u.hello.session = 0x0123456789abcdefull;
    in.u.hello.tcp_rx_seg = 1ull << 20;
    in.u.hello.auth.len = sizeof(auth_bytes);
    in.u.hello.auth.data = auth_bytes;
    in.u.hello.worker_address.len = sizeof(addr_bytes);
    in.u.hello.worker_address.data = addr_bytes;
    roundtrip(&in, &out);
    assert_int_equal(out.u.hello.protocol_version, WST_PROTOCOL_VERSION);
    assert_int_equal(out.u.hello.role, WST_ROLE_RECEIVER);
    assert_int_equal(out.u.hello.rank, 3);
    assert_int_equal(out.u.hello.world_size, 8);
    assert_true(out.u.hello.session == 0x0123456789abcdefull);
    assert_true(out.u.hello.tcp_rx_seg == 1ull << 20);
    assert_int_equal(out.u.hello.auth.len, 3);
    assert_memory_equal(out.u.hello.auth.data, auth_bytes, 3);
    assert_int_equal(out.u.hello.worker_address.len, 5);
    assert_memory_equal(out.u.hello.worker_address.data, addr_bytes, 5);
    assert_int_equal(out.u.hello.n_lane_addresses, 0);
    wst_msg_release(&out);
    assert_memory_equal(&out, &zero_msg, sizeof(out));
}

/* A receiver with four data lanes names lanes 1..3 after its own address;
 * decoding copies each, releasing frees them. */
static void test_codec_roundtrip_hello_lanes(void **state)
{
    uint8_t lane_bytes[3][6] = {
        {1, 1, 1, 1, 1, 1}, {2, 2, 2, 2, 2, 2}, {3, 3, 3, 3, 3, 3}};
    struct wst_msg in, out;
    size_t i;

    (void)state;
    memset(&in, 0, sizeof(in));
    in.type = WST_MSG_HELLO;
    in.u.hello.protocol_version = WST_PROTOCOL_VERSION;
    in.u.hello.role = WST_ROLE_RECEIVER;
    in.u.hello.world_size = 1;
    in.u.hello.worker_address.len = sizeof(addr_bytes);
    in.u.hello.worker_address.data = addr_bytes;
    in.u.hello.n_lane_addresses = 3;
    for (i = 0; i < 3; i++) {
        in.u.hello.lane_addresses[i].len = sizeof(lane_bytes[i]) - i;
        in.u.hello.lane_addresses[i].data = lane_bytes[i];
    }
    roundtrip(&in, &out);
    assert_int_equal(out.u.hello.worker_address.len, 5);
    assert_memory_equal(out.u.hello.worker_address.data, addr_bytes, 5);
    assert_int_equal(out.u.hello.n_lane_addresses, 3);
    for (i = 0; i < 3; i++) {
        assert_int_equal(out.u.hello.lane_addresses[i].len, 6 - i);
        assert_memory_equal(out.u.hello.lane_addresses[i].data, lane_bytes[i],
                            6 - i);
        assert_ptr_not_equal(out.u.hello.lane_addresses[i].data, lane_bytes[i]);
    }
    wst_msg_release(&out);
    assert_memory_equal(&out, &zero_msg, sizeof(out));
}

/* Eight further lanes are one more than a worker can have: refused on
 * decode with the field and the limit named, and never encoded. */
static void test_codec_hello_too_many_lanes_refused(void **state)
{
    Wst__Control ctl = WST__CONTROL__INIT;
    Wst__Hello h = WST__HELLO__INIT;
    ProtobufCBinaryData lanes[WST_HELLO_LANES_MAX + 1];
    uint8_t lane_byte = 7;
    struct wst_msg m;
    uint8_t *buf = NULL;
    size_t len = 0;
    size_t i;

    (void)state;
    for (i = 0; i < WST_HELLO_LANES_MAX + 1; i++) {
        lanes[i].len = 1;
        lanes[i].data = &lane_byte;
    }
    ctl.msg_case = WST__CONTROL__MSG_HELLO;
    ctl.hello = &h;
    h.role = WST_ROLE_RECEIVER;
    h.n_lane_addresses = WST_HELLO_LANES_MAX + 1;
    h.lane_addresses = lanes;
    assert_control_refused(&ctl, "hello lane_addresses: 8, limit 7");
    h.n_lane_addresses = WST_HELLO_LANES_MAX;
    decode_control(&ctl, &m);
    assert_int_equal(m.u.hello.n_lane_addresses, WST_HELLO_LANES_MAX);
    wst_msg_release(&m);

    memset(&m, 0, sizeof(m));
    m.type = WST_MSG_HELLO;
    m.u.hello.protocol_version = WST_PROTOCOL_VERSION;
    m.u.hello.role = WST_ROLE_RECEIVER;
    m.u.hello.n_lane_addresses = WST_HELLO_LANES_MAX + 1;
    assert_int_equal(wst_msg_encode(&m, &buf, &len), WST_ERR_INVALID);
    assert_null(buf);
}

static void test_codec_roundtrip_have(void **state)
{
    struct wst_have h[2];
    struct wst_msg in, out;
    size_t i;

    (void)state;
    sample_haves(h);
    memset(&in, 0, sizeof(in));
    in.type = WST_MSG_HAVE;
    in.u.have.rank = 5;
    in.u.have.n_entries = 2;
    in.u.have.entries = h;
    roundtrip(&in, &out);
    assert_int_equal(out.u.have.rank, 5);
    assert_int_equal(out.u.have.n_entries, 2);
    for (i = 0; i < 2; i++) {
        const struct wst_have *o = &out.u.have.entries[i];
        assert_string_equal(o->tensor.name, h[i].tensor.name);
        assert_int_equal(o->tensor.dtype, h[i].tensor.dtype);
        assert_int_equal(o->tensor.ndim, h[i].tensor.ndim);
        assert_memory_equal(o->tensor.shape, h[i].tensor.shape,
                            sizeof(o->tensor.shape));
        assert_int_equal(o->box.ndim, h[i].box.ndim);
        assert_memory_equal(o->box.start, h[i].box.start, sizeof(o->box.start));
        assert_memory_equal(o->box.stop, h[i].box.stop, sizeof(o->box.stop));
        assert_int_equal(o->flat, h[i].flat);
        assert_int_equal(o->mem, h[i].mem);
    }
    wst_msg_release(&out);
}

static void test_codec_roundtrip_want_summary(void **state)
{
    struct wst_msg in, out;

    (void)state;
    memset(&in, 0, sizeof(in));
    in.type = WST_MSG_WANT_SUMMARY;
    in.u.want_summary.receiver_rank = 2;
    in.u.want_summary.n_wants = 291;
    in.u.want_summary.n_layers = 33;
    in.u.want_summary.total_bytes = 16ull << 30;
    in.u.want_summary.committed_version = 41;
    in.u.want_summary.usable = 0;
    strcpy(in.u.want_summary.reason, "layer 12 digest mismatch (version 41)");
    strcpy(in.u.want_summary.group, "engine-7");
    in.u.want_summary.group_size = 4;
    in.u.want_summary.group_member = 3;
    roundtrip(&in, &out);
    assert_string_equal(out.u.want_summary.group, "engine-7");
    assert_int_equal(out.u.want_summary.group_size, 4);
    assert_int_equal(out.u.want_summary.group_member, 3);
    assert_int_equal(out.u.want_summary.receiver_rank, 2);
    assert_int_equal(out.u.want_summary.n_wants, 291);
    assert_int_equal(out.u.want_summary.n_layers, 33);
    assert_true(out.u.want_summary.total_bytes == 16ull << 30);
    assert_int_equal(out.u.want_summary.committed_version, 41);
    assert_int_equal(out.u.want_summary.usable, 0);
    assert_string_equal(out.u.want_summary.reason,
                        "layer 12 digest mismatch (version 41)");
    wst_msg_release(&out);
}

static void test_codec_roundtrip_barrier(void **state)
{
    struct wst_msg in, out;

    (void)state;
    memset(&in, 0, sizeof(in));
    in.type = WST_MSG_BARRIER;
    in.u.barrier.version = 9;
    in.u.barrier.step = WST_BARRIER_PREPARED;
    roundtrip(&in, &out);
    assert_int_equal(out.u.barrier.version, 9);
    assert_int_equal(out.u.barrier.step, WST_BARRIER_PREPARED);
    wst_msg_release(&out);
}

/* A peer's group membership and barrier steps are checked like any field. */
static void test_codec_refuses_bad_groups_and_barriers(void **state)
{
    Wst__Control ctl = WST__CONTROL__INIT;
    Wst__WantSummary ws = WST__WANT_SUMMARY__INIT;
    Wst__Barrier b = WST__BARRIER__INIT;
    char name[80];

    (void)state;
    ctl.msg_case = WST__CONTROL__MSG_WANT_SUMMARY;
    ctl.want_summary = &ws;
    ws.group_size = 0;
    assert_control_refused(&ctl, "want_summary: group member 0 of 0 "
                                 "(size 1..4096)");
    ws.group_size = 2;
    ws.group_member = 2;
    assert_control_refused(&ctl, "want_summary: group member 2 of 2 "
                                 "(size 1..4096)");
    ws.group_member = 1;
    memset(name, 'g', sizeof(name) - 1);
    name[sizeof(name) - 1] = '\0';
    ws.group = name;
    assert_control_refused(&ctl, "want_summary group: 64 bytes or more, "
                                 "limit 63");
    ctl.msg_case = WST__CONTROL__MSG_BARRIER;
    ctl.barrier = &b;
    b.version = 3;
    b.step = 4;
    assert_control_refused(&ctl, "barrier: unknown step 4");
    b.step = 1;
    b.version = 0;
    assert_control_refused(&ctl, "barrier: version 0");
}

static void test_codec_roundtrip_plan(void **state)
{
    struct wst_msg in, out;
    size_t i;

    (void)state;
    sample_plan(&in);
    roundtrip(&in, &out);
    assert_true(out.u.plan.plan_hash == in.u.plan.plan_hash);
    assert_int_equal(out.u.plan.sender, 1);
    assert_int_equal(out.u.plan.n_senders, 2);
    assert_int_equal(out.u.plan.n_layers, 2);
    assert_int_equal(out.u.plan.mover, WST_MOVER_PUT);
    assert_int_equal(out.u.plan.caps, WST_CAP_DEVICE_DST | WST_CAP_NCCL);
    assert_int_equal(out.u.plan.n_items, 2);
    for (i = 0; i < 2; i++) {
        assert_int_equal(out.u.plan.items[i].sender, sample_items[i].sender);
        assert_int_equal(out.u.plan.items[i].have, sample_items[i].have);
        assert_int_equal(out.u.plan.items[i].src_offset,
                         sample_items[i].src_offset);
        assert_int_equal(out.u.plan.items[i].region, sample_items[i].region);
        assert_int_equal(out.u.plan.items[i].dst_offset,
                         sample_items[i].dst_offset);
        assert_int_equal(out.u.plan.items[i].length, sample_items[i].length);
        assert_int_equal(out.u.plan.items[i].layer, sample_items[i].layer);
        assert_int_equal(out.u.plan.items[i].staged, sample_items[i].staged);
    }
    assert_int_equal(out.u.plan.n_regions, 2);
    for (i = 0; i < 2; i++) {
        assert_true(out.u.plan.regions[i].base == sample_regions[i].base);
        assert_int_equal(out.u.plan.regions[i].length,
                         sample_regions[i].length);
        assert_int_equal(out.u.plan.regions[i].rkey.len,
                         sample_regions[i].rkey.len);
    }
    assert_memory_equal(out.u.plan.regions[0].rkey.data, rkey_bytes, 4);
    assert_null(out.u.plan.regions[1].rkey.data);
    wst_msg_release(&out);
}

static void test_codec_roundtrip_begin(void **state)
{
    struct wst_msg in, out;

    (void)state;
    memset(&in, 0, sizeof(in));
    in.type = WST_MSG_BEGIN;
    in.u.begin.version = 42;
    in.u.begin.plan_hash = 0xfedcba9876543210ull;
    in.u.begin.ack = 1;
    roundtrip(&in, &out);
    assert_int_equal(out.u.begin.version, 42);
    assert_true(out.u.begin.plan_hash == 0xfedcba9876543210ull);
    assert_int_equal(out.u.begin.ack, 1);
    assert_int_equal(out.u.begin.mover, 0);
    wst_msg_release(&out);

    in.u.begin.ack = 0;
    in.u.begin.mover = WST_MOVER_AM;
    roundtrip(&in, &out);
    assert_int_equal(out.u.begin.ack, 0);
    assert_int_equal(out.u.begin.mover, WST_MOVER_AM);
    wst_msg_release(&out);
}

static void test_codec_begin_bad_mover_refused(void **state)
{
    Wst__Control ctl = WST__CONTROL__INIT;
    Wst__Begin b = WST__BEGIN__INIT;

    (void)state;
    ctl.msg_case = WST__CONTROL__MSG_BEGIN;
    ctl.begin = &b;
    b.version = 3;
    b.mover = 0; /* a request must name its mover */
    assert_control_refused(&ctl, "begin: bad mover 0");
    b.mover = 7;
    assert_control_refused(&ctl, "begin: bad mover 7");
    b.ack = 1;
    b.mover = WST_MOVER_PUT; /* an acknowledgement carries none */
    assert_control_refused(&ctl, "begin: bad mover 1");
}

static void test_codec_roundtrip_layer_done(void **state)
{
    struct wst_msg in, out;

    (void)state;
    memset(&in, 0, sizeof(in));
    in.type = WST_MSG_LAYER_DONE;
    in.u.layer_done.layer = 12;
    in.u.layer_done.version = 41;
    in.u.layer_done.bytes = 3ull << 30;
    in.u.layer_done.digest = 0x1122334455667788ull;
    roundtrip(&in, &out);
    assert_int_equal(out.u.layer_done.layer, 12);
    assert_int_equal(out.u.layer_done.version, 41);
    assert_true(out.u.layer_done.bytes == 3ull << 30);
    assert_true(out.u.layer_done.digest == 0x1122334455667788ull);
    wst_msg_release(&out);
}

/* Several layers in one message: the first in its fields, the rest in
 * order, each with its own byte count and digest. */
static void test_codec_roundtrip_layer_done_batch(void **state)
{
    struct wst_msg in, out;

    (void)state;
    memset(&in, 0, sizeof(in));
    in.type = WST_MSG_LAYER_DONE;
    in.u.layer_done.layer = 7;
    in.u.layer_done.version = 3;
    in.u.layer_done.bytes = 100;
    in.u.layer_done.digest = 0xabcull;
    in.u.layer_done.n_more = WST_LAYER_DONE_MORE_MAX;
    for (uint32_t i = 0; i < WST_LAYER_DONE_MORE_MAX; i++) {
        in.u.layer_done.more_bytes[i] = 1000 + i;
        in.u.layer_done.more_digests[i] = 0x5000000000ull + i;
    }
    roundtrip(&in, &out);
    assert_int_equal(out.u.layer_done.layer, 7);
    assert_int_equal(out.u.layer_done.bytes, 100);
    assert_true(out.u.layer_done.digest == 0xabcull);
    assert_int_equal(out.u.layer_done.n_more, WST_LAYER_DONE_MORE_MAX);
    for (uint32_t i = 0; i < WST_LAYER_DONE_MORE_MAX; i++) {
        assert_int_equal(out.u.layer_done.more_bytes[i], 1000 + i);
        assert_true(out.u.layer_done.more_digests[i] == 0x5000000000ull + i);
    }
    wst_msg_release(&out);
}

/* Batches a peer could forge: counts that disagree, too many layers, and
 * layer numbers that would wrap. */
static void test_codec_layer_done_batch_refused(void **state)
{
    Wst__Control ctl = WST__CONTROL__INIT;
    Wst__LayerDone ld = WST__LAYER_DONE__INIT;
    uint64_t v[WST_LAYER_DONE_MORE_MAX + 1] = {0};

    (void)state;
    ctl.msg_case = WST__CONTROL__MSG_LAYER_DONE;
    ctl.layer_done = &ld;
    ld.version = 1;
    ld.more_bytes = v;
    ld.more_digests = v;
    ld.n_more_bytes = 2;
    ld.n_more_digests = 1;
    assert_control_refused(&ctl, "layer_done: 2 more byte counts, 1 more "
                                 "digests (at most 31) from layer 0");
    ld.n_more_bytes = ld.n_more_digests = WST_LAYER_DONE_MORE_MAX + 1;
    assert_control_refused(&ctl, "layer_done: 32 more byte counts, 32 more "
                                 "digests (at most 31) from layer 0");
    ld.n_more_bytes = ld.n_more_digests = 2;
    ld.layer = UINT32_MAX - 1;
    assert_control_refused(&ctl, "layer_done: 2 more byte counts, 2 more "
                                 "digests (at most 31) from layer 4294967294");
}

static void test_codec_roundtrip_commit(void **state)
{
    struct wst_msg in, out;

    (void)state;
    memset(&in, 0, sizeof(in));
    in.type = WST_MSG_COMMIT;
    in.u.commit.version = UINT64_MAX;
    roundtrip(&in, &out);
    assert_true(out.u.commit.version == UINT64_MAX);
    wst_msg_release(&out);
}

static void test_codec_roundtrip_error(void **state)
{
    struct wst_msg in, out;

    (void)state;
    memset(&in, 0, sizeof(in));
    in.type = WST_MSG_ERROR;
    in.u.error.status = WST_ERR_COVERAGE;
    strcpy(in.u.error.message, "tensor 'lm_head.weight': rows 0..7 uncovered");
    roundtrip(&in, &out);
    assert_int_equal(out.u.error.status, WST_ERR_COVERAGE);
    assert_string_equal(out.u.error.message,
                        "tensor 'lm_head.weight': rows 0..7 uncovered");
    wst_msg_release(&out);
}

static void test_codec_roundtrip_heartbeat(void **state)
{
    struct wst_msg in, out;

    (void)state;
    memset(&in, 0, sizeof(in));
    in.type = WST_MSG_HEARTBEAT;
    in.u.heartbeat.seq = 987654321;
    roundtrip(&in, &out);
    assert_int_equal(out.u.heartbeat.seq, 987654321);
    wst_msg_release(&out);
    wst_msg_release(&out); /* safe on a zeroed msg */
}

/* The heartbeat both libraries send (heartbeat_msg.h): numbered, and
 * timed only by values that make sense. */
static void test_codec_heartbeat_msg(void **state)
{
    struct wst_heartbeat_params hb = {0};
    struct wst_msg out;
    void *buf = NULL;
    size_t len = 0;

    (void)state;
    assert_int_equal(wst_heartbeat_encode(42, &buf, &len), WST_OK);
    assert_int_equal(
        wst_msg_decode(buf, len, WST_MSG_MAX_DEFAULT, &out, NULL, 0), WST_OK);
    assert_int_equal(out.type, WST_MSG_HEARTBEAT);
    assert_int_equal(out.u.heartbeat.seq, 42);
    wst_msg_release(&out);
    free(buf);

    assert_int_equal(wst_heartbeat_params_set(&hb,
                                              WST_HEARTBEAT_INTERVAL_DEFAULT,
                                              WST_HEARTBEAT_TIMEOUT_DEFAULT),
                     WST_OK);
    assert_ptr_equal(hb.encode, wst_heartbeat_encode);
    assert_int_equal(wst_heartbeat_params_set(&hb, 0.25, 2), WST_OK);
    assert_true(hb.interval_s == 0.25 && hb.timeout_s == 2);
    assert_int_equal(wst_heartbeat_params_set(&hb, 0, 2), WST_ERR_INVALID);
    assert_int_equal(wst_heartbeat_params_set(&hb, 2, 2), WST_ERR_INVALID);
    assert_true(hb.interval_s == 0.25 && hb.timeout_s == 2);
}

static void test_codec_roundtrip_credit(void **state)
{
    struct wst_msg in, out;
    Wst__Control ctl = WST__CONTROL__INIT;
    Wst__Credit credit = WST__CREDIT__INIT;

    (void)state;
    memset(&in, 0, sizeof(in));
    in.type = WST_MSG_CREDIT;
    in.u.credit.version = 7;
    in.u.credit.layer = 47;
    roundtrip(&in, &out);
    assert_int_equal(out.type, WST_MSG_CREDIT);
    assert_int_equal(out.u.credit.version, 7);
    assert_int_equal(out.u.credit.layer, 47);
    wst_msg_release(&out);
    assert_string_equal(wst_msg_type_name(WST_MSG_CREDIT), "credit");
    /* version 0 is never a refit */
    ctl.msg_case = WST__CONTROL__MSG_CREDIT;
    ctl.credit = &credit;
    assert_control_refused(&ctl, "credit: version 0");
}

/* 128 distinct bytes, so a shifted, truncated or reordered copy shows. */
static void sample_unique_id(uint8_t id[WST_NCCL_UNIQUE_ID_BYTES])
{
    size_t i;

    for (i = 0; i < WST_NCCL_UNIQUE_ID_BYTES; i++) {
        id[i] = (uint8_t)(0x80 + i); /* 0x80..0xff */
    }
}

static void test_codec_roundtrip_nccl_setup(void **state)
{
    struct wst_msg in, out;

    (void)state;
    memset(&in, 0, sizeof(in));
    in.type = WST_MSG_NCCL_SETUP;
    sample_unique_id(in.u.nccl_setup.unique_id);
    roundtrip(&in, &out);
    assert_int_equal(out.type, WST_MSG_NCCL_SETUP);
    assert_memory_equal(out.u.nccl_setup.unique_id, in.u.nccl_setup.unique_id,
                        WST_NCCL_UNIQUE_ID_BYTES);
    wst_msg_release(&out);
    assert_memory_equal(&out, &zero_msg, sizeof(out));
}

static void test_codec_nccl_setup_bad_length_refused(void **state)
{
    Wst__Control ctl = WST__CONTROL__INIT;
    Wst__NcclSetup setup = WST__NCCL_SETUP__INIT;
    uint8_t id[WST_NCCL_UNIQUE_ID_BYTES + 1];

    (void)state;
    memset(id, 0x5a, sizeof(id));
    ctl.msg_case = WST__CONTROL__MSG_NCCL_SETUP;
    ctl.nccl_setup = &setup;
    assert_control_refused(&ctl, "nccl setup: unique id of 0 bytes, want 128");
    setup.unique_id.data = id;
    setup.unique_id.len = WST_NCCL_UNIQUE_ID_BYTES - 1;
    assert_control_refused(&ctl,
                           "nccl setup: unique id of 127 bytes, want 128");
    setup.unique_id.len = WST_NCCL_UNIQUE_ID_BYTES + 1;
    assert_control_refused(&ctl,
                           "nccl setup: unique id of 129 bytes, want 128");
}

static void test_codec_roundtrip_nccl_ready(void **state)
{
    struct wst_msg in, out;

    (void)state;
    memset(&in, 0, sizeof(in));
    in.type = WST_MSG_NCCL_READY;
    in.u.nccl_ready.plan_hash = 0x8badf00ddeadbeefull;
    roundtrip(&in, &out);
    assert_int_equal(out.type, WST_MSG_NCCL_READY);
    assert_true(out.u.nccl_ready.plan_hash == 0x8badf00ddeadbeefull);
    wst_msg_release(&out);
    in.u.nccl_ready.plan_hash = 0; /* any hash is a valid echo */
    roundtrip(&in, &out);
    assert_true(out.u.nccl_ready.plan_hash == 0);
    wst_msg_release(&out);
}

/* A sender may use NCCL; acknowledgements still carry no mover. */
static void test_codec_begin_nccl_mover_accepted(void **state)
{
    struct wst_msg in, out;
    Wst__Control ctl = WST__CONTROL__INIT;
    Wst__Begin b = WST__BEGIN__INIT;

    (void)state;
    memset(&in, 0, sizeof(in));
    in.type = WST_MSG_BEGIN;
    in.u.begin.version = 5;
    in.u.begin.plan_hash = 0x0123456789abcdefull;
    in.u.begin.mover = WST_MOVER_NCCL;
    roundtrip(&in, &out);
    assert_int_equal(out.u.begin.ack, 0);
    assert_int_equal(out.u.begin.mover, WST_MOVER_NCCL);
    wst_msg_release(&out);
    ctl.msg_case = WST__CONTROL__MSG_BEGIN;
    ctl.begin = &b;
    b.version = 5;
    b.ack = 1;
    b.mover = WST_MOVER_NCCL;
    assert_control_refused(&ctl, "begin: bad mover 3");
}

static void test_codec_type_names(void **state)
{
    (void)state;
    assert_string_equal(wst_msg_type_name(WST_MSG_HELLO), "hello");
    assert_string_equal(wst_msg_type_name(WST_MSG_PLAN), "plan");
    assert_string_equal(wst_msg_type_name(WST_MSG_HEARTBEAT), "heartbeat");
    assert_string_equal(wst_msg_type_name(WST_MSG_NCCL_SETUP), "nccl_setup");
    assert_string_equal(wst_msg_type_name(WST_MSG_NCCL_READY), "nccl_ready");
    assert_string_equal(wst_msg_type_name((enum wst_msg_type)77), "unknown");
}

/* ---- envelope-level refusals ---- */

static void test_codec_oversized_refused_before_parsing(void **state)
{
    struct wst_msg in;
    uint8_t *buf = NULL;
    uint8_t garbage[64];
    char reason[ERRLEN];
    size_t len = 0;

    (void)state;
    sample_plan(&in);
    assert_int_equal(wst_msg_encode(&in, &buf, &len), WST_OK);
    snprintf(reason, sizeof(reason), "control message of %zu bytes, limit %zu",
             len, len - 1);
    assert_decode_fails(buf, len, len - 1, WST_ERR_TOO_LARGE, reason);
    free(buf);
    /* Garbage that would be unparsable: the size verdict comes first. */
    memset(garbage, 0xff, sizeof(garbage));
    assert_decode_fails(garbage, sizeof(garbage), 63, WST_ERR_TOO_LARGE,
                        "control message of 64 bytes, limit 63");
}

static void test_codec_garbage_refused(void **state)
{
    uint8_t garbage[32];

    (void)state;
    memset(garbage, 0xff, sizeof(garbage));
    assert_decode_fails(garbage, sizeof(garbage), WST_MSG_MAX_DEFAULT,
                        WST_ERR_PROTOCOL,
                        "control message of 32 bytes: unparsable");
}

static void test_codec_empty_envelope_refused(void **state)
{
    Wst__Control ctl = WST__CONTROL__INIT;
    uint8_t unknown_field[] = {0x78, 0x01}; /* field 15, varint 1 */

    (void)state;
    assert_control_refused(&ctl, "control: no message set");
    assert_decode_fails(unknown_field, sizeof(unknown_field),
                        WST_MSG_MAX_DEFAULT, WST_ERR_PROTOCOL,
                        "control: no message set");
}

/* ---- lying have entries ---- */

struct pb_have {
    Wst__Control ctl;
    Wst__HaveManifest have;
    Wst__HaveEntry entry;
    Wst__HaveEntry *entries[1];
    uint64_t shape[WST_MAX_DIMS + 1];
    uint64_t start[WST_MAX_DIMS + 1];
    uint64_t stop[WST_MAX_DIMS + 1];
};

/* A valid 2-D bf16 entry [8,16], box [0,0]-[4,16], that cases then break. */
static void pb_have_init(struct pb_have *p)
{
    wst__control__init(&p->ctl);
    wst__have_manifest__init(&p->have);
    wst__have_entry__init(&p->entry);
    p->entry.name = "model.layers.0.mlp.down_proj.weight";
    p->entry.dtype = WST_DTYPE_BF16;
    p->shape[0] = 8;
    p->shape[1] = 16;
    p->start[0] = 0;
    p->start[1] = 0;
    p->stop[0] = 4;
    p->stop[1] = 16;
    p->entry.n_shape = 2;
    p->entry.shape = p->shape;
    p->entry.n_box_start = 2;
    p->entry.box_start = p->start;
    p->entry.n_box_stop = 2;
    p->entry.box_stop = p->stop;
    p->entry.mem_type = WST_MEM_HOST;
    p->entries[0] = &p->entry;
    p->have.n_entries = 1;
    p->have.entries = p->entries;
    p->ctl.msg_case = WST__CONTROL__MSG_HAVE;
    p->ctl.have = &p->have;
}

static void test_codec_have_valid_pb_accepted(void **state)
{
    struct pb_have p;
    struct wst_msg msg;
    char err[ERRLEN];
    uint8_t *buf;
    size_t len;

    (void)state;
    pb_have_init(&p);
    buf = pack_control(&p.ctl, &len);
    assert_int_equal(
        wst_msg_decode(buf, len, WST_MSG_MAX_DEFAULT, &msg, err, ERRLEN),
        WST_OK);
    assert_int_equal(msg.u.have.n_entries, 1);
    assert_int_equal(msg.u.have.entries[0].box.stop[0], 4);
    wst_msg_release(&msg);
    free(buf);
}

static void test_codec_have_box_stop_past_shape_refused(void **state)
{
    struct pb_have p;

    (void)state;
    pb_have_init(&p);
    p.stop[1] = 17;
    assert_control_refused(
        &p.ctl,
        "have entry 0 'model.layers.0.mlp.down_proj.weight': box start [0,0] "
        "stop [4,17] invalid for shape [8,16] (invalid argument)");
}

static void test_codec_have_box_start_after_stop_refused(void **state)
{
    struct pb_have p;

    (void)state;
    pb_have_init(&p);
    p.start[0] = 5;
    assert_control_refused(
        &p.ctl,
        "have entry 0 'model.layers.0.mlp.down_proj.weight': box start [5,0] "
        "stop [4,16] invalid for shape [8,16] (invalid argument)");
}

static void test_codec_have_unknown_dtype_refused(void **state)
{
    struct pb_have p;

    (void)state;
    pb_have_init(&p);
    p.entry.dtype = 99;
    assert_control_refused(
        &p.ctl,
        "have entry 0 'model.layers.0.mlp.down_proj.weight': unknown dtype 99");
}

static void test_codec_have_unknown_mem_type_refused(void **state)
{
    struct pb_have p;

    (void)state;
    pb_have_init(&p);
    p.entry.mem_type = 7;
    assert_control_refused(
        &p.ctl, "have entry 0 'model.layers.0.mlp.down_proj.weight': unknown "
                "mem_type 7");
}

static void test_codec_have_nine_dims_refused(void **state)
{
    struct pb_have p;
    size_t i;

    (void)state;
    pb_have_init(&p);
    for (i = 0; i < 9; i++) {
        p.shape[i] = 2;
        p.start[i] = 0;
        p.stop[i] = 1;
    }
    p.entry.n_shape = 9;
    p.entry.n_box_start = 9;
    p.entry.n_box_stop = 9;
    assert_control_refused(
        &p.ctl, "have entry 0 'model.layers.0.mlp.down_proj.weight': 9 dims, "
                "expected 1..8");
}

static void test_codec_have_box_count_mismatch_refused(void **state)
{
    struct pb_have p;

    (void)state;
    pb_have_init(&p);
    p.entry.n_box_stop = 1;
    assert_control_refused(
        &p.ctl, "have entry 0 'model.layers.0.mlp.down_proj.weight': box with "
                "2 start and 1 stop values, expected 2");
}

static void test_codec_have_shape_overflow_refused(void **state)
{
    struct pb_have p;

    (void)state;
    pb_have_init(&p);
    p.shape[0] = 1ull << 32;
    p.shape[1] = 1ull << 32; /* 2^64 elements */
    p.stop[0] = 1;
    p.stop[1] = 1;
    assert_control_refused(
        &p.ctl,
        "have entry 0 'model.layers.0.mlp.down_proj.weight': invalid tensor: "
        "bf16 shape [4294967296,4294967296] (invalid argument)");
}

static void test_codec_have_name_too_long_refused(void **state)
{
    struct pb_have p;
    char name[WST_NAME_MAX + 1];

    (void)state;
    pb_have_init(&p);
    memset(name, 'x', WST_NAME_MAX);
    name[WST_NAME_MAX] = '\0';
    p.entry.name = name;
    assert_control_refused(
        &p.ctl, "have entry 0: name of 256 or more bytes, expected 1..255");
    p.entry.name = "";
    assert_control_refused(&p.ctl,
                           "have entry 0: name of 0 bytes, expected 1..255");
}

static void test_codec_have_flat_past_elements_refused(void **state)
{
    struct pb_have p;

    (void)state;
    pb_have_init(&p);
    p.entry.flat = 1;
    p.entry.n_box_start = 1;
    p.entry.n_box_stop = 1;
    p.start[0] = 100;
    p.stop[0] = 129; /* 128 elements */
    assert_control_refused(
        &p.ctl,
        "have entry 0 'model.layers.0.mlp.down_proj.weight': flat box start "
        "[100] stop [129] invalid for shape [8,16] (invalid argument)");
}

/* ---- lying plans ---- */

struct pb_plan {
    Wst__Control ctl;
    Wst__Plan plan;
    Wst__PlanItem item;
    Wst__PlanItem *items[1];
    Wst__Region region;
    Wst__Region *regions[1];
};

/* One item of 128 bytes at offset 64 of a 4096-byte region, layer 0 of 2. */
static void pb_plan_init(struct pb_plan *p)
{
    wst__control__init(&p->ctl);
    wst__plan__init(&p->plan);
    wst__plan_item__init(&p->item);
    wst__region__init(&p->region);
    p->item.dst_offset = 64;
    p->item.length = 128;
    p->region.address = 0x10000;
    p->region.length = 4096;
    p->items[0] = &p->item;
    p->regions[0] = &p->region;
    p->plan.sender = 0;
    p->plan.n_senders = 1;
    p->plan.n_layers = 2;
    p->plan.mover = WST_MOVER_PUT;
    p->plan.n_items = 1;
    p->plan.items = p->items;
    p->plan.n_regions = 1;
    p->plan.regions = p->regions;
    p->ctl.msg_case = WST__CONTROL__MSG_PLAN;
    p->ctl.plan = &p->plan;
}

static void test_codec_plan_valid_pb_accepted(void **state)
{
    struct pb_plan p;
    struct wst_msg msg;

    (void)state;
    pb_plan_init(&p);
    decode_control(&p.ctl, &msg);
    assert_int_equal(msg.u.plan.items[0].dst_offset, 64);
    assert_true(msg.u.plan.regions[0].base == 0x10000);
    wst_msg_release(&msg);
}

/* A region's message_max: 0 and the bounds' ends taken, the rest refused
 * with the rule; an encoded plan carries it back. */
static void test_codec_plan_region_message_max(void **state)
{
    static const uint64_t ok[] = {0, WST_REGION_MESSAGE_MIN,
                                  WST_REGION_MESSAGE_MIN + (64u << 10),
                                  WST_REGION_MESSAGE_MAX};
    static const uint64_t bad[] = {1,
                                   64u << 10,
                                   WST_REGION_MESSAGE_MIN - 1,
                                   WST_REGION_MESSAGE_MIN + 1,
                                   WST_REGION_MESSAGE_MAX + (64u << 10),
                                   UINT64_MAX};
    struct pb_plan p;
    struct wst_msg msg, out;
    char want[200];

    (void)state;
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        pb_plan_init(&p);
        p.region.message_max = ok[i];
        decode_control(&p.ctl, &msg);
        assert_true(msg.u.plan.regions[0].message_max == ok[i]);
        roundtrip(&msg, &out);
        assert_true(out.u.plan.regions[0].message_max == ok[i]);
        wst_msg_release(&out);
        wst_msg_release(&msg);
    }
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        pb_plan_init(&p);
        p.region.message_max = bad[i];
        snprintf(want, sizeof(want),
                 "plan region 0: messages of at most %llu bytes (0, or a "
                 "multiple of 65536 from 8388608 to 33554432)",
                 (unsigned long long)bad[i]);
        assert_control_refused(&p.ctl, want);
    }
}

static void test_codec_plan_dst_overflow_refused(void **state)
{
    struct pb_plan p;

    (void)state;
    pb_plan_init(&p);
    p.item.dst_offset = UINT64_MAX - 63;
    p.item.length = 128;
    assert_control_refused(
        &p.ctl,
        "plan item 0: dst_offset 18446744073709551552 + length 128 overflows");
}

static void test_codec_plan_unknown_caps_refused(void **state)
{
    struct pb_plan p;

    (void)state;
    pb_plan_init(&p);
    p.plan.caps = WST_CAP_UCX_CUDA | 0x40;
    assert_control_refused(&p.ctl, "plan: unknown capability bits 0x40");
}

static void test_codec_plan_src_overflow_refused(void **state)
{
    struct pb_plan p;

    (void)state;
    pb_plan_init(&p);
    p.item.src_offset = UINT64_MAX;
    assert_control_refused(
        &p.ctl,
        "plan item 0: src_offset 18446744073709551615 + length 128 overflows");
}

#define ROWS_RULE                                                              \
    " (rows are shorter than 65536 bytes and do not overlap; one row has no "  \
    "stride)"

/* Items of rows (planner.h): they travel with their rows and stride, in
 * a plan that says it has them, and the codec refuses rows it could not
 * move row by row in bounds. */
static void test_codec_plan_rows(void **state)
{
    struct pb_plan p;
    struct wst_msg msg;

    (void)state;
    pb_plan_init(&p);
    p.plan.caps = WST_CAP_ROWS;
    p.item.length = 16;
    p.item.more_rows = 7; /* 8 rows, 128 bytes in the destination */
    p.item.src_stride = 48;
    p.item.src_offset = 5;
    decode_control(&p.ctl, &msg);
    assert_int_equal(msg.u.plan.items[0].more_rows, 7);
    assert_int_equal(msg.u.plan.items[0].src_stride, 48);
    assert_int_equal(wst_plan_item_bytes(&msg.u.plan.items[0]), 128);
    wst_msg_release(&msg);

    p.item.dst_offset = 4096 - 127; /* the rows end a byte past it */
    assert_control_refused(&p.ctl, "plan item 0: dst_offset 3969 + length 128 "
                                   "past the end of region 0 (4096 bytes)");
    p.item.dst_offset = 64;
    p.plan.caps = 0;
    assert_control_refused(&p.ctl, "plan item 0: 7 more rows in a plan "
                                   "without the rows capability");
    p.plan.caps = WST_CAP_ROWS;
    p.item.src_stride = 15; /* rows would overlap */
    assert_control_refused(&p.ctl, "plan item 0: 7 more rows of 16 bytes, 15 "
                                   "apart in the source" ROWS_RULE);
    p.item.src_stride = 48;
    p.item.length = WST_PLAN_ROW_MAX;
    p.item.src_stride = WST_PLAN_ROW_MAX;
    p.item.dst_offset = 0;
    p.region.length = 16u << 20;
    assert_control_refused(&p.ctl, "plan item 0: 7 more rows of 65536 bytes, "
                                   "65536 apart in the source" ROWS_RULE);
    p.item.length = 16;
    p.item.src_stride = UINT64_MAX / 4;
    assert_control_refused(&p.ctl, "plan item 0: 7 more rows of 16 bytes "
                                   "4611686018427387903 apart from "
                                   "src_offset 5 overflow");
    p.item.more_rows = 0;
    p.item.src_stride = 16; /* one row has no stride */
    assert_control_refused(&p.ctl, "plan item 0: 0 more rows of 16 bytes, 16 "
                                   "apart in the source" ROWS_RULE);
}

static void test_codec_plan_item_past_region_refused(void **state)
{
    struct pb_plan p;

    (void)state;
    pb_plan_init(&p);
    p.item.dst_offset = 4096 - 127; /* ends one byte past the region */
    assert_control_refused(&p.ctl, "plan item 0: dst_offset 3969 + length 128 "
                                   "past the end of region 0 (4096 bytes)");
}

/* A region the receiver withholds from this sender (none of its items
 * writes it) comes with length 0, no base and no key, at its index: such
 * a plan decodes, and an item that names it is refused. */
static void test_codec_plan_withheld_region(void **state)
{
    struct pb_plan p;
    Wst__Region withheld = WST__REGION__INIT;
    Wst__Region *regions[2] = {&withheld, NULL};
    struct wst_msg msg;

    (void)state;
    pb_plan_init(&p);
    regions[1] = &p.region;
    p.plan.n_regions = 2;
    p.plan.regions = regions;
    p.item.region = 1;
    decode_control(&p.ctl, &msg);
    assert_int_equal(msg.u.plan.n_regions, 2);
    assert_true(msg.u.plan.regions[0].base == 0);
    assert_true(msg.u.plan.regions[0].length == 0);
    assert_int_equal(msg.u.plan.regions[0].rkey.len, 0);
    assert_true(msg.u.plan.regions[1].length == 4096);
    wst_msg_release(&msg);

    p.item.region = 0;
    assert_control_refused(&p.ctl, "plan item 0: dst_offset 64 + length 128 "
                                   "past the end of region 0 (0 bytes)");
}

static void test_codec_plan_region_out_of_range_refused(void **state)
{
    struct pb_plan p;

    (void)state;
    pb_plan_init(&p);
    p.item.region = 1;
    assert_control_refused(&p.ctl, "plan item 0: region 1 of 1");
}

static void test_codec_plan_layer_out_of_range_refused(void **state)
{
    struct pb_plan p;

    (void)state;
    pb_plan_init(&p);
    p.item.layer = 2;
    assert_control_refused(&p.ctl, "plan item 0: layer 2 of 2");
    pb_plan_init(&p);
    p.plan.n_layers = 0;
    p.item.layer = 0;
    assert_control_refused(&p.ctl, "plan: n_layers 0");
}

static void test_codec_plan_bad_header_refused(void **state)
{
    struct pb_plan p;

    (void)state;
    pb_plan_init(&p);
    p.plan.sender = 1; /* of n_senders 1 */
    assert_control_refused(&p.ctl, "plan: sender 1 of n_senders 1");
    pb_plan_init(&p);
    p.plan.mover = 7;
    assert_control_refused(&p.ctl, "plan: unknown mover 7");
    pb_plan_init(&p);
    p.item.length = 0;
    assert_control_refused(&p.ctl, "plan item 0: length 0");
}

/* NCCL is what a sender picks, never what a receiver's plan offers. */
static void test_codec_plan_nccl_mover_refused(void **state)
{
    struct pb_plan p;
    struct wst_msg m;
    uint8_t *buf = NULL;
    size_t len = 0;

    (void)state;
    pb_plan_init(&p);
    p.plan.mover = WST_MOVER_NCCL;
    assert_control_refused(&p.ctl, "plan: unknown mover 3");
    sample_plan(&m);
    m.u.plan.mover = WST_MOVER_NCCL;
    assert_int_equal(wst_msg_encode(&m, &buf, &len), WST_ERR_INVALID);
    assert_null(buf);
}

/* ---- other lying messages ---- */

static void test_codec_error_unknown_status_refused(void **state)
{
    Wst__Control ctl = WST__CONTROL__INIT;
    Wst__Error e = WST__ERROR__INIT;
    char msg[WST_ERROR_MSG_MAX + 1];

    (void)state;
    ctl.msg_case = WST__CONTROL__MSG_ERROR;
    ctl.error = &e;
    e.message = "boom";
    e.status = -999;
    assert_control_refused(&ctl, "error: status -999 is not a known error");
    e.status = WST_OK; /* known, but not an error */
    assert_control_refused(&ctl, "error: status 0 is not a known error");
    e.status = WST_ERR_IO;
    memset(msg, 'm', WST_ERROR_MSG_MAX);
    msg[WST_ERROR_MSG_MAX] = '\0';
    e.message = msg;
    assert_control_refused(&ctl, "error message: 512 bytes or more, limit 511");
}

static void test_codec_blob_too_large_refused(void **state)
{
    Wst__Control ctl = WST__CONTROL__INIT;
    Wst__Hello h = WST__HELLO__INIT;
    ProtobufCBinaryData lanes[2];
    struct pb_plan p;
    uint8_t *big = calloc(WST_MAX_BLOB + 1, 1);

    (void)state;
    assert_non_null(big);
    ctl.msg_case = WST__CONTROL__MSG_HELLO;
    ctl.hello = &h;
    h.role = WST_ROLE_SENDER;
    h.auth.len = WST_MAX_BLOB + 1;
    h.auth.data = big;
    assert_control_refused(&ctl, "hello auth: 4097 bytes, limit 4096");
    h.auth.len = 0;
    h.worker_address.len = WST_MAX_BLOB + 1;
    h.worker_address.data = big;
    assert_control_refused(&ctl,
                           "hello worker_address: 4097 bytes, limit 4096");
    h.worker_address.len = 0;
    lanes[0].len = 1;
    lanes[0].data = big;
    lanes[1].len = WST_MAX_BLOB + 1;
    lanes[1].data = big;
    h.n_lane_addresses = 2;
    h.lane_addresses = lanes;
    assert_control_refused(&ctl,
                           "hello lane_addresses[1]: 4097 bytes, limit 4096");
    pb_plan_init(&p);
    p.region.rkey.len = WST_MAX_BLOB + 1;
    p.region.rkey.data = big;
    assert_control_refused(&p.ctl,
                           "plan region 0: rkey of 4097 bytes, limit 4096");
    free(big);
}

static void test_codec_hello_unknown_role_refused(void **state)
{
    Wst__Control ctl = WST__CONTROL__INIT;
    Wst__Hello h = WST__HELLO__INIT;

    (void)state;
    ctl.msg_case = WST__CONTROL__MSG_HELLO;
    ctl.hello = &h;
    h.role = 3;
    assert_control_refused(&ctl, "hello: unknown role 3");
}

static void test_codec_version_zero_refused(void **state)
{
    Wst__Control ctl = WST__CONTROL__INIT;
    Wst__Begin b = WST__BEGIN__INIT;
    Wst__LayerDone ld = WST__LAYER_DONE__INIT;
    Wst__Commit c = WST__COMMIT__INIT;

    (void)state;
    ctl.msg_case = WST__CONTROL__MSG_BEGIN;
    ctl.begin = &b;
    assert_control_refused(&ctl, "begin: version 0");
    ctl.msg_case = WST__CONTROL__MSG_LAYER_DONE;
    ctl.layer_done = &ld;
    assert_control_refused(&ctl, "layer_done: version 0");
    ctl.msg_case = WST__CONTROL__MSG_COMMIT;
    ctl.commit = &c;
    assert_control_refused(&ctl, "commit: version 0");
}

static void test_codec_encode_refuses_invalid(void **state)
{
    struct wst_have h[2];
    struct wst_msg m;
    uint8_t *buf = NULL;
    size_t len = 0;

    (void)state;
    sample_haves(h);
    h[1].tensor.dtype = (enum wst_dtype)99;
    memset(&m, 0, sizeof(m));
    m.type = WST_MSG_HAVE;
    m.u.have.n_entries = 2;
    m.u.have.entries = h;
    assert_int_equal(wst_msg_encode(&m, &buf, &len), WST_ERR_INVALID);
    assert_null(buf);
    sample_plan(&m);
    m.u.plan.items = malloc(sizeof(sample_items));
    assert_non_null(m.u.plan.items);
    memcpy(m.u.plan.items, sample_items, sizeof(sample_items));
    m.u.plan.items[1].sender = 0; /* not the plan's sender */
    assert_int_equal(wst_msg_encode(&m, &buf, &len), WST_ERR_INVALID);
    m.u.plan.items[1].sender = 1;
    m.u.plan.items[1].length = 81; /* past region 1 */
    assert_int_equal(wst_msg_encode(&m, &buf, &len), WST_ERR_INVALID);
    assert_null(buf);
    free(m.u.plan.items);
}

/* ---- sender-side plan check ---- */

static void test_codec_plan_check_good_accepted(void **state)
{
    struct wst_have h[2];
    struct wst_msg in, out;
    char err[ERRLEN] = "";

    (void)state;
    sample_haves(h);
    sample_plan(&in);
    assert_int_equal(wst_plan_msg_check(&in.u.plan, h, 2, err, ERRLEN), WST_OK);
    roundtrip(&in, &out);
    assert_int_equal(wst_plan_msg_check(&out.u.plan, h, 2, err, ERRLEN),
                     WST_OK);
    wst_msg_release(&out);
}

static void test_codec_plan_check_source_past_shard_refused(void **state)
{
    struct wst_plan_item items[2];
    struct wst_have h[2];
    struct wst_msg m;
    char err[ERRLEN] = "";

    (void)state;
    sample_haves(h);
    sample_plan(&m);
    memcpy(items, sample_items, sizeof(items));
    items[0].src_offset = 1; /* 1 + 128 > 128 bytes of have 0 */
    m.u.plan.items = items;
    m.u.plan.plan_hash = wst_plan_hash_items(2, 2, items, 2);
    assert_int_equal(wst_plan_msg_check(&m.u.plan, h, 2, err, ERRLEN),
                     WST_ERR_PROTOCOL);
    assert_non_null(strstr(err, "plan item 0"));
    memcpy(items, sample_items, sizeof(items));
    items[1].length = 81; /* flat have 1 holds 20 f32 = 80 bytes */
    m.u.plan.plan_hash = wst_plan_hash_items(2, 2, items, 2);
    assert_int_equal(wst_plan_msg_check(&m.u.plan, h, 2, err, ERRLEN),
                     WST_ERR_PROTOCOL);
    assert_non_null(strstr(err, "plan item 1"));
    memcpy(items, sample_items, sizeof(items));
    items[1].have = 2;
    m.u.plan.plan_hash = wst_plan_hash_items(2, 2, items, 2);
    assert_int_equal(wst_plan_msg_check(&m.u.plan, h, 2, err, ERRLEN),
                     WST_ERR_PROTOCOL);
    /* rows: the last row's end counts, not the destination's length */
    memcpy(items, sample_items, sizeof(items));
    items[0].length = 16;
    items[0].more_rows = 3;
    items[0].src_stride = 32; /* the last row ends at 3 * 32 + 16 = 112 */
    m.u.plan.plan_hash = wst_plan_hash_items(2, 2, items, 2);
    assert_int_equal(wst_plan_msg_check(&m.u.plan, h, 2, err, ERRLEN), WST_OK);
    items[0].src_stride = 40; /* ... at 136, past 128 bytes of have 0 */
    m.u.plan.plan_hash = wst_plan_hash_items(2, 2, items, 2);
    assert_int_equal(wst_plan_msg_check(&m.u.plan, h, 2, err, ERRLEN),
                     WST_ERR_PROTOCOL);
    assert_non_null(strstr(err, "plan item 0: source bytes [0, 136) past"));
}

/* Two slices of one tensor are two haves: an item is bounded by the slice
 * it names, not by the tensor nor by a larger slice of the same name. */
static void test_codec_plan_check_bounded_by_slice(void **state)
{
    struct wst_plan_item items[2];
    struct wst_have h[2];
    struct wst_msg m;
    char err[ERRLEN] = "";

    (void)state;
    sample_haves(h);
    h[1] = h[0]; /* rows [0, 4) and [4, 5) of q_proj: 128 and 32 bytes */
    h[1].box.start[0] = 4;
    h[1].box.stop[0] = 5;
    sample_plan(&m);
    memcpy(items, sample_items, sizeof(items));
    items[1].length = 32;
    m.u.plan.items = items;
    m.u.plan.plan_hash = wst_plan_hash_items(2, 2, items, 2);
    assert_int_equal(wst_plan_msg_check(&m.u.plan, h, 2, err, ERRLEN), WST_OK);
    items[1].length = 33; /* fits the tensor and slice 0, not slice 1 */
    m.u.plan.plan_hash = wst_plan_hash_items(2, 2, items, 2);
    assert_int_equal(wst_plan_msg_check(&m.u.plan, h, 2, err, ERRLEN),
                     WST_ERR_PROTOCOL);
    assert_non_null(strstr(err, "past the end of have 1"));
    assert_non_null(strstr(err, "(32 bytes)"));
}

static void test_codec_plan_check_hash_mismatch_refused(void **state)
{
    struct wst_have h[2];
    struct wst_msg m;
    char err[ERRLEN] = "";

    (void)state;
    sample_haves(h);
    sample_plan(&m);
    m.u.plan.plan_hash ^= 1;
    assert_int_equal(wst_plan_msg_check(&m.u.plan, h, 2, err, ERRLEN),
                     WST_ERR_PROTOCOL);
    assert_non_null(strstr(err, "hash"));
}

/* ---- random mutations ---- */

/* A decoded message must be one the encoder accepts again (same checks),
 * and a refusal must leave nothing behind. */
static int fuzz_one(const uint8_t *orig, size_t len, uint8_t *work)
{
    struct wst_msg msg;
    char err[ERRLEN];
    size_t n = len;
    int k, flips = 1 + rand() % 4;
    uint8_t *buf = NULL;
    size_t blen = 0;
    wst_status_t status;

    memcpy(work, orig, len);
    for (k = 0; k < flips; k++) {
        work[(size_t)rand() % len] = (uint8_t)rand();
    }
    if (rand() % 8 == 0) {
        n = (size_t)rand() % len; /* truncated */
    }
    status = wst_msg_decode(work, n, WST_MSG_MAX_DEFAULT, &msg, err, ERRLEN);
    if (status != WST_OK) {
        assert_int_equal(status, WST_ERR_PROTOCOL);
        assert_memory_equal(&msg, &zero_msg, sizeof(msg));
        return 0;
    }
    /* What peeking counts is never below what decoding produced. */
    size_t peeked = 0;
    if (msg.type == WST_MSG_HAVE && msg.u.have.n_entries > 0) {
        assert_true(wst_msg_peek_have(work, n, &peeked));
        assert_true(peeked >= msg.u.have.n_entries);
    }
    assert_int_equal(wst_msg_encode(&msg, &buf, &blen), WST_OK);
    free(buf);
    wst_msg_release(&msg);
    return 1;
}

static void fuzz_message(const struct wst_msg *m)
{
    uint8_t *orig = NULL;
    uint8_t *work;
    size_t len = 0;
    int i, accepted = 0;

    assert_int_equal(wst_msg_encode(m, &orig, &len), WST_OK);
    work = malloc(len);
    assert_non_null(work);
    for (i = 0; i < 2000; i++) {
        accepted += fuzz_one(orig, len, work);
    }
    /* Both outcomes exercised, or the mutations taught us nothing. */
    assert_true(accepted > 0 && accepted < 2000);
    free(work);
    free(orig);
}

/* A have manifest's entries are counted from the wire bytes; other
 * messages, an empty manifest and cut-short bytes are not a have. */
static void test_codec_peek_have_counts_entries(void **state)
{
    struct wst_have h[3];
    struct wst_msg m = {.type = WST_MSG_HAVE};
    uint8_t *buf = NULL;
    size_t len = 0, n = 0;

    (void)state;
    memset(h, 0, sizeof(h));
    for (int i = 0; i < 3; i++) {
        snprintf(h[i].tensor.name, sizeof(h[i].tensor.name), "t.%d", i);
        h[i].tensor.dtype = WST_DTYPE_BF16;
        h[i].tensor.ndim = 1;
        h[i].tensor.shape[0] = 4;
        h[i].box.ndim = 1;
        h[i].box.stop[0] = 4;
        h[i].mem = WST_MEM_HOST;
    }
    m.u.have.rank = 5;
    m.u.have.n_entries = 3;
    m.u.have.entries = h;
    assert_int_equal(wst_msg_encode(&m, &buf, &len), WST_OK);
    assert_true(wst_msg_peek_have(buf, len, &n));
    assert_int_equal(n, 3);
    assert_false(wst_msg_peek_have(buf, len - 1, &n));
    free(buf);

    m.u.have.n_entries = 0;
    assert_int_equal(wst_msg_encode(&m, &buf, &len), WST_OK);
    assert_false(wst_msg_peek_have(buf, len, &n));
    free(buf);

    struct wst_msg hello = {.type = WST_MSG_HELLO};
    hello.u.hello.protocol_version = WST_PROTOCOL_VERSION;
    hello.u.hello.role = WST_ROLE_SENDER;
    hello.u.hello.world_size = 1;
    assert_int_equal(wst_msg_encode(&hello, &buf, &len), WST_OK);
    assert_false(wst_msg_peek_have(buf, len, &n));
    free(buf);
}

static void test_codec_mutations_never_crash(void **state)
{
    struct wst_have h[2];
    struct wst_msg m;

    (void)state;
    srand(12345);
    sample_plan(&m);
    fuzz_message(&m);
    sample_haves(h);
    memset(&m, 0, sizeof(m));
    m.type = WST_MSG_HAVE;
    m.u.have.rank = 1;
    m.u.have.n_entries = 2;
    m.u.have.entries = h;
    fuzz_message(&m);
}

/* WST_ERR_STALE_VERSION (-28) travels; the next value, unknown, does not.
 * (Registered after the round trips above: the fuzz corpus names them by
 * order.) */
static void test_codec_error_stale_version(void **state)
{
    Wst__Control ctl = WST__CONTROL__INIT;
    Wst__Error e = WST__ERROR__INIT;
    struct wst_msg in, out;

    (void)state;
    memset(&in, 0, sizeof(in));
    in.type = WST_MSG_ERROR;
    in.u.error.status = WST_ERR_STALE_VERSION;
    strcpy(in.u.error.message, "version 3 is not above 5");
    roundtrip(&in, &out);
    assert_int_equal(out.u.error.status, -28);
    assert_string_equal(out.u.error.message, "version 3 is not above 5");
    wst_msg_release(&out);

    ctl.msg_case = WST__CONTROL__MSG_ERROR;
    ctl.error = &e;
    e.message = "version 3 is not above 5";
    e.status = -29;
    assert_control_refused(&ctl, "error: status -29 is not a known error");
}

/* A version's label rides BEGIN, and the committed one's WANT_SUMMARY,
 * as it is: the longest, and every printable byte but the space. */
static void test_codec_roundtrip_labels(void **state)
{
    struct wst_msg in, out;

    (void)state;
    memset(&in, 0, sizeof(in));
    in.type = WST_MSG_BEGIN;
    in.u.begin.version = 1200;
    in.u.begin.mover = WST_MOVER_AM;
    strcpy(in.u.begin.label, "step-1200");
    roundtrip(&in, &out);
    assert_string_equal(out.u.begin.label, "step-1200");
    assert_int_equal(out.u.begin.version, 1200);
    wst_msg_release(&out);
    memset(in.u.begin.label, '~', WST_LABEL_MAX - 1);
    roundtrip(&in, &out);
    assert_int_equal(strlen(out.u.begin.label), WST_LABEL_MAX - 1);
    assert_string_equal(out.u.begin.label, in.u.begin.label);
    wst_msg_release(&out);

    memset(&in, 0, sizeof(in));
    in.type = WST_MSG_WANT_SUMMARY;
    in.u.want_summary.committed_version = 41;
    in.u.want_summary.usable = 1;
    in.u.want_summary.group_size = 1;
    strcpy(in.u.want_summary.committed_label, "run/7@9f3c:\"x\"\\{}");
    roundtrip(&in, &out);
    assert_string_equal(out.u.want_summary.committed_label,
                        "run/7@9f3c:\"x\"\\{}");
    wst_msg_release(&out);
    in.u.want_summary.committed_label[0] = '\0';
    roundtrip(&in, &out);
    assert_string_equal(out.u.want_summary.committed_label, "");
    wst_msg_release(&out);
}

/* A hostile peer's label: too long, a space, a control byte, a NUL that
 * would cut it short, a byte past ASCII. Refused naming the byte; and we
 * never encode one. */
static void test_codec_bad_labels_refused(void **state)
{
    Wst__Control ctl = WST__CONTROL__INIT;
    Wst__Begin b = WST__BEGIN__INIT;
    Wst__WantSummary w = WST__WANT_SUMMARY__INIT;
    uint8_t big[WST_LABEL_MAX];
    struct wst_msg m;
    uint8_t *buf = NULL;
    size_t len = 0;

    (void)state;
    ctl.msg_case = WST__CONTROL__MSG_BEGIN;
    ctl.begin = &b;
    b.version = 3;
    b.mover = WST_MOVER_AM;
    memset(big, 'a', sizeof(big));
    b.label = (ProtobufCBinaryData){.len = sizeof(big), .data = big};
    assert_control_refused(&ctl, "begin: label \"aaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
                                 "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa...\": 64 "
                                 "bytes, at most 63");
    b.label = (ProtobufCBinaryData){.len = 6, .data = (uint8_t *)"step 1"};
    assert_control_refused(&ctl, "begin: label \"step?1\": byte 4 is 0x20; a "
                                 "label is printable ASCII without spaces "
                                 "(0x21..0x7e)");
    b.label = (ProtobufCBinaryData){.len = 3, .data = (uint8_t *)"a\x1b["};
    assert_control_refused(&ctl, "begin: label \"a?[\": byte 1 is 0x1b; a "
                                 "label is printable ASCII without spaces "
                                 "(0x21..0x7e)");
    b.label = (ProtobufCBinaryData){.len = 4, .data = (uint8_t *)"ok\0x"};
    assert_control_refused(&ctl, "begin: label \"ok?x\": byte 2 is 0x00; a "
                                 "label is printable ASCII without spaces "
                                 "(0x21..0x7e)");
    b.label = (ProtobufCBinaryData){.len = 2, .data = (uint8_t *)"\xff!"};
    assert_control_refused(&ctl, "begin: label \"?!\": byte 0 is 0xff; a "
                                 "label is printable ASCII without spaces "
                                 "(0x21..0x7e)");

    ctl.msg_case = WST__CONTROL__MSG_WANT_SUMMARY;
    ctl.want_summary = &w;
    w.group_size = 1;
    w.committed_label =
        (ProtobufCBinaryData){.len = 5, .data = (uint8_t *)"v1\nv2"};
    assert_control_refused(&ctl,
                           "want_summary committed_label: label \"v1?v2\": "
                           "byte 2 is 0x0a; a label is printable ASCII without "
                           "spaces (0x21..0x7e)");

    memset(&m, 0, sizeof(m));
    m.type = WST_MSG_BEGIN;
    m.u.begin.version = 3;
    m.u.begin.mover = WST_MOVER_AM;
    strcpy(m.u.begin.label, "two words");
    assert_int_equal(wst_msg_encode(&m, &buf, &len), WST_ERR_INVALID);
    memset(m.u.begin.label, 'a', sizeof(m.u.begin.label)); /* no NUL */
    assert_int_equal(wst_msg_encode(&m, &buf, &len), WST_ERR_INVALID);
    memset(&m, 0, sizeof(m));
    m.type = WST_MSG_WANT_SUMMARY;
    m.u.want_summary.group_size = 1;
    strcpy(m.u.want_summary.committed_label, "tab\there");
    assert_int_equal(wst_msg_encode(&m, &buf, &len), WST_ERR_INVALID);
    assert_null(buf);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_codec_roundtrip_hello),
        cmocka_unit_test(test_codec_roundtrip_hello_lanes),
        cmocka_unit_test(test_codec_hello_too_many_lanes_refused),
        cmocka_unit_test(test_codec_roundtrip_have),
        cmocka_unit_test(test_codec_roundtrip_want_summary),
        cmocka_unit_test(test_codec_roundtrip_barrier),
        cmocka_unit_test(test_codec_refuses_bad_groups_and_barriers),
        cmocka_unit_test(test_codec_roundtrip_plan),
        cmocka_unit_test(test_codec_roundtrip_begin),
        cmocka_unit_test(test_codec_begin_bad_mover_refused),
        cmocka_unit_test(test_codec_roundtrip_layer_done),
        cmocka_unit_test(test_codec_roundtrip_layer_done_batch),
        cmocka_unit_test(test_codec_layer_done_batch_refused),
        cmocka_unit_test(test_codec_roundtrip_commit),
        cmocka_unit_test(test_codec_roundtrip_error),
        cmocka_unit_test(test_codec_roundtrip_heartbeat),
        cmocka_unit_test(test_codec_heartbeat_msg),
        cmocka_unit_test(test_codec_roundtrip_credit),
        cmocka_unit_test(test_codec_roundtrip_nccl_setup),
        cmocka_unit_test(test_codec_nccl_setup_bad_length_refused),
        cmocka_unit_test(test_codec_roundtrip_nccl_ready),
        cmocka_unit_test(test_codec_begin_nccl_mover_accepted),
        cmocka_unit_test(test_codec_type_names),
        cmocka_unit_test(test_codec_oversized_refused_before_parsing),
        cmocka_unit_test(test_codec_garbage_refused),
        cmocka_unit_test(test_codec_empty_envelope_refused),
        cmocka_unit_test(test_codec_have_valid_pb_accepted),
        cmocka_unit_test(test_codec_have_box_stop_past_shape_refused),
        cmocka_unit_test(test_codec_have_box_start_after_stop_refused),
        cmocka_unit_test(test_codec_have_unknown_dtype_refused),
        cmocka_unit_test(test_codec_have_unknown_mem_type_refused),
        cmocka_unit_test(test_codec_have_nine_dims_refused),
        cmocka_unit_test(test_codec_have_box_count_mismatch_refused),
        cmocka_unit_test(test_codec_have_shape_overflow_refused),
        cmocka_unit_test(test_codec_have_name_too_long_refused),
        cmocka_unit_test(test_codec_have_flat_past_elements_refused),
        cmocka_unit_test(test_codec_plan_valid_pb_accepted),
        cmocka_unit_test(test_codec_plan_dst_overflow_refused),
        cmocka_unit_test(test_codec_plan_region_message_max),
        cmocka_unit_test(test_codec_plan_unknown_caps_refused),
        cmocka_unit_test(test_codec_plan_src_overflow_refused),
        cmocka_unit_test(test_codec_plan_rows),
        cmocka_unit_test(test_codec_plan_item_past_region_refused),
        cmocka_unit_test(test_codec_plan_withheld_region),
        cmocka_unit_test(test_codec_plan_region_out_of_range_refused),
        cmocka_unit_test(test_codec_plan_layer_out_of_range_refused),
        cmocka_unit_test(test_codec_plan_bad_header_refused),
        cmocka_unit_test(test_codec_plan_nccl_mover_refused),
        cmocka_unit_test(test_codec_error_unknown_status_refused),
        cmocka_unit_test(test_codec_blob_too_large_refused),
        cmocka_unit_test(test_codec_hello_unknown_role_refused),
        cmocka_unit_test(test_codec_version_zero_refused),
        cmocka_unit_test(test_codec_encode_refuses_invalid),
        cmocka_unit_test(test_codec_plan_check_good_accepted),
        cmocka_unit_test(test_codec_plan_check_source_past_shard_refused),
        cmocka_unit_test(test_codec_plan_check_bounded_by_slice),
        cmocka_unit_test(test_codec_plan_check_hash_mismatch_refused),
        cmocka_unit_test(test_codec_peek_have_counts_entries),
        cmocka_unit_test(test_codec_mutations_never_crash),
        cmocka_unit_test(test_codec_error_stale_version),
        cmocka_unit_test(test_codec_roundtrip_labels),
        cmocka_unit_test(test_codec_bad_labels_refused),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
