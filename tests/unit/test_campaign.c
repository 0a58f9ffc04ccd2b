/* test_campaign.c - wstream-campaign's classification rule and trial
 * choices (tests/fault/campaign_classify.c, campaign_pick.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "campaign.h"

/* The case at hand: the trial, what it observed, and its classification
 * (g: the group's outcome alone). */
static struct campaign_trial t;
static struct campaign_obs o;
static enum campaign_outcome g;
static char why[512];

/* Two agents, two senders, version 'v' served and held everywhere; the
 * fault: SIGKILL of agent 0. */
static void group_at(uint64_t v)
{
    memset(&t, 0, sizeof(t));
    t.agents = t.senders = 2;
    t.target = TARGET_AGENT;
    t.index = 0;
    t.kind = KIND_KILL;
    memset(&o, 0, sizeof(o));
    o.agents = o.senders = 2;
    for (uint32_t k = 0; k < 2; k++) {
        o.agent[k].alive = o.engine[k].alive = o.sender[k].alive = 1;
        o.agent_usable[k] = 1;
        o.agent_version[k] = o.engine_version[k] = v;
        snprintf(o.engine_state[k], sizeof(o.engine_state[k]), "serving");
        o.bytes[k] = (int)v;
        o.answered[k] = 1;
        o.status[k] = v == 2 ? 0 : -17;
    }
}

static enum campaign_outcome classify(void)
{
    return campaign_classify(&t, &o, &g, why, sizeof(why));
}

static void test_everywhere(void **state)
{
    (void)state;
    group_at(2);
    assert_int_equal(classify(), OUTCOME_COMMITTED);
    assert_int_equal(g, OUTCOME_COMMITTED);
    group_at(1);
    assert_int_equal(classify(), OUTCOME_REFUSED);
}

/* The killed agent's engine exited 0 (its agent hung up); the other
 * member resumed on version 1: the group does not serve. */
static void test_lost_agent_is_unusable(void **state)
{
    (void)state;
    group_at(1);
    o.agent[0].alive = o.engine[0].alive = 0;
    o.agent[0].exit_code = -1;
    assert_int_equal(classify(), OUTCOME_UNUSABLE);
    assert_non_null(strstr(why, "0 lost-agent"));
    assert_non_null(strstr(why, "1 serving@1"));
}

static void test_mixed_versions_fail(void **state)
{
    (void)state;
    group_at(2);
    o.agent_version[1] = o.engine_version[1] = 1;
    o.bytes[1] = 1;
    o.status[0] = o.status[1] = -17;
    assert_int_equal(classify(), OUTCOME_FAILURE);
    assert_non_null(strstr(why, "different versions"));
}

static void test_lies_fail(void **state)
{
    (void)state;
    /* an engine serving bytes it does not hold, even with a dead peer */
    group_at(2);
    o.agent[0].alive = o.engine[0].alive = 0;
    o.bytes[1] = 0;
    assert_int_equal(classify(), OUTCOME_FAILURE);
    assert_non_null(strstr(why, "engine 1 says serving version 2"));
    /* a usable agent with half-written bytes, its engine unusable */
    group_at(2);
    snprintf(o.engine_state[0], sizeof(o.engine_state[0]), "unusable");
    o.bytes[0] = 0;
    assert_int_equal(classify(), OUTCOME_FAILURE);
    assert_non_null(strstr(why, "agent 0 is usable at version 2"));
    /* an engine serving while its agent is unusable */
    group_at(1);
    o.agent_usable[1] = 0;
    assert_int_equal(classify(), OUTCOME_FAILURE);
    assert_non_null(strstr(why, "its agent is unusable"));
    /* a sender claiming a commit that did not happen */
    group_at(1);
    o.status[1] = 0;
    assert_int_equal(classify(), OUTCOME_FAILURE);
    assert_non_null(strstr(why, "sender 1 reported version 2 committed"));
}

static void test_dead_survivors_fail(void **state)
{
    (void)state;
    group_at(1);
    o.agent[0].alive = o.engine[0].alive = 0;
    o.sender[1].alive = 0;
    o.sender[1].exit_code = -1;
    snprintf(o.sender[1].how, sizeof(o.sender[1].how), "died of signal 6");
    assert_int_equal(classify(), OUTCOME_FAILURE);
    assert_int_equal(g, OUTCOME_UNUSABLE); /* the group itself held */
    assert_non_null(strstr(why, "sender 1 died of signal 6"));
    /* an engine exiting 2 (a protocol error) is a crash, even the one
     * stopped; exiting 0 (its agent hung up) is not */
    group_at(1);
    o.engine[1].alive = 0;
    o.engine[1].exit_code = 2;
    assert_int_equal(classify(), OUTCOME_FAILURE);
    t.target = TARGET_ENGINE;
    t.index = 1;
    t.kind = KIND_STOP;
    assert_int_equal(classify(), OUTCOME_FAILURE);
    o.engine[1].exit_code = 0;
    assert_int_equal(classify(), OUTCOME_UNUSABLE);
    /* a stopped agent must live on */
    group_at(1);
    t.kind = KIND_STOP;
    o.agent[0].alive = 0;
    assert_int_equal(classify(), OUTCOME_FAILURE);
}

static void test_hang_fails(void **state)
{
    (void)state;
    group_at(2);
    o.hang = 1;
    snprintf(o.hang_what, sizeof(o.hang_what), "sender 1 has not answered");
    assert_int_equal(classify(), OUTCOME_FAILURE);
    assert_non_null(strstr(why, "hang: sender 1 has not answered"));
}

static void test_pick(void **state)
{
    struct campaign_trial a, b;

    (void)state;
    for (uint32_t i = 0; i < 2000; i++) {
        uint64_t seed = campaign_trial_seed(7, i);
        campaign_pick(seed, 2, &a);
        campaign_pick(seed, 2, &b);
        assert_memory_equal(&a, &b, sizeof(a));
        assert_true(a.agents >= 1 && a.agents <= CAMPAIGN_MAX);
        assert_true(a.senders >= 1 && a.senders <= CAMPAIGN_MAX);
        assert_true(a.layers >= 2 && a.layers <= 4);
        assert_true(a.index <
                    (a.target == TARGET_SENDER ? a.senders : a.agents));
        assert_true(a.trigger_sender < a.senders && a.layer < a.layers);
        if (a.agents == 3)
            assert_string_equal(a.preset, "dense:24");
        if (a.kind == KIND_STOP)
            assert_true(a.stop_s >= 0.1 && a.stop_s <= 6.0);
        campaign_pick(seed, 0, &b);
        assert_int_equal(b.shm, 0);
        campaign_pick(seed, 1, &b);
        assert_int_equal(b.shm, 1);
    }
    assert_true(campaign_trial_seed(7, 0) != campaign_trial_seed(7, 1));
    assert_true(campaign_trial_seed(7, 0) != campaign_trial_seed(8, 0));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_everywhere),
        cmocka_unit_test(test_lost_agent_is_unusable),
        cmocka_unit_test(test_mixed_versions_fail),
        cmocka_unit_test(test_lies_fail),
        cmocka_unit_test(test_dead_survivors_fail),
        cmocka_unit_test(test_hang_fails),
        cmocka_unit_test(test_pick),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
