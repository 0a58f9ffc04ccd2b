/* test_refusal.c - a real wstream-agent refuses senders whose shards do not
 * describe its model (coverage gap, dtype, shape) before it writes a byte,
 * stays usable, and then takes a correct refit from the same rank.
 *
 * usage: test_refusal PATH_TO_WSTREAM_AGENT
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "agent_fixture.h"

static const char *agent_bin;

static int setup_agent(void **state)
{
    struct it_agent *a = calloc(1, sizeof(*a));

    if (a == NULL)
        return -1;
    if (it_agent_start(a, agent_bin) != 0) {
        fprintf(stderr, "setup: could not start wstream-agent '%s'\n",
                agent_bin);
        free(a);
        return -1;
    }
    *state = a;
    return 0;
}

static int teardown_agent(void **state)
{
    struct it_agent *a = *state;

    it_agent_stop(a);
    free(a);
    return 0;
}

/* The agent is as it started: usable, nothing committed, no byte written. */
static void assert_agent_untouched(struct it_agent *a)
{
    uint64_t committed = 99;
    int usable = 0;

    assert_true(it_agent_alive(a));
    assert_int_equal(it_agent_status(a, &committed, &usable), 0);
    assert_true(usable);
    assert_int_equal(committed, 0);
    assert_true(it_agent_shm_untouched(a));
}

/* Pushes version 1 from a sender built by 'edit' (NULL: none) with have
 * 'skip' left out, and expects 'want' naming the edited tensor. */
static void expect_refused(struct it_agent *a, size_t skip,
                           void (*edit)(struct wst_have *h), wst_status_t want)
{
    struct it_sender s;
    size_t k;
    char name[WST_NAME_MAX];
    wst_status_t st;

    assert_int_equal(it_sender_load(&s, a), 0);
    k = skip != SIZE_MAX ? skip : it_first_matrix(&s);
    snprintf(name, sizeof(name), "%s", s.haves[k].tensor.name);
    if (edit != NULL)
        edit(&s.haves[k]);
    assert_int_equal(it_sender_setup(&s, a, skip, 1), WST_OK);
    st = wst_sender_push(s.sender, 1);
    if (st == WST_OK)
        st = wst_sender_wait(s.sender, 10.0);
    fprintf(stderr, "push: %s: %s\n", wst_status_string(st),
            wst_sender_last_error(s.sender));
    assert_int_equal(st, want);
    if (strstr(wst_sender_last_error(s.sender), name) == NULL)
        fail_msg("the error '%s' does not name tensor %s",
                 wst_sender_last_error(s.sender), name);
    it_sender_destroy(&s);
    assert_agent_untouched(a);
}

static void to_f32(struct wst_have *h)
{
    h->tensor.dtype = WST_DTYPE_F32; /* the buffer is sized for f32 */
}

static void double_dim0(struct wst_have *h)
{
    h->tensor.shape[0] *= 2; /* the box still lies inside the shape */
}

static size_t gap_index(struct it_agent *a)
{
    struct it_sender s;
    size_t k;

    assert_int_equal(it_sender_load(&s, a), 0);
    k = it_first_matrix(&s);
    it_sender_destroy(&s);
    return k;
}

static void refusal_coverage_gap(struct it_agent *a)
{
    expect_refused(a, gap_index(a), NULL, WST_ERR_COVERAGE);
}

static void refusal_dtype(struct it_agent *a)
{
    expect_refused(a, SIZE_MAX, to_f32, WST_ERR_DTYPE_MISMATCH);
}

static void refusal_shape(struct it_agent *a)
{
    expect_refused(a, SIZE_MAX, double_dim0, WST_ERR_SHAPE_MISMATCH);
}

/* Versions 1 and 2 from one correct sender; every byte checked. */
static void correct_refits(struct it_agent *a)
{
    struct it_sender s;
    char err[512];
    char bad[512] = "";
    int n = 0;
    uint64_t committed = 0;
    int usable = 0;

    assert_int_equal(it_sender_load(&s, a), 0);
    assert_int_equal(it_sender_setup(&s, a, SIZE_MAX, 1), WST_OK);
    for (uint64_t v = 1; v <= 2; v++) {
        wst_status_t st;
        if (v > 1)
            it_sender_fill(&s, v);
        st = wst_sender_push(s.sender, v);
        if (st == WST_OK)
            st = wst_sender_wait(s.sender, 30.0);
        if (st != WST_OK)
            fail_msg("version %llu: %s: %s", (unsigned long long)v,
                     wst_status_string(st), wst_sender_last_error(s.sender));
        if (wst_model_verify(&a->layout, a->shm, IT_SEED, v, NULL, err,
                             sizeof(err)) != WST_OK)
            fail_msg("version %llu: %s", (unsigned long long)v, err);
        /* Checked after both versions, so a stale status file does not
         * hide whether version 2 went through. */
        int waited = it_agent_wait_status(a, v, 5.0);
        if (it_agent_status(a, &committed, &usable) != 0 || waited != 0 ||
            committed != v || !usable)
            n += snprintf(bad + n, sizeof(bad) - (size_t)n,
                          " after version %llu the status file says "
                          "committed_version %llu, usable %d;",
                          (unsigned long long)v, (unsigned long long)committed,
                          usable);
    }
    it_sender_destroy(&s);
    assert_true(it_agent_alive(a));
    if (n > 0)
        fail_msg("both versions verified in shm, but%s", bad);
}

static void test_refusal_coverage_gap(void **state)
{
    refusal_coverage_gap(*state);
}

static void test_refusal_dtype_mismatch(void **state)
{
    refusal_dtype(*state);
}

static void test_refusal_shape_mismatch(void **state)
{
    refusal_shape(*state);
}

/* One agent: three refused senders of rank 0, one after the other, then a
 * correct one of the same rank refits twice. */
static void test_refusal_then_refit(void **state)
{
    struct it_agent *a = *state;

    refusal_coverage_gap(a);
    refusal_dtype(a);
    refusal_shape(a);
    correct_refits(a);
}

/* The first matrix of the layout, wanted whole, declared a grouped expert
 * tensor of ep rank 1 of 2: linear placement gives rank 1 the second half
 * of dim 0, so the whole box is a placement this receiver cannot map. */
static void grouped_whole(struct wst_layout *l)
{
    for (size_t i = 0; i < l->n_wants; i++) {
        if (l->wants[i].tensor.ndim != 2)
            continue;
        l->wants[i].expert.grouped = 1;
        l->wants[i].expert.ep_rank = 1;
        l->wants[i].expert.ep_size = 2;
        return;
    }
}

/* End to end through the layout file, the agent's planner, its ERROR and
 * the sender's status: a non-linear expert placement is refused before any
 * byte moves, naming the tensor, and the agent stays as it was. */
static void test_refusal_non_linear_experts(void **state)
{
    struct it_agent a;
    struct it_sender s;
    const char *name = NULL;
    wst_status_t st;

    (void)state;
    if (it_agent_start_edited(&a, agent_bin, grouped_whole) != 0)
        fail_msg("could not start wstream-agent '%s'", agent_bin);
    for (size_t i = 0; i < a.layout.n_wants && name == NULL; i++)
        if (a.layout.wants[i].expert.grouped)
            name = a.layout.wants[i].tensor.name;
    assert_non_null(name);
    assert_int_equal(it_sender_load(&s, &a), 0);
    assert_int_equal(it_sender_setup(&s, &a, SIZE_MAX, 1), WST_OK);
    st = wst_sender_push(s.sender, 1);
    if (st == WST_OK)
        st = wst_sender_wait(s.sender, 10.0);
    fprintf(stderr, "push: %s: %s\n", wst_status_string(st),
            wst_sender_last_error(s.sender));
    assert_int_equal(st, WST_ERR_NON_LINEAR_PLACEMENT);
    if (strstr(wst_sender_last_error(s.sender), name) == NULL)
        fail_msg("the error '%s' does not name tensor %s",
                 wst_sender_last_error(s.sender), name);
    it_sender_destroy(&s);
    assert_agent_untouched(&a);
    it_agent_stop(&a);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_refusal_coverage_gap, setup_agent,
                                        teardown_agent),
        cmocka_unit_test_setup_teardown(test_refusal_dtype_mismatch,
                                        setup_agent, teardown_agent),
        cmocka_unit_test_setup_teardown(test_refusal_shape_mismatch,
                                        setup_agent, teardown_agent),
        cmocka_unit_test_setup_teardown(test_refusal_then_refit, setup_agent,
                                        teardown_agent),
        cmocka_unit_test(test_refusal_non_linear_experts),
    };

    if (argc != 2) {
        fprintf(stderr, "usage: %s PATH_TO_WSTREAM_AGENT\n", argv[0]);
        return 2;
    }
    agent_bin = argv[1];
    return cmocka_run_group_tests(tests, NULL, NULL);
}
