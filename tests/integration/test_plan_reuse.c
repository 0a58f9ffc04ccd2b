/* test_plan_reuse.c - a restarted sender with the same manifest gets the
 * receiver's cached plan; a changed manifest gets a new one (issue 21
 * item 2: plans computed off the progress thread, and cached).
 *
 * Each refit here comes from a fresh sender process-side object (a new
 * connection, a new have manifest, as after a trainer restart). The agent
 * logs "plan ...: built in X ms" each time it builds a plan
 * (plan_cache.c), and nothing when the input key matches the plan it
 * holds. Three refits with the same manifest must build one plan; a
 * fourth whose manifest lists the same shards in reverse order (other have
 * indices: another plan) must build a second. Every refit is checked
 * bit-exact in live memory.
 *
 * usage: test_plan_reuse PATH_TO_WSTREAM_AGENT
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

#define BUILT "built in "

static const char *agent_bin;

static int setup_agent(void **state)
{
    return it_agent_setup(state, agent_bin);
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

/* Lines of the agent's log that say a plan was built. */
static int plans_built(const struct it_agent *a)
{
    char line[2048];
    int n = 0;
    FILE *f = fopen(a->log_path, "r");

    assert_non_null(f);
    while (fgets(line, sizeof(line), f) != NULL)
        n += strstr(line, BUILT) != NULL;
    fclose(f);
    return n;
}

/* One refit from a sender whose manifest lists the model's shards in
 * reverse order. */
static void refit_reversed(const struct it_agent *a, uint64_t version)
{
    struct it_sender s = {0};
    wst_status_t st;

    assert_int_equal(it_sender_load(&s, a), 0);
    for (size_t i = 0, j = s.n_haves - 1; i < j; i++, j--) {
        struct wst_have t = s.haves[i];

        s.haves[i] = s.haves[j];
        s.haves[j] = t;
    }
    st = it_sender_setup(&s, a, SIZE_MAX, version);
    if (st == WST_OK)
        st = wst_sender_push(s.sender, version);
    if (st == WST_OK)
        st = wst_sender_wait(s.sender, 30.0);
    if (st != WST_OK)
        fail_msg("version %llu: %s: %s", (unsigned long long)version,
                 wst_status_string(st), wst_sender_last_error(s.sender));
    it_sender_destroy(&s);
    assert_int_equal(it_agent_wait_status(a, version, 10.0), 0);
}

static void test_plan_reuse_restarted_sender(void **state)
{
    struct it_agent *a = *state;

    for (uint64_t v = 1; v <= 3; v++) {
        assert_int_equal(it_refit(a, v), 0);
        expect_live(a, v);
        /* the first refit's plan, and no other */
        assert_true(it_agent_wait_log_lines(a, BUILT, 1, 5.0));
        assert_int_equal(plans_built(a), 1);
    }
    refit_reversed(a, 4);
    expect_live(a, 4);
    assert_true(it_agent_wait_log_lines(a, BUILT, 2, 5.0));
    assert_int_equal(plans_built(a), 2);
    /* and back: the reversed plan is the one cached now */
    assert_int_equal(it_refit(a, 5), 0);
    expect_live(a, 5);
    assert_true(it_agent_wait_log_lines(a, BUILT, 3, 5.0));
    assert_int_equal(plans_built(a), 3);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_plan_reuse_restarted_sender,
                                        setup_agent, it_agent_teardown),
    };

    if (argc != 2) {
        fprintf(stderr, "usage: %s PATH_TO_WSTREAM_AGENT\n", argv[0]);
        return 2;
    }
    agent_bin = argv[1];
    return cmocka_run_group_tests(tests, NULL, NULL);
}
