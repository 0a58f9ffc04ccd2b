/* test_am_rx.c - the am mover's receiving half (common/movers/am_rx.c) on
 * its own, without UCX: a data message is given a destination only for
 * the version being received and only inside one of its sender's items;
 * everything else gets none, so nothing is written. Data of a version not
 * in flight is dropped quietly; data outside the plan fails the refit.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "am.h"

#define REGION_LEN 4096

struct fixture {
    struct wst_logger log;
    char *mem; /* the region */
    struct wst_plan_item items[3];
    size_t layer_first[3];
    struct wst_rx_region region;
    struct wst_rx_plan plan;
    struct wst_rx *rx;
    int n_failed;
    uint64_t landed;
};

static void on_landed(void *arg, uint32_t layer, uint64_t bytes,
                      uint64_t hashed, uint64_t sum)
{
    struct fixture *f = arg;

    (void)layer;
    (void)hashed;
    (void)sum;
    f->landed += bytes;
}

static void on_failed(void *arg, wst_status_t status, const char *reason)
{
    struct fixture *f = arg;

    (void)status;
    (void)reason;
    f->n_failed++;
}

/* Items: 100 bytes at 0 and 200 bytes at 100 (layer 0), 50 bytes at 1000
 * (layer 1), all in one host region. */
static int setup(void **state)
{
    struct fixture *f = calloc(1, sizeof(*f));

    if (f == NULL || (f->mem = calloc(1, REGION_LEN)) == NULL)
        return -1;
    wst_logger_init(&f->log, "test_am_rx", WST_LOG_ERROR);
    f->items[0] = (struct wst_plan_item){.dst_offset = 0, .length = 100};
    f->items[1] = (struct wst_plan_item){.dst_offset = 100, .length = 200};
    f->items[2] =
        (struct wst_plan_item){.dst_offset = 1000, .length = 50, .layer = 1};
    f->layer_first[0] = 0;
    f->layer_first[1] = 2;
    f->layer_first[2] = 3;
    f->region = (struct wst_rx_region){
        .base = f->mem, .length = REGION_LEN, .mem = WST_MEM_HOST};
    f->plan = (struct wst_rx_plan){.items = f->items,
                                   .n_items = 3,
                                   .n_layers = 2,
                                   .layer_first = f->layer_first,
                                   .regions = &f->region,
                                   .n_regions = 1};
    struct wst_rx_am_params p = {
        .log = &f->log,
        .plan = &f->plan,
        .events = {.arg = f, .landed = on_landed, .failed = on_failed},
    };
    if (wst_rx_am_create(&p, &f->rx) != WST_OK)
        return -1;
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;

    wst_rx_destroy(f->rx);
    free(f->mem);
    free(f);
    return 0;
}

static wst_status_t dest_flags(struct fixture *f, uint32_t item,
                               uint64_t offset, uint64_t version,
                               uint32_t count, size_t len, int rndv,
                               uint32_t flags, void **dest_p)
{
    struct wst_data_hdr h = {.item = item,
                             .offset = offset,
                             .version = version,
                             .count = count,
                             .flags = flags};

    *dest_p = NULL;
    return f->rx->ops->data_dest(f->rx, &h, len, rndv, dest_p);
}

static wst_status_t dest_rndv(struct fixture *f, uint32_t item, uint64_t offset,
                              uint64_t version, uint32_t count, size_t len,
                              int rndv, void **dest_p)
{
    return dest_flags(f, item, offset, version, count, len, rndv, 0, dest_p);
}

static wst_status_t dest(struct fixture *f, uint32_t item, uint64_t offset,
                         uint64_t version, uint32_t count, size_t len,
                         void **dest_p)
{
    return dest_rndv(f, item, offset, version, count, len, 1, dest_p);
}

/* The fixture's region made device memory, the half rebuilt over it;
 * 'ucx_cuda': its UCX writes device memory. No landing ring. */
static void device_region(struct fixture *f, int ucx_cuda)
{
    wst_rx_destroy(f->rx);
    f->region.mem = WST_MEM_CUDA;
    struct wst_rx_am_params p = {
        .log = &f->log,
        .plan = &f->plan,
        .events = {.arg = f, .landed = on_landed, .failed = on_failed},
        .ucx_cuda = ucx_cuda,
    };
    assert_int_equal(wst_rx_am_create(&p, &f->rx), WST_OK);
}

/* Device memory with a CUDA-aware UCX (the direct path): a rendezvous
 * message lands at its planned place in the region, which UCX writes. */
static void test_am_rx_device_rndv_direct(void **state)
{
    struct fixture *f = *state;
    void *d;

    device_region(f, 1);
    assert_int_equal(f->rx->ops->begin(f->rx, 2), WST_OK);
    assert_int_equal(dest_rndv(f, 1, 64, 2, 1, 136, 1, &d), WST_OK);
    assert_ptr_equal(d, f->mem + 100 + 64);
    struct wst_data_hdr h = {.item = 1, .offset = 64, .version = 2, .count = 1};
    f->rx->ops->data_done(f->rx, &h, d, 136, WST_OK);
    assert_int_equal(f->landed, 136);
    assert_int_equal(f->n_failed, 0);
}

/* An eager message would be copied with memcpy: never into device memory.
 * Without a landing ring it is refused and the refit fails. */
static void test_am_rx_device_eager_needs_landing(void **state)
{
    struct fixture *f = *state;
    void *d;

    device_region(f, 1);
    assert_int_equal(f->rx->ops->begin(f->rx, 2), WST_OK);
    assert_int_equal(dest_rndv(f, 0, 0, 2, 1, 100, 0, &d), WST_ERR_PROTOCOL);
    assert_null(d);
    assert_int_equal(f->n_failed, 1);
}

/* Without a CUDA-aware UCX even a rendezvous message for device memory
 * needs the landing ring (UCX could not write there). */
static void test_am_rx_device_no_ucx_cuda_needs_landing(void **state)
{
    struct fixture *f = *state;
    void *d;

    device_region(f, 0);
    assert_int_equal(f->rx->ops->begin(f->rx, 2), WST_OK);
    assert_int_equal(dest_rndv(f, 0, 0, 2, 1, 100, 1, &d), WST_ERR_PROTOCOL);
    assert_null(d);
    assert_int_equal(f->n_failed, 1);
}

/* Device memory this process cannot export (mapped from its engine)
 * with a CUDA-aware UCX but no device ring (WST_DEVICE_RING=off): UCX is
 * handed the planned place itself, as before the ring existed. */
static void test_am_rx_device_no_export_without_ring(void **state)
{
    struct fixture *f = *state;
    void *d;

    f->region.no_export = 1;
    device_region(f, 1);
    assert_int_equal(f->rx->ops->begin(f->rx, 2), WST_OK);
    assert_int_equal(dest_rndv(f, 1, 0, 2, 1, 200, 1, &d), WST_OK);
    assert_ptr_equal(d, f->mem + 100);
    assert_int_equal(f->n_failed, 0);
}

/* The rule the receiver's plan and its am half share (am.h): which
 * regions take the larger messages of a CUDA-aware UCX. */
static void test_am_rx_lands_direct_rule(void **state)
{
    struct wst_rx_region host = {.mem = WST_MEM_HOST};
    struct wst_rx_region dev = {.mem = WST_MEM_CUDA};
    struct wst_rx_region engine = {.mem = WST_MEM_CUDA, .no_export = 1};

    (void)state;
    assert_false(wst_am_lands_direct(&host, 1, 1));
    assert_false(wst_am_lands_direct(&host, 1, 0));
    assert_true(wst_am_lands_direct(&dev, 1, 1));
    assert_true(wst_am_lands_direct(&dev, 1, 0));
    assert_false(wst_am_lands_direct(&dev, 0, 0));    /* the pinned ring */
    assert_false(wst_am_lands_direct(&engine, 1, 1)); /* the device ring */
    assert_true(wst_am_lands_direct(&engine, 1, 0));
    assert_false(wst_am_lands_direct(&engine, 0, 1));
}

/* The message size the receiver's plan offers per region (am.h): device
 * memory a CUDA-aware UCX writes gets the device size, through the device
 * ring no more than the ring takes; everything else the default (0). */
static void test_am_rx_message_max_rule(void **state)
{
    const uint64_t mib = 1u << 20;
    struct wst_rx_region host = {.mem = WST_MEM_HOST};
    struct wst_rx_region dev = {.mem = WST_MEM_CUDA};
    struct wst_rx_region engine = {.mem = WST_MEM_CUDA, .no_export = 1};

    (void)state;
    assert_int_equal(wst_am_message_max(&host, 1, 32 * mib, 32 * mib), 0);
    assert_int_equal(wst_am_message_max(&host, 0, 0, 32 * mib), 0);
    assert_int_equal(wst_am_message_max(&dev, 1, 0, 32 * mib), 32 * mib);
    assert_int_equal(wst_am_message_max(&dev, 1, 8 * mib, 32 * mib),
                     32 * mib); /* lands direct: the ring's limit is moot */
    assert_int_equal(wst_am_message_max(&dev, 0, 0, 32 * mib), 0);
    /* The device ring: its own limit, and never above the device size. */
    assert_int_equal(wst_am_message_max(&engine, 1, 32 * mib, 32 * mib),
                     32 * mib);
    assert_int_equal(wst_am_message_max(&engine, 1, 16 * mib, 32 * mib),
                     16 * mib);
    assert_int_equal(wst_am_message_max(&engine, 1, 32 * mib, 8 * mib),
                     8 * mib);
    /* No ring: UCX writes it directly. No CUDA-aware UCX: the pinned ring. */
    assert_int_equal(wst_am_message_max(&engine, 1, 0, 32 * mib), 32 * mib);
    assert_int_equal(wst_am_message_max(&engine, 0, 32 * mib, 32 * mib), 0);
}

/* Each message counts in its destination's class once placed and once
 * received, with its bytes; a refused one counts nowhere. */
static void test_am_rx_stats_per_class(void **state)
{
    struct fixture *f = *state;
    struct wst_rx_am_stats stats;
    void *d;

    memset(&stats, 0, sizeof(stats));
    wst_rx_destroy(f->rx);
    struct wst_rx_am_params p = {
        .log = &f->log,
        .plan = &f->plan,
        .events = {.arg = f, .landed = on_landed, .failed = on_failed},
        .stats = &stats,
    };
    assert_int_equal(wst_rx_am_create(&p, &f->rx), WST_OK);
    assert_int_equal(f->rx->ops->begin(f->rx, 2), WST_OK);
    assert_int_equal(dest(f, 1, 64, 2, 1, 136, &d), WST_OK);
    const struct wst_am_class_stats *c = &stats.c[WST_AM_TO_HOST];
    assert_int_equal(c->placed, 1);
    assert_int_equal(c->received, 0);
    struct wst_data_hdr h = {.item = 1, .offset = 64, .version = 2, .count = 1};
    f->rx->ops->data_done(f->rx, &h, d, 136, WST_OK);
    assert_int_equal(c->received, 1);
    assert_int_equal(c->bytes, 136);
    assert_true(c->last_ns >= c->first_ns);
    assert_true(c->received_ns_sum >= c->placed_ns_sum);
    /* Outside the plan: refused, not counted. */
    assert_int_equal(dest(f, 1, 150, 2, 1, 100, &d), WST_ERR_PROTOCOL);
    assert_int_equal(c->placed, 1);
    for (int k = 0; k < WST_AM_DEST_CLASSES; k++)
        if (k != WST_AM_TO_HOST)
            assert_int_equal(stats.c[k].placed + stats.c[k].received, 0);
}

/* The version not in flight (before begin, an older or a newer one,
 * after abort): no destination, no failure. */
static void test_am_rx_other_version_dropped(void **state)
{
    struct fixture *f = *state;
    void *d;

    assert_int_equal(dest(f, 0, 0, 5, 1, 10, &d), WST_ERR_STATE);
    assert_int_equal(f->rx->ops->begin(f->rx, 5), WST_OK);
    assert_int_equal(dest(f, 0, 0, 4, 1, 10, &d), WST_ERR_STATE);
    assert_null(d);
    assert_int_equal(dest(f, 0, 0, 6, 1, 10, &d), WST_ERR_STATE);
    assert_null(d);
    assert_int_equal(dest(f, 0, 0, 5, 1, 10, &d), WST_OK);
    assert_ptr_equal(d, f->mem);
    f->rx->ops->abort(f->rx);
    assert_int_equal(dest(f, 0, 0, 5, 1, 10, &d), WST_ERR_STATE);
    assert_null(d);
    assert_int_equal(f->n_failed, 0);
}

/* Inside the plan: the exact place, a chunk at its offset, and whole
 * neighbouring items gathered. */
static void test_am_rx_inside_plan(void **state)
{
    struct fixture *f = *state;
    void *d;

    assert_int_equal(f->rx->ops->begin(f->rx, 2), WST_OK);
    assert_int_equal(dest(f, 1, 50, 2, 1, 150, &d), WST_OK);
    assert_ptr_equal(d, f->mem + 150);
    assert_int_equal(dest(f, 0, 0, 2, 2, 300, &d), WST_OK);
    assert_ptr_equal(d, f->mem);
    assert_int_equal(dest(f, 2, 0, 2, 1, 50, &d), WST_OK);
    assert_ptr_equal(d, f->mem + 1000);
    assert_int_equal(f->n_failed, 0);
}

/* Outside the plan: no destination, and the refit fails. */
static void test_am_rx_outside_plan_refused(void **state)
{
    struct fixture *f = *state;
    struct {
        uint32_t item, count;
        uint64_t offset;
        size_t len;
    } bad[] = {
        {3, 1, 0, 1},               /* no such item */
        {99999, 1, 0, 1},           /* far off */
        {0, 1, 0, 101},             /* past the item's end */
        {0, 1, 100, 1},             /* offset at the end, a byte */
        {1, 1, 201, 0},             /* offset past the end */
        {0, 1, UINT64_MAX - 5, 10}, /* offset that wraps */
        {0, 2, 0, 299},             /* gathered, a byte short */
        {0, 2, 10, 290},            /* gathered, not from the start */
        {1, 2, 0, 250},             /* gathered across layers */
        {2, 2, 0, 50},              /* gathered past the last item */
        {0, 0, 0, 0},               /* count 0 */
    };
    void *d;

    assert_int_equal(f->rx->ops->begin(f->rx, 2), WST_OK);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_int_equal(dest(f, bad[i].item, bad[i].offset, 2, bad[i].count,
                              bad[i].len, &d),
                         WST_ERR_PROTOCOL);
        assert_null(d);
        assert_int_equal(f->n_failed, (int)i + 1);
    }
}

/* A scatter message: items 0 and 1 of layer 0, back to back in the
 * message, land each at its own place (item 1 moved away from item 0),
 * bit-exact, and nothing between them is written. */
static void test_am_rx_scatter_lands(void **state)
{
    struct fixture *f = *state;
    unsigned char msg[300];
    void *d;

    f->items[1].dst_offset = 2000;
    for (size_t i = 0; i < sizeof(msg); i++)
        msg[i] = (unsigned char)(i * 7 + 1);
    assert_int_equal(f->rx->ops->begin(f->rx, 2), WST_OK);
    assert_int_equal(dest_flags(f, 0, 0, 2, 2, 300, 0, WST_DATA_SCATTER, &d),
                     WST_OK);
    assert_non_null(d);
    assert_true((char *)d < f->mem || (char *)d >= f->mem + REGION_LEN);
    memcpy(d, msg, sizeof(msg)); /* what the worker does with eager bytes */
    struct wst_data_hdr h = {
        .item = 0, .version = 2, .count = 2, .flags = WST_DATA_SCATTER};
    f->rx->ops->data_done(f->rx, &h, d, 300, WST_OK);
    assert_memory_equal(f->mem, msg, 100);
    assert_memory_equal(f->mem + 2000, msg + 100, 200);
    for (size_t i = 100; i < 2000; i++)
        assert_int_equal(f->mem[i], 0);
    assert_int_equal(f->landed, 300);
    assert_int_equal(f->n_failed, 0);
}

/* Scatter messages outside their rules, and unknown flags: no
 * destination, and the refit fails. */
static void test_am_rx_scatter_refused(void **state)
{
    struct fixture *f = *state;
    struct {
        uint32_t item, count, flags;
        uint64_t offset;
        size_t len;
        int rndv;
    } bad[] = {
        {0, 2, WST_DATA_SCATTER, 0, 300, 1}, /* by rendezvous */
        {0, 2, 2, 0, 300, 0},                /* an unknown flag */
        {0, 2, WST_DATA_SCATTER | 4, 0, 300, 0},
        {0, 2, WST_DATA_SCATTER, 0, 299, 0},  /* a byte short */
        {0, 2, WST_DATA_SCATTER, 10, 290, 0}, /* not from an item's start */
        {1, 2, WST_DATA_SCATTER, 0, 250, 0},  /* across layers */
        {2, 2, WST_DATA_SCATTER, 0, 50, 0},   /* past the last item */
        {0, 0, WST_DATA_SCATTER, 0, 0, 0},    /* count 0 */
        {0, 2, WST_DATA_SCATTER, 0, WST_SCATTER_BYTES + 1, 0}, /* too big */
    };
    void *d;

    f->items[1].dst_offset = 2000;
    assert_int_equal(f->rx->ops->begin(f->rx, 2), WST_OK);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_int_equal(dest_flags(f, bad[i].item, bad[i].offset, 2,
                                    bad[i].count, bad[i].len, bad[i].rndv,
                                    bad[i].flags, &d),
                         WST_ERR_PROTOCOL);
        assert_null(d);
        assert_int_equal(f->n_failed, (int)i + 1);
    }
}

/* Scatter messages are copied with memcpy: never into device memory. */
static void test_am_rx_scatter_not_into_device(void **state)
{
    struct fixture *f = *state;
    void *d;

    device_region(f, 1);
    assert_int_equal(f->rx->ops->begin(f->rx, 2), WST_OK);
    assert_int_equal(dest_flags(f, 0, 0, 2, 2, 300, 0, WST_DATA_SCATTER, &d),
                     WST_ERR_PROTOCOL);
    assert_null(d);
    assert_int_equal(f->n_failed, 1);
}

/* A message placed for a version that was aborted before its bytes were
 * in counts for nothing. */
static void test_am_rx_done_after_abort_not_counted(void **state)
{
    struct fixture *f = *state;
    struct wst_data_hdr h = {.item = 0, .version = 3, .count = 1};
    void *d;

    assert_int_equal(f->rx->ops->begin(f->rx, 3), WST_OK);
    assert_int_equal(f->rx->ops->data_dest(f->rx, &h, 100, 0, &d), WST_OK);
    f->rx->ops->abort(f->rx);
    f->rx->ops->data_done(f->rx, &h, d, 100, WST_OK);
    assert_int_equal(f->landed, 0);
    assert_int_equal(f->rx->ops->begin(f->rx, 4), WST_OK);
    f->rx->ops->data_done(f->rx, &h, d, 100, WST_OK); /* v3, late */
    assert_int_equal(f->landed, 0);
    assert_int_equal(f->n_failed, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_am_rx_other_version_dropped, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_am_rx_device_rndv_direct, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_am_rx_device_eager_needs_landing,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_am_rx_device_no_ucx_cuda_needs_landing, setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_am_rx_device_no_export_without_ring, setup, teardown),
        cmocka_unit_test(test_am_rx_lands_direct_rule),
        cmocka_unit_test(test_am_rx_message_max_rule),
        cmocka_unit_test_setup_teardown(test_am_rx_stats_per_class, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_am_rx_inside_plan, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_am_rx_outside_plan_refused, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_am_rx_done_after_abort_not_counted,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_am_rx_scatter_lands, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_am_rx_scatter_refused, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_am_rx_scatter_not_into_device,
                                        setup, teardown),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
