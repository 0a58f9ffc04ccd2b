/* test_slices.c - a sender rank that owns a tensor as several slices (one
 * registration per box, each in its own buffer) pushes into a real
 * wstream-agent; every byte of live memory is checked against the model's
 * generator (wst_model_verify), which knows nothing of slices or plans.
 *
 * Slices here: each tensor of the tiny model cut on dim 0 into three boxes
 * (the first of them registered as the equivalent flat range, so flat and
 * N-D slices of one tensor mix), registered middle, last, first, so that
 * have order differs from box order; 1-D tensors cut into a flat half and
 * an N-D half. The agent's TP-1 wants are whole tensors: each want spans
 * every slice of its tensor and must become one transfer per slice.
 *
 * Refusals: a slice overlapping an earlier one (N-D or flat), or with
 * another dtype or global shape, is refused with its status and a message
 * naming both slices; the refusals change nothing, and the same sender
 * then completes the tensor and refits.
 *
 * On main before slices, registering a second box of a name was refused
 * ("registered twice"), so every case here failed at register.
 *
 * usage: test_slices PATH_TO_WSTREAM_AGENT
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "agent_fixture.h"

#define MAX_SLICES 3
#define WORLD_MAX 2

static const char *agent_bin;

static int setup_agent(void **state)
{
    return it_agent_setup(state, agent_bin);
}

static uint64_t inner_elems(const struct wst_tensor_desc *t)
{
    uint64_t n = 1;

    for (uint32_t d = 1; d < t->ndim; d++)
        n *= t->shape[d];
    return n;
}

/* Rows [a, b) of an N-D have whose other dims are whole, as a flat range
 * when 'flat' (the same elements). */
static struct wst_have rows_of(const struct wst_have *h, uint64_t a, uint64_t b,
                               int flat)
{
    struct wst_have x = *h;

    if (flat) {
        memset(&x.box, 0, sizeof(x.box));
        x.flat = 1;
        x.box.ndim = 1;
        x.box.start[0] = a * inner_elems(&h->tensor);
        x.box.stop[0] = b * inner_elems(&h->tensor);
        return x;
    }
    x.box.start[0] = a;
    x.box.stop[0] = b;
    return x;
}

/* Cuts one have into slices, in the order they are registered. */
static size_t cut(const struct wst_have *h, struct wst_have *out)
{
    uint64_t a = h->box.start[0], b = h->box.stop[0], n = b - a;

    if (h->flat && n >= 2) {
        uint64_t m = a + n / 2;
        out[0] = *h;
        out[0].box.stop[0] = m;
        out[1] = *h;
        out[1].box.start[0] = m;
        if (h->tensor.ndim == 1)
            out[1].flat = 0; /* a 1-D N-D box: the same elements */
        return 2;
    }
    if (!h->flat && n >= 3) {
        uint64_t p = a + n / 3, q = a + 2 * n / 3;
        out[0] = rows_of(h, p, q, 0);
        out[1] = rows_of(h, q, b, 0);
        out[2] = rows_of(h, a, p, h->tensor.ndim >= 2);
        return 3;
    }
    if (!h->flat && n == 2) {
        out[0] = rows_of(h, a + 1, b, 0);
        out[1] = rows_of(h, a, a + 1, 0);
        return 2;
    }
    out[0] = *h;
    return 1;
}

/* Replaces s->haves by their slices; the number of tensors cut. */
static size_t cut_all(struct it_sender *s)
{
    struct wst_have *out = calloc(s->n_haves * MAX_SLICES, sizeof(*out));
    size_t n = 0, cut_tensors = 0;

    assert_non_null(out);
    for (size_t i = 0; i < s->n_haves; i++) {
        size_t k = cut(&s->haves[i], &out[n]);
        cut_tensors += k > 1;
        n += k;
    }
    free(s->haves);
    s->haves = out;
    s->n_haves = n;
    return cut_tensors;
}

static void expect_live(const struct it_agent *a, uint64_t version)
{
    char err[512];
    uint64_t checked = 0;

    if (wst_model_verify(&a->layout, a->shm, IT_SEED, version, &checked, err,
                         sizeof(err)) != WST_OK)
        fail_msg("live memory is not version %llu: %s",
                 (unsigned long long)version, err);
    assert_int_equal(checked, wst_model_bytes(&a->model));
}

static void push_ok(struct it_sender *s, uint64_t version)
{
    wst_status_t st = wst_sender_push(s->sender, version);

    if (st == WST_OK)
        st = wst_sender_wait(s->sender, 30.0);
    if (st != WST_OK)
        fail_msg("version %llu: %s: %s", (unsigned long long)version,
                 wst_status_string(st), wst_sender_last_error(s->sender));
}

/* Rank 0 of 1 holds every tensor as two or three slices; two versions
 * (the second replays the cached plan), each bit-exact, each byte moved
 * once. */
static void test_slices_one_rank(void **state)
{
    struct it_agent *a = *state;
    struct it_sender s;
    size_t n_tensors;

    assert_int_equal(it_sender_load(&s, a), 0);
    n_tensors = s.n_haves;
    assert_int_equal(cut_all(&s), n_tensors); /* every tensor is cut */
    assert_true(s.n_haves > 2 * n_tensors);
    assert_int_equal(it_sender_setup(&s, a, SIZE_MAX, 1), WST_OK);
    push_ok(&s, 1);
    assert_int_equal(wst_sender_bytes_moved(s.sender),
                     wst_model_bytes(&a->model));
    assert_int_equal(it_agent_wait_status(a, 1, 10.0), 0);
    expect_live(a, 1);
    it_sender_fill(&s, 2);
    push_ok(&s, 2);
    assert_int_equal(it_agent_wait_status(a, 2, 10.0), 0);
    expect_live(a, 2);
    it_sender_destroy(&s);
}

struct rank_push {
    struct it_sender *s;
    uint64_t version;
    wst_status_t status;
};

static void *push_thread(void *arg)
{
    struct rank_push *p = arg;

    p->status = wst_sender_push(p->s->sender, p->version);
    if (p->status == WST_OK)
        p->status = wst_sender_wait(p->s->sender, 30.0);
    return NULL;
}

/* Ranks 0 and 1 of 2 each hold half of every tensor (ceil chunks on dim 0,
 * flat halves of 1-D tensors), each half as two or three slices; the
 * agent's wants span slices of both ranks. */
static void test_slices_two_ranks(void **state)
{
    struct it_agent *a = *state;
    struct it_sender s[WORLD_MAX];
    struct rank_push push[WORLD_MAX];
    pthread_t th[WORLD_MAX];
    uint64_t moved = 0;

    for (uint32_t r = 0; r < WORLD_MAX; r++) {
        memset(&s[r], 0, sizeof(s[r]));
        assert_int_equal(wst_model_trainer_shards(&a->model, r, WORLD_MAX,
                                                  &s[r].haves, &s[r].n_haves),
                         WST_OK);
        assert_true(cut_all(&s[r]) > 0);
        assert_int_equal(
            it_sender_setup_rank(&s[r], a, r, WORLD_MAX, SIZE_MAX, 1), WST_OK);
    }
    for (uint64_t v = 1; v <= 2; v++) {
        for (uint32_t r = 0; r < WORLD_MAX; r++) {
            if (v > 1)
                it_sender_fill(&s[r], v);
            push[r] = (struct rank_push){.s = &s[r], .version = v};
            assert_int_equal(
                pthread_create(&th[r], NULL, push_thread, &push[r]), 0);
        }
        moved = 0;
        for (uint32_t r = 0; r < WORLD_MAX; r++) {
            pthread_join(th[r], NULL);
            if (push[r].status != WST_OK)
                fail_msg("rank %u, version %llu: %s: %s", r,
                         (unsigned long long)v,
                         wst_status_string(push[r].status),
                         wst_sender_last_error(s[r].sender));
            moved += wst_sender_bytes_moved(s[r].sender);
        }
        assert_int_equal(moved, wst_model_bytes(&a->model));
        assert_int_equal(it_agent_wait_status(a, v, 10.0), 0);
        expect_live(a, v);
    }
    for (uint32_t r = 0; r < WORLD_MAX; r++)
        it_sender_destroy(&s[r]);
}

/* Registers 'h' (its buffer sized from it, filled for version 1); the
 * buffer is kept in *buf_p for the sender's life. */
static wst_status_t register_slice(struct it_sender *s,
                                   const struct wst_have *h, void **buf_p)
{
    uint64_t bytes = wst_model_shard_bytes(h);

    *buf_p = malloc(bytes ? bytes : 1);
    assert_non_null(*buf_p);
    wst_model_fill_shard(h, IT_SEED, 1, *buf_p);
    struct wst_shard sh = wst_model_shard(h, *buf_p);
    return wst_sender_register(s->sender, &sh);
}

/* The refusal's status, and its message holds every needle. */
static void expect_refused(struct it_sender *s, const struct wst_have *h,
                           wst_status_t want, const char *const *needles)
{
    void *buf = NULL;
    wst_status_t st = register_slice(s, h, &buf);
    const char *msg = wst_sender_last_error(s->sender);

    fprintf(stderr, "refused: %s: %s\n", wst_status_name(st), msg);
    free(buf);
    assert_int_equal(st, want);
    for (size_t i = 0; needles[i] != NULL; i++)
        if (strstr(msg, needles[i]) == NULL)
            fail_msg("the refusal '%s' does not say '%s'", msg, needles[i]);
}

static void test_slices_refusals(void **state)
{
    struct it_agent *a = *state;
    struct it_sender s;
    size_t k;
    void *kept[2] = {NULL, NULL};
    char name[WST_NAME_MAX + 16], first[64], second[64], third[64];

    assert_int_equal(it_sender_load(&s, a), 0);
    k = it_first_matrix(&s);
    const struct wst_have whole = s.haves[k];
    uint64_t rows = whole.tensor.shape[0], cols = whole.tensor.shape[1];
    assert_true(rows >= 6);
    /* Every tensor but k, whole; k comes in slices below. */
    assert_int_equal(it_sender_setup(&s, a, k, 1), WST_OK);
    snprintf(name, sizeof(name), "register '%s'", whole.tensor.name);

    struct wst_have top = rows_of(&whole, 0, 3, 0);
    assert_int_equal(register_slice(&s, &top, &kept[0]), WST_OK);
    snprintf(first, sizeof(first), "slice [0:3, 0:%llu]",
             (unsigned long long)cols);

    /* rows [2, 5) share row 2 with rows [0, 3) */
    struct wst_have over = rows_of(&whole, 2, 5, 0);
    snprintf(second, sizeof(second), "slice [2:5, 0:%llu]",
             (unsigned long long)cols);
    expect_refused(&s, &over, WST_ERR_INVALID,
                   (const char *const[]){name, second, "overlaps", first,
                                         "element [2, 0]", "WST_ERR_INVALID",
                                         NULL});
    /* the last element of row 2 as a flat range */
    struct wst_have flat = rows_of(&whole, 3, 4, 1);
    flat.box.start[0] -= 1;
    snprintf(second, sizeof(second), "slice flat [%llu:%llu]",
             (unsigned long long)(3 * cols - 1),
             (unsigned long long)(4 * cols));
    snprintf(third, sizeof(third), "element [2, %llu]",
             (unsigned long long)(cols - 1));
    expect_refused(
        &s, &flat, WST_ERR_INVALID,
        (const char *const[]){name, second, "overlaps", first, third, NULL});
    /* another dtype, another global shape */
    struct wst_have retyped = rows_of(&whole, 3, rows, 0);
    retyped.tensor.dtype = WST_DTYPE_F32;
    snprintf(second, sizeof(second), "slice [3:%llu, 0:%llu]",
             (unsigned long long)rows, (unsigned long long)cols);
    expect_refused(&s, &retyped, WST_ERR_DTYPE_MISMATCH,
                   (const char *const[]){name, second, "has dtype f32", first,
                                         "has bf16", NULL});
    struct wst_have reshaped = rows_of(&whole, 3, rows, 0);
    reshaped.tensor.shape[0] = rows + 1;
    snprintf(third, sizeof(third), "shape [%llu, %llu]",
             (unsigned long long)rows + 1, (unsigned long long)cols);
    expect_refused(&s, &reshaped, WST_ERR_SHAPE_MISMATCH,
                   (const char *const[]){name, second, third, first, NULL});

    /* Nothing of the refused slices stayed: the rest completes the tensor
     * and the refit is bit-exact. */
    struct wst_have rest = rows_of(&whole, 3, rows, 1);
    assert_int_equal(register_slice(&s, &rest, &kept[1]), WST_OK);
    push_ok(&s, 1);
    assert_int_equal(it_agent_wait_status(a, 1, 10.0), 0);
    expect_live(a, 1);
    /* After the first push no slice is taken. */
    struct wst_have late = rows_of(&whole, 0, 1, 0);
    expect_refused(&s, &late, WST_ERR_STATE,
                   (const char *const[]){"before the first push", NULL});
    it_sender_destroy(&s);
    free(kept[0]);
    free(kept[1]);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_slices_one_rank, setup_agent,
                                        it_agent_teardown),
        cmocka_unit_test_setup_teardown(test_slices_two_ranks, setup_agent,
                                        it_agent_teardown),
        cmocka_unit_test_setup_teardown(test_slices_refusals, setup_agent,
                                        it_agent_teardown),
    };

    if (argc != 2) {
        fprintf(stderr, "usage: %s PATH_TO_WSTREAM_AGENT\n", argv[0]);
        return 2;
    }
    agent_bin = argv[1];
    return cmocka_run_group_tests(tests, NULL, NULL);
}
