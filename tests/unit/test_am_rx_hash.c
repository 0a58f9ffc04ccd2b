/* test_am_rx_hash.c - the am mover's receiving half hashing data as it
 * lands (common/movers/am_rx.c), on real hashing threads, its results
 * coming back to a real worker's progress thread.
 *
 * The parts it reports for a layer must add up to the digest of the
 * layer's bytes taken whole (wst_digest_update over each item from its
 * start, the sender's way); a message not cut at digest chunk boundaries
 * is reported unhashed; a hash that comes back after its refit ended, or
 * after the half was destroyed, is not counted and frees nothing twice.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "am.h"
#include "digest.h"

#define KIB 1024u
#define N_ITEMS 4
#define REGION_LEN (2u << 20)

struct fixture {
    struct wst_logger log;
    wst_worker_t *w;
    wst_jobq_t *hashers;
    char *mem; /* the region */
    struct wst_plan_item items[N_ITEMS];
    size_t layer_first[3];
    struct wst_rx_region region;
    struct wst_rx_plan plan;
    struct wst_rx *rx;

    /* what landed() said, per layer (progress thread; read after a
     * drain, under the worker's call) */
    uint64_t landed[2], hashed[2], sum[2];
    int n_failed;
};

static void on_landed(void *arg, uint32_t layer, uint64_t bytes,
                      uint64_t hashed, uint64_t sum)
{
    struct fixture *f = arg;

    assert_true(layer < 2);
    assert_true(hashed == 0 || hashed == bytes);
    f->landed[layer] += bytes;
    f->hashed[layer] += hashed;
    f->sum[layer] += sum;
}

static void on_failed(void *arg, wst_status_t status, const char *reason)
{
    struct fixture *f = arg;

    (void)status;
    (void)reason;
    f->n_failed++;
}

/* Layer 0: 200 KiB + 7 bytes at 0 (four digest chunks, the last short),
 * then 100 and 300 bytes (gathered); layer 1: 1 MiB at 1 MiB. */
static int setup(void **state)
{
    struct fixture *f = calloc(1, sizeof(*f));
    struct wst_worker_params wp = {0};

    if (f == NULL || (f->mem = malloc(REGION_LEN)) == NULL)
        return -1;
    wst_logger_init(&f->log, "test_am_rx_hash", WST_LOG_ERROR);
    wp.log = &f->log;
    if (wst_worker_create(&wp, &f->w) != WST_OK ||
        wst_jobq_create_threads("test-hash", 2, &f->hashers) != WST_OK)
        return -1;
    for (size_t i = 0; i < REGION_LEN; i++)
        f->mem[i] = (char)(i * 2654435761u >> 13);
    f->items[0] = (struct wst_plan_item){.length = 200 * KIB + 7};
    f->items[1] =
        (struct wst_plan_item){.dst_offset = 200 * KIB + 7, .length = 100};
    f->items[2] =
        (struct wst_plan_item){.dst_offset = 200 * KIB + 107, .length = 300};
    f->items[3] = (struct wst_plan_item){
        .dst_offset = 1u << 20, .length = 1u << 20, .layer = 1};
    f->layer_first[0] = 0;
    f->layer_first[1] = 3;
    f->layer_first[2] = 4;
    f->region = (struct wst_rx_region){
        .base = f->mem, .length = REGION_LEN, .mem = WST_MEM_HOST};
    f->plan = (struct wst_rx_plan){.items = f->items,
                                   .n_items = N_ITEMS,
                                   .n_layers = 2,
                                   .layer_first = f->layer_first,
                                   .regions = &f->region,
                                   .n_regions = 1};
    struct wst_rx_am_params p = {
        .log = &f->log,
        .plan = &f->plan,
        .events = {.arg = f, .landed = on_landed, .failed = on_failed},
        .hashers = f->hashers,
        .worker = f->w,
    };
    if (wst_rx_am_create(&p, &f->rx) != WST_OK)
        return -1;
    *state = f;
    return 0;
}

/* The half goes first, the hashers after (late hashes reach the worker,
 * which frees the half), the worker last. */
static void destroy_rx(void *arg)
{
    struct fixture *f = arg;

    wst_rx_destroy(f->rx);
    f->rx = NULL;
}

static int teardown(void **state)
{
    struct fixture *f = *state;

    if (f->rx != NULL)
        wst_worker_call(f->w, destroy_rx, f);
    wst_jobq_destroy(f->hashers);
    wst_worker_destroy(f->w);
    free(f->mem);
    free(f);
    return 0;
}

/* One message on the progress thread: its destination, then its done. */
struct msg {
    struct fixture *f;
    uint32_t item, count;
    uint64_t offset, version;
    size_t len;
    int abort_after; /* then abort the refit in the same call */
    int destroy_after;
    wst_status_t status;
};

static void land(void *arg)
{
    struct msg *m = arg;
    struct wst_rx *rx = m->f->rx;
    struct wst_data_hdr h = {.item = m->item,
                             .offset = m->offset,
                             .version = m->version,
                             .count = m->count};
    void *dest = NULL;

    m->status = rx->ops->data_dest(rx, &h, m->len, 1, &dest);
    if (m->status == WST_OK)
        rx->ops->data_done(rx, &h, dest, m->len, WST_OK);
    if (m->abort_after)
        rx->ops->abort(rx);
    if (m->destroy_after) {
        wst_rx_destroy(rx);
        m->f->rx = NULL;
    }
}

static void send_msg(struct fixture *f, uint32_t item, uint32_t count,
                     uint64_t offset, size_t len)
{
    struct msg m = {f, item, count, offset, 7, len, 0, 0, WST_OK};

    assert_int_equal(wst_worker_call(f->w, land, &m), WST_OK);
    assert_int_equal(m.status, WST_OK);
}

static void begin(void *arg)
{
    struct fixture *f = arg;

    assert_int_equal(f->rx->ops->begin(f->rx, 7), WST_OK);
}

static void nothing(void *arg)
{
    (void)arg;
}

static void at_barrier(void *arg)
{
    pthread_barrier_wait(arg);
}

/* Every queued hash ran and its result reached the progress thread: once
 * both hashing threads sit in a barrier job, each finished the jobs it
 * took, and every job queued before was taken (FIFO); their results were
 * posted before the call below, which runs after them. */
static void drain(struct fixture *f)
{
    pthread_barrier_t b;

    pthread_barrier_init(&b, NULL, 3);
    assert_int_equal(wst_jobq_post(f->hashers, at_barrier, &b), WST_OK);
    assert_int_equal(wst_jobq_post(f->hashers, at_barrier, &b), WST_OK);
    pthread_barrier_wait(&b);
    pthread_barrier_destroy(&b);
    assert_int_equal(wst_worker_call(f->w, nothing, NULL), WST_OK);
}

/* The layer's digest taken whole, as the sender takes it. */
static uint64_t layer_digest(const struct fixture *f, uint32_t layer)
{
    struct wst_digest d;

    wst_digest_init(&d);
    for (size_t k = f->layer_first[layer]; k < f->layer_first[layer + 1]; k++)
        wst_digest_update(&d, f->mem + f->items[k].dst_offset,
                          f->items[k].length);
    return wst_digest_final(&d);
}

/* Chunks cut at 64 KiB multiples of their item, and gathered items: the
 * parts add up to the whole layer's digest, and a wrong byte shows. */
static void test_am_rx_hash_parts_add_up(void **state)
{
    struct fixture *f = *state;

    assert_int_equal(wst_worker_call(f->w, begin, f), WST_OK);
    send_msg(f, 0, 1, 128 * KIB, 72 * KIB + 7); /* the tail first */
    send_msg(f, 0, 1, 0, 128 * KIB);
    send_msg(f, 1, 2, 0, 400);
    drain(f);
    assert_int_equal(f->n_failed, 0);
    assert_int_equal(f->landed[0], 200 * KIB + 407);
    assert_int_equal(f->hashed[0], f->landed[0]);
    uint64_t want = layer_digest(f, 0);
    assert_true(wst_digest_from_sum(f->sum[0], f->landed[0]) == want);

    /* The same bytes with one bit flipped hash differently. */
    f->mem[150 * KIB] ^= 1;
    assert_true(layer_digest(f, 0) != want);
}

/* Chunks not on digest chunk boundaries land unhashed: the layer is read
 * again at its check. */
static void test_am_rx_hash_unaligned_not_hashed(void **state)
{
    struct fixture *f = *state;

    assert_int_equal(wst_worker_call(f->w, begin, f), WST_OK);
    send_msg(f, 3, 1, 0, 100000);
    send_msg(f, 3, 1, 100000, (1u << 20) - 100000);
    drain(f);
    assert_int_equal(f->landed[1], 1u << 20);
    assert_int_equal(f->hashed[1], 0);
    assert_int_equal(f->sum[1], 0);
}

/* Rebuilds the half over the fixture's plan as it is now (a test changed
 * it): worker thread. */
static void remake_rx(struct fixture *f, int ucx_cuda)
{
    wst_rx_destroy(f->rx);
    f->rx = NULL;
    struct wst_rx_am_params p = {
        .log = &f->log,
        .plan = &f->plan,
        .events = {.arg = f, .landed = on_landed, .failed = on_failed},
        .hashers = f->hashers,
        .worker = f->w,
        .ucx_cuda = ucx_cuda,
    };
    assert_int_equal(wst_rx_am_create(&p, &f->rx), WST_OK);
}

/* Rebuilds the half over a region that is device memory, with a UCX that
 * writes device memory (the direct path): worker thread. */
static void make_device_rx(void *arg)
{
    struct fixture *f = arg;

    f->region.mem = WST_MEM_CUDA;
    remake_rx(f, 1);
}

/* Device memory UCX wrote (rendezvous, direct path) lands where the plan
 * puts it and is never read by the host hashers (on a GPU that read would
 * fault): counted as landed, unhashed, for the GPU digest at the layer's
 * check. (Here the "device" region is host memory, so a host hash would
 * not crash but would show as hashed bytes.) */
static void test_am_rx_hash_device_memory_not_hashed(void **state)
{
    struct fixture *f = *state;

    assert_int_equal(wst_worker_call(f->w, make_device_rx, f), WST_OK);
    assert_int_equal(wst_worker_call(f->w, begin, f), WST_OK);
    send_msg(f, 0, 1, 0, 128 * KIB);
    send_msg(f, 0, 1, 128 * KIB, 72 * KIB + 7);
    send_msg(f, 1, 2, 0, 400);
    drain(f);
    assert_int_equal(f->n_failed, 0);
    assert_int_equal(f->landed[0], 200 * KIB + 407);
    assert_int_equal(f->hashed[0], 0);
    assert_int_equal(f->sum[0], 0);
}

/* Rebuilds the half with layer 1 as one item of 256 rows of 4 KiB
 * (planner.h): worker thread. */
static void make_rows_rx(void *arg)
{
    struct fixture *f = arg;

    f->items[3] = (struct wst_plan_item){.dst_offset = 1u << 20,
                                         .length = 4 * KIB,
                                         .more_rows = 255,
                                         .src_stride = 8 * KIB,
                                         .layer = 1};
    remake_rx(f, 0);
}

/* An item of rows lands as whole rows, each hashed as a run of its own,
 * both inline (a small message) and on the hashers: the parts add up to
 * the digest the sender takes row by row, which differs from the digest
 * of the same bytes taken as one run. A message that cuts a row is
 * refused. */
static void test_am_rx_hash_rows(void **state)
{
    struct fixture *f = *state;

    assert_int_equal(wst_worker_call(f->w, make_rows_rx, f), WST_OK);
    assert_int_equal(wst_worker_call(f->w, begin, f), WST_OK);
    send_msg(f, 3, 1, 0, 64 * KIB);
    send_msg(f, 3, 1, 64 * KIB, (1u << 20) - 64 * KIB);
    drain(f);
    assert_int_equal(f->n_failed, 0);
    assert_int_equal(f->landed[1], 1u << 20);
    assert_int_equal(f->hashed[1], 1u << 20);
    struct wst_digest d;
    wst_digest_init(&d);
    for (size_t r = 0; r < 256; r++)
        wst_digest_update(&d, f->mem + (1u << 20) + r * 4 * KIB, 4 * KIB);
    uint64_t want = wst_digest_final(&d);
    assert_true(wst_digest_from_sum(f->sum[1], f->landed[1]) == want);
    assert_true(wst_digest_buffer(f->mem + (1u << 20), 1u << 20) != want);

    struct msg m = {f, 3, 1, 100, 7, 4 * KIB, 0, 0, WST_OK};
    assert_int_equal(wst_worker_call(f->w, land, &m), WST_OK);
    assert_int_equal(m.status, WST_ERR_PROTOCOL);
    assert_int_equal(f->n_failed, 1);
    m.offset = 4 * KIB;
    m.len = 6 * KIB;
    assert_int_equal(wst_worker_call(f->w, land, &m), WST_OK);
    assert_int_equal(m.status, WST_ERR_PROTOCOL);
}

/* A hash that comes back after its refit was aborted is not counted; one
 * that comes back after the half was destroyed frees it, once. */
static void test_am_rx_hash_late_not_counted(void **state)
{
    struct fixture *f = *state;
    struct msg m = {f, 3, 1, 0, 7, 1u << 20, 1, 0, WST_OK};

    assert_int_equal(wst_worker_call(f->w, begin, f), WST_OK);
    assert_int_equal(wst_worker_call(f->w, land, &m), WST_OK);
    assert_int_equal(m.status, WST_OK);
    drain(f);
    assert_int_equal(f->landed[1], 0);

    /* Positive control: the same message in a refit not aborted. */
    assert_int_equal(wst_worker_call(f->w, begin, f), WST_OK);
    send_msg(f, 3, 1, 0, 1u << 20);
    drain(f);
    assert_int_equal(f->landed[1], 1u << 20);
    assert_int_equal(f->hashed[1], 1u << 20);

    m.abort_after = 0;
    m.destroy_after = 1;
    assert_int_equal(wst_worker_call(f->w, begin, f), WST_OK);
    assert_int_equal(wst_worker_call(f->w, land, &m), WST_OK);
    drain(f);
    assert_null(f->rx);
    assert_int_equal(f->landed[1], 1u << 20);
    assert_int_equal(f->n_failed, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_am_rx_hash_parts_add_up, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_am_rx_hash_unaligned_not_hashed,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_am_rx_hash_device_memory_not_hashed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_am_rx_hash_late_not_counted, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_am_rx_hash_rows, setup, teardown),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
