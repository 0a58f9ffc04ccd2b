/* test_refit_machine.c - the receiver's refit state machine
 * (receiver/refit_machine.h) without UCX: events in, and the exact
 * sequence of actions out, written as the one-line descriptions
 * wst_rm_action_describe gives them.
 *
 * Generations: each refit's start and end bump the machine's generation,
 * so the first refit's jobs carry g1, the second's g3, and so on. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "refit_machine.h"

#define MOVER_PUT 1 /* enum wst_mover_kind */
#define MOVER_AM 2
#define SEC 1000000000ull

struct rig {
    struct wst_refit_machine m;
    struct wst_rm_actions out;
    uint64_t now_ns;
};

/* Feeds 'ev' at the rig's clock and checks its actions are 'want'
 * (NULL-terminated), in order. */
static void step_at(struct rig *g, struct wst_rm_event ev,
                    const char *const *want, const char *file, int line)
{
    char got[64][640];
    size_t n_want = 0;

    while (want[n_want] != NULL)
        n_want++;
    ev.now_ns = g->now_ns;
    wst_rm_actions_clear(&g->out);
    wst_rm_step(&g->m, &ev, &g->out);
    assert_int_equal(g->out.lost, 0);
    assert_true(g->out.n <= 64);
    int same = g->out.n == n_want;
    for (size_t i = 0; i < g->out.n; i++) {
        wst_rm_action_describe(&g->out.v[i], got[i], sizeof(got[i]));
        if (i < n_want && strcmp(got[i], want[i]) != 0)
            same = 0;
    }
    if (same)
        return;
    print_error("event %d: actions differ\n", (int)ev.kind);
    for (size_t i = 0; i < n_want || i < g->out.n; i++)
        print_error("  want %-60s got %s\n", i < n_want ? want[i] : "-",
                    i < g->out.n ? got[i] : "-");
    _fail(file, line);
}

#define STEP(g, ev, ...)                                                       \
    step_at(g, ev, (const char *const[]){__VA_ARGS__, NULL}, __FILE__, __LINE__)
#define QUIET(g, ev)                                                           \
    step_at(g, ev, (const char *const[]){NULL}, __FILE__, __LINE__)

/* Feeds 'ev' at the rig's clock; its actions are left in g->out. */
static void feed(struct rig *g, struct wst_rm_event ev)
{
    ev.now_ns = g->now_ns;
    wst_rm_actions_clear(&g->out);
    wst_rm_step(&g->m, &ev, &g->out);
    assert_int_equal(g->out.lost, 0);
}

/* ---- events ---- */

static struct wst_rm_event peer_ev(enum wst_rm_event_kind kind, uint32_t rank)
{
    return (struct wst_rm_event){.kind = kind, .rank = rank};
}

static struct wst_rm_event begin(uint32_t rank, uint64_t version,
                                 uint32_t mover)
{
    return (struct wst_rm_event){.kind = WST_RM_EV_BEGIN,
                                 .rank = rank,
                                 .version = version,
                                 .mover = mover};
}

static struct wst_rm_event rx_opened(uint32_t rank, int counts_bytes)
{
    return (struct wst_rm_event){.kind = WST_RM_EV_RX_OPENED,
                                 .rank = rank,
                                 .counts_bytes = counts_bytes};
}

static struct wst_rm_event begin_result(uint64_t gen, wst_status_t st,
                                        const char *reason)
{
    return (struct wst_rm_event){.kind = WST_RM_EV_BEGIN_RESULT,
                                 .generation = gen,
                                 .status = st,
                                 .reason = reason};
}

static struct wst_rm_event go(uint32_t rank, uint64_t version)
{
    return (struct wst_rm_event){
        .kind = WST_RM_EV_GO, .rank = rank, .version = version};
}

static struct wst_rm_event commit_ev(uint32_t rank, uint64_t version)
{
    return (struct wst_rm_event){
        .kind = WST_RM_EV_COMMIT, .rank = rank, .version = version};
}

static struct wst_rm_event layer_done(uint32_t rank, uint64_t version,
                                      uint32_t layer, uint64_t bytes,
                                      uint64_t digest)
{
    return (struct wst_rm_event){.kind = WST_RM_EV_LAYER_DONE,
                                 .rank = rank,
                                 .peer =
                                     rank == 0 ? "a (rank 0)" : "b (rank 1)",
                                 .version = version,
                                 .layer = layer,
                                 .bytes = bytes,
                                 .digest = digest};
}

static struct wst_rm_event landed(uint32_t rank, uint32_t layer, uint64_t bytes)
{
    return (struct wst_rm_event){
        .kind = WST_RM_EV_LANDED, .rank = rank, .layer = layer, .bytes = bytes};
}

static struct wst_rm_event result(enum wst_rm_event_kind kind, uint64_t gen,
                                  uint32_t rank, uint32_t layer,
                                  wst_status_t st, const char *reason)
{
    return (struct wst_rm_event){.kind = kind,
                                 .generation = gen,
                                 .rank = rank,
                                 .layer = layer,
                                 .status = st,
                                 .reason = reason};
}

static struct wst_rm_event verified(uint64_t gen, uint32_t rank, uint32_t layer)
{
    return result(WST_RM_EV_VERIFY_RESULT, gen, rank, layer, WST_OK, NULL);
}

static struct wst_rm_event repacked(uint64_t gen, uint32_t layer,
                                    double seconds)
{
    struct wst_rm_event ev =
        result(WST_RM_EV_REPACK_RESULT, gen, 0, layer, WST_OK, NULL);
    ev.seconds = seconds;
    return ev;
}

static struct wst_rm_event finalized(uint64_t gen, uint32_t layer,
                                     double seconds)
{
    struct wst_rm_event ev =
        result(WST_RM_EV_FINALIZE_RESULT, gen, 0, layer, WST_OK, NULL);
    ev.seconds = seconds;
    return ev;
}

static struct wst_rm_event commit_done(uint64_t gen)
{
    return result(WST_RM_EV_COMMIT_DONE, gen, 0, 0, WST_OK, NULL);
}

static struct wst_rm_event lost(uint32_t rank, const char *reason)
{
    return (struct wst_rm_event){.kind = WST_RM_EV_PEER_LOST,
                                 .rank = rank,
                                 .status = WST_ERR_PEER_FAILED,
                                 .reason = reason};
}

static struct wst_rm_event failure(wst_status_t st, const char *reason)
{
    return (struct wst_rm_event){
        .kind = WST_RM_EV_FAIL, .status = st, .reason = reason};
}

/* ---- rigs ---- */

static void rig_plan(struct rig *g, uint32_t world, uint32_t n_layers,
                     const uint64_t *bytes, const uint8_t *staged,
                     const uint32_t *moe, uint32_t n_moe, uint32_t slots)
{
    uint64_t total = 0;

    for (size_t i = 0; i < (size_t)world * n_layers; i++)
        total += bytes[i];
    struct wst_rm_plan plan = {.n_senders = world,
                               .n_layers = n_layers,
                               .total_bytes = total,
                               .layer_bytes = bytes,
                               .staged = staged,
                               .moe_layers = moe,
                               .n_moe = n_moe,
                               .slots = slots};
    memset(g, 0, sizeof(*g));
    assert_int_equal(wst_rm_set_world(&g->m, world), WST_OK);
    assert_int_equal(wst_rm_set_plan(&g->m, &plan), WST_OK);
    for (uint32_t r = 0; r < world; r++) {
        QUIET(g, peer_ev(WST_RM_EV_PEER_JOINED, r));
        QUIET(g, peer_ev(WST_RM_EV_PEER_PLANNED, r));
    }
}

static void rig_free(struct rig *g)
{
    wst_rm_actions_free(&g->out);
    wst_rm_release(&g->m);
}

/* Two senders, two dense layers: rank 0 by am (counts its bytes), rank 1
 * by put (does not). */
static const uint64_t dense_bytes[4] = {100, 50, 200, 0};
static const uint8_t dense_staged[4] = {0};

static void dense_rig(struct rig *g)
{
    rig_plan(g, 2, 2, dense_bytes, dense_staged, NULL, 0, 2);
}

/* Both ranks begin 'v' (generation 'gen'); the begin hook answers OK and
 * both say GO. */
static void dense_receiving(struct rig *g, uint64_t v, uint64_t gen)
{
    char start[32], hook[32], open0[48], open1[48], ready[32], ready0[32],
        ready1[32], recv[32], ack0[32], rx0[48], ack1[32], rx1[48];

    snprintf(start, sizeof(start), "start v%llu", (unsigned long long)v);
    snprintf(hook, sizeof(hook), "begin hook v%llu g%llu",
             (unsigned long long)v, (unsigned long long)gen);
    snprintf(open0, sizeof(open0), "open rx r0 v%llu mover 2",
             (unsigned long long)v);
    snprintf(open1, sizeof(open1), "open rx r1 v%llu mover 1",
             (unsigned long long)v);
    snprintf(ready, sizeof(ready), "ready v%llu", (unsigned long long)v);
    snprintf(ready0, sizeof(ready0), "send ready r0 v%llu",
             (unsigned long long)v);
    snprintf(ready1, sizeof(ready1), "send ready r1 v%llu",
             (unsigned long long)v);
    snprintf(recv, sizeof(recv), "receiving v%llu", (unsigned long long)v);
    snprintf(ack0, sizeof(ack0), "ack r0 v%llu", (unsigned long long)v);
    snprintf(ack1, sizeof(ack1), "ack r1 v%llu", (unsigned long long)v);
    snprintf(rx0, sizeof(rx0), "rx begin r0 v%llu below all",
             (unsigned long long)v);
    snprintf(rx1, sizeof(rx1), "rx begin r1 v%llu below all",
             (unsigned long long)v);
    STEP(g, begin(0, v, MOVER_AM), start, hook, open0);
    QUIET(g, rx_opened(0, 1));
    STEP(g, begin(1, v, MOVER_PUT), open1);
    QUIET(g, rx_opened(1, 0));
    STEP(g, begin_result(gen, WST_OK, NULL), ready, ready0, ready1);
    assert_int_equal(wst_rm_state(&g->m), WST_RM_READY);
    STEP(g, go(0, v), recv, ack0, rx0);
    STEP(g, go(1, v), ack1, rx1);
    assert_int_equal(wst_rm_state(&g->m), WST_RM_RECEIVING);
}

/* Every layer of 'v' in and verified: both finalize jobs queued. */
static void dense_all_in(struct rig *g, uint64_t v, uint64_t gen)
{
    for (uint32_t l = 0; l < 2; l++) {
        QUIET(g, landed(0, l, dense_bytes[l]));
        feed(g, layer_done(0, v, l, dense_bytes[l], l));
        assert_int_equal(g->out.n, 1);
        feed(g, layer_done(1, v, l, dense_bytes[2 + l], l));
        assert_int_equal(g->out.n, 1);
        assert_int_equal(g->out.v[0].kind, WST_RM_ACT_VERIFY);
        QUIET(g, verified(gen, 0, l));
        feed(g, verified(gen, 1, l));
        assert_int_equal(g->out.n, 2);
        assert_int_equal(g->out.v[1].kind, WST_RM_ACT_FINALIZE);
    }
}

/* A complete refit of 'v' from generation 'gen'. */
static void dense_commit(struct rig *g, uint64_t v, uint64_t gen)
{
    dense_receiving(g, v, gen);
    dense_all_in(g, v, gen);
    feed(g, finalized(gen, 0, 0));
    feed(g, finalized(gen, 1, 0));
    assert_int_equal(wst_rm_state(&g->m), WST_RM_PREPARED);
    feed(g, commit_ev(0, v));
    feed(g, commit_done(gen));
    assert_int_equal(wst_rm_state(&g->m), WST_RM_IDLE);
    assert_int_equal(wst_rm_committed(&g->m), v);
    assert_true(wst_rm_usable(&g->m));
}

/* ---- cases ---- */

static void test_refit_machine_dense_two_ranks(void **state)
{
    struct rig g;

    (void)state;
    dense_rig(&g);
    STEP(&g, begin(0, 7, MOVER_AM), "start v7", "begin hook v7 g1",
         "open rx r0 v7 mover 2");
    QUIET(&g, rx_opened(0, 1));
    assert_int_equal(wst_rm_state(&g.m), WST_RM_BEGINNING);
    assert_false(wst_rm_takes_data(&g.m, 0, 7));
    STEP(&g, begin(1, 7, MOVER_PUT), "open rx r1 v7 mover 1");
    QUIET(&g, rx_opened(1, 0));
    g.now_ns = 1 * SEC;
    STEP(&g, begin_result(1, WST_OK, NULL), "ready v7", "send ready r0 v7",
         "send ready r1 v7");
    /* Nothing is written before a sender says the whole group is ready. */
    assert_false(wst_rm_takes_data(&g.m, 0, 7));
    STEP(&g, go(0, 7), "receiving v7", "ack r0 v7", "rx begin r0 v7 below all");
    assert_true(wst_rm_takes_data(&g.m, 0, 7));
    assert_false(wst_rm_takes_data(&g.m, 1, 7));
    STEP(&g, go(1, 7), "ack r1 v7", "rx begin r1 v7 below all");
    assert_true(wst_rm_takes_data(&g.m, 1, 7));
    assert_false(wst_rm_takes_data(&g.m, 0, 6));

    /* Rank 0 counts its bytes: layer 0's land before its LAYER_DONE,
     * layer 1's after it. */
    QUIET(&g, landed(0, 0, 100));
    STEP(&g, layer_done(0, 7, 0, 100, 0xa0),
         "verify r0 L0 00000000000000a0 g1");
    QUIET(&g, layer_done(0, 7, 1, 50, 0xa1));
    assert_int_equal(wst_rm_mark(&g.m, 0, 1), WST_RM_MARK_WAITING);
    QUIET(&g, landed(0, 1, 20));
    STEP(&g, landed(0, 1, 30), "verify r0 L1 00000000000000a1 g1");
    assert_int_equal(wst_rm_mark(&g.m, 0, 1), WST_RM_MARK_CHECKING);
    /* Rank 1's puts are visible at its LAYER_DONE. */
    STEP(&g, layer_done(1, 7, 0, 200, 0xb0),
         "verify r1 L0 00000000000000b0 g1");
    STEP(&g, layer_done(1, 7, 1, 0, 0xb1), "verify r1 L1 00000000000000b1 g1");

    g.now_ns = 2 * SEC;
    QUIET(&g, verified(1, 0, 0));
    assert_int_equal(wst_rm_mark(&g.m, 0, 0), WST_RM_MARK_VERIFIED);
    STEP(&g, verified(1, 1, 0), "received L0 at 1.000", "finalize L0 g1");
    g.now_ns = 2 * SEC + SEC / 2;
    QUIET(&g, verified(1, 1, 1));
    STEP(&g, verified(1, 0, 1), "received L1 at 1.500", "finalize L1 g1");
    g.now_ns = 3 * SEC;
    STEP(&g, finalized(1, 1, 0.25), "final L1 at 2.000 in 0.250");
    g.now_ns = 4 * SEC;
    STEP(&g, finalized(1, 0, 0.5), "final L0 at 3.000 in 0.500", "prepared v7",
         "send prepared r0 v7", "send prepared r1 v7");
    /* Prepared is not committed: the group may not be. */
    assert_int_equal(wst_rm_state(&g.m), WST_RM_PREPARED);
    assert_int_equal(wst_rm_committed(&g.m), 0);
    g.now_ns = 5 * SEC;
    /* Timed from the begin's acknowledgement (1 s), as the state's
     * last_refit_seconds says, like the layers' times. */
    STEP(&g, commit_ev(1, 7),
         "committed v7: 350 bytes (put 200, am 150, nccl 0) in 4.000",
         "commit hook v7 g1");
    assert_int_equal(wst_rm_state(&g.m), WST_RM_COMMITTING);
    assert_int_equal(wst_rm_committed(&g.m), 7);
    /* The other sender says it too. */
    QUIET(&g, commit_ev(0, 7));
    STEP(&g, commit_done(1), "commit r0 v7", "commit r1 v7", "end v7");
    assert_int_equal(wst_rm_state(&g.m), WST_RM_IDLE);
    assert_true(wst_rm_usable(&g.m));
    rig_free(&g);
}

/* One sender; layer 0 dense, layers 1-3 MoE (ordinals 0-2), one slot:
 * each credit waits for the previous MoE layer's repack and check, which
 * run side by side once its bytes are in, and finish in either order. */
static void test_refit_machine_moe_one_slot(void **state)
{
    static const uint64_t bytes[4] = {10, 20, 20, 20};
    static const uint8_t stg[4] = {0, 1, 1, 1};
    static const uint32_t moe[3] = {1, 2, 3};
    struct rig g;

    (void)state;
    rig_plan(&g, 1, 4, bytes, stg, moe, 3, 1);
    STEP(&g, begin(0, 3, MOVER_AM), "start v3", "begin hook v3 g1",
         "open rx r0 v3 mover 2");
    QUIET(&g, rx_opened(0, 1));
    STEP(&g, begin_result(1, WST_OK, NULL), "ready v3", "send ready r0 v3");
    STEP(&g, go(0, 3), "receiving v3", "grant L1", "ack r0 v3", "credit r0 L1",
         "rx begin r0 v3 below L2");
    QUIET(&g, landed(0, 0, 10));
    STEP(&g, layer_done(0, 3, 0, 10, 0), "verify r0 L0 0000000000000000 g1");
    STEP(&g, verified(1, 0, 0), "received L0 at 0.000", "finalize L0 g1");
    QUIET(&g, landed(0, 1, 20));
    STEP(&g, layer_done(0, 3, 1, 20, 1), "verify r0 L1 0000000000000001 g1",
         "repack L1 g1");
    /* Checked first: the slot is still the repack's. */
    STEP(&g, verified(1, 0, 1), "received L1 at 0.000");
    STEP(&g, repacked(1, 1, 0.125), "repacked L1 at 0.000 in 0.125", "grant L2",
         "credit r0 L2", "rx allow r0 below L3", "finalize L1 g1");
    QUIET(&g, landed(0, 2, 20));
    STEP(&g, layer_done(0, 3, 2, 20, 2), "verify r0 L2 0000000000000002 g1",
         "repack L2 g1");
    /* Repacked first: the slot is still the check's. */
    STEP(&g, repacked(1, 2, 0), "repacked L2 at 0.000 in 0.000");
    STEP(&g, verified(1, 0, 2), "received L2 at 0.000", "grant L3",
         "credit r0 L3", "rx allow r0 below all", "finalize L2 g1");
    QUIET(&g, landed(0, 3, 20));
    STEP(&g, layer_done(0, 3, 3, 20, 3), "verify r0 L3 0000000000000003 g1",
         "repack L3 g1");
    STEP(&g, verified(1, 0, 3), "received L3 at 0.000");
    STEP(&g, repacked(1, 3, 0), "repacked L3 at 0.000 in 0.000",
         "finalize L3 g1");
    for (uint32_t l = 0; l < 3; l++)
        STEP(&g, finalized(1, l, 0),
             l == 0   ? "final L0 at 0.000 in 0.000"
             : l == 1 ? "final L1 at 0.000 in 0.000"
                      : "final L2 at 0.000 in 0.000");
    STEP(&g, finalized(1, 3, 0), "final L3 at 0.000 in 0.000", "prepared v3",
         "send prepared r0 v3");
    STEP(&g, commit_ev(0, 3),
         "committed v3: 70 bytes (put 0, am 70, nccl 0) in 0.000",
         "commit hook v3 g1");
    STEP(&g, commit_done(1), "commit r0 v3", "end v3");
    rig_free(&g);
}

/* Layer l of rank r in; its verify action is checked, and with 'last'
 * (every sender's bytes of it in) the repack that starts beside it. */
static void layer_in(struct rig *g, uint32_t rank, uint64_t v, uint32_t layer,
                     uint64_t bytes, int last)
{
    char want[64], repack[32];

    QUIET(g, landed(rank, layer, bytes));
    snprintf(want, sizeof(want), "verify r%u L%u %016llx g1", rank, layer,
             (unsigned long long)layer);
    snprintf(repack, sizeof(repack), "repack L%u g1", layer);
    if (last)
        STEP(g, layer_done(rank, v, layer, bytes, layer), want, repack);
    else
        STEP(g, layer_done(rank, v, layer, bytes, layer), want);
}

/* Two senders, four MoE layers, two slots; rank 1 stages nothing in
 * layer 3. Ordinal k needs ordinal k - 2 repacked and checked by every
 * sender, whatever order those finish in, and one result may free more
 * than one credit. */
static void test_refit_machine_moe_two_slots(void **state)
{
    static const uint64_t bytes[8] = {8, 8, 8, 8, 8, 8, 8, 0};
    static const uint8_t stg[8] = {1, 1, 1, 1, 1, 1, 1, 0};
    static const uint32_t moe[4] = {0, 1, 2, 3};
    struct rig g;

    (void)state;
    rig_plan(&g, 2, 4, bytes, stg, moe, 4, 2);
    STEP(&g, begin(0, 5, MOVER_AM), "start v5", "begin hook v5 g1",
         "open rx r0 v5 mover 2");
    QUIET(&g, rx_opened(0, 1));
    STEP(&g, begin(1, 5, MOVER_AM), "open rx r1 v5 mover 2");
    QUIET(&g, rx_opened(1, 1));
    STEP(&g, begin_result(1, WST_OK, NULL), "ready v5", "send ready r0 v5",
         "send ready r1 v5");
    STEP(&g, go(0, 5), "receiving v5", "grant L0", "grant L1", "ack r0 v5",
         "credit r0 L0", "credit r0 L1", "rx begin r0 v5 below L2");
    STEP(&g, go(1, 5), "ack r1 v5", "credit r1 L0", "credit r1 L1",
         "rx begin r1 v5 below L2");
    for (uint32_t l = 0; l < 2; l++) {
        layer_in(&g, 0, 5, l, 8, 0);
        layer_in(&g, 1, 5, l, 8, 1);
    }
    QUIET(&g, verified(1, 0, 1));
    STEP(&g, verified(1, 1, 1), "received L1 at 0.000");
    /* Ordinal 1 done first: ordinal 3 must still wait for 2. */
    STEP(&g, repacked(1, 1, 0), "repacked L1 at 0.000 in 0.000",
         "finalize L1 g1");
    /* Ordinal 0 repacked, but one sender's check still reads its slot. */
    STEP(&g, repacked(1, 0, 0), "repacked L0 at 0.000 in 0.000");
    QUIET(&g, verified(1, 1, 0));
    STEP(&g, verified(1, 0, 0), "received L0 at 0.000", "grant L2",
         "credit r0 L2", "rx allow r0 below L3", "credit r1 L2",
         "rx allow r1 below L3", "grant L3", "credit r0 L3",
         "rx allow r0 below all", "rx allow r1 below all", "finalize L0 g1");
    rig_free(&g);
}

static void test_refit_machine_digest_mismatch(void **state)
{
    const char *why = "digest mismatch in layer 0 from sender rank 0";
    struct rig g;

    (void)state;
    dense_rig(&g);
    dense_receiving(&g, 7, 1);
    QUIET(&g, landed(0, 0, 100));
    STEP(&g, layer_done(0, 7, 0, 100, 0xa0),
         "verify r0 L0 00000000000000a0 g1");
    STEP(&g, layer_done(1, 7, 0, 200, 0xb0),
         "verify r1 L0 00000000000000b0 g1");
    STEP(&g, result(WST_RM_EV_VERIFY_RESULT, 1, 0, 0, WST_ERR_INTEGRITY, why),
         "error r0 WST_ERR_INTEGRITY: digest mismatch in layer 0 from sender "
         "rank 0",
         "error r1 WST_ERR_INTEGRITY: digest mismatch in layer 0 from sender "
         "rank 0",
         "abort rx r0", "abort rx r1",
         "unusable v7: digest mismatch in layer 0 from sender rank 0", "end v7",
         "tell unusable WST_ERR_INTEGRITY: digest mismatch in layer 0 from "
         "sender rank 0");
    assert_int_equal(wst_rm_state(&g.m), WST_RM_IDLE);
    assert_false(wst_rm_usable(&g.m));
    assert_false(wst_rm_takes_data(&g.m, 0, 7));

    /* The failed refit's late results and messages change nothing. */
    QUIET(&g, verified(1, 1, 0));
    QUIET(&g, result(WST_RM_EV_VERIFY_RESULT, 1, 1, 1, WST_ERR_INTEGRITY, "x"));
    QUIET(&g, repacked(1, 0, 0));
    QUIET(&g, finalized(1, 0, 0));
    QUIET(&g, commit_done(1));
    QUIET(&g, begin_result(1, WST_ERR_INVALID, "late"));
    QUIET(&g, landed(0, 1, 50));
    QUIET(&g, layer_done(0, 7, 1, 50, 0xa1));
    QUIET(&g, failure(WST_ERR_PROTOCOL, "late mover failure"));
    assert_false(wst_rm_usable(&g.m));

    /* A later complete refit makes it usable again. */
    dense_commit(&g, 8, 3);
    rig_free(&g);
}

/* Refused while the begin hook has not answered: when it then says OK, the
 * engine resumes its committed version. */
static void test_refit_machine_refused_then_resume(void **state)
{
    struct rig g;

    (void)state;
    dense_rig(&g);
    dense_commit(&g, 7, 1);
    STEP(&g, begin(0, 8, MOVER_AM), "start v8", "begin hook v8 g3",
         "open rx r0 v8 mover 2");
    QUIET(&g, rx_opened(0, 1));
    STEP(&g, failure(WST_ERR_TRANSPORT, "sender a: no lane"),
         "error r0 WST_ERR_TRANSPORT: sender a: no lane",
         "error r1 WST_ERR_TRANSPORT: sender a: no lane", "abort rx r0",
         "abort rx r1",
         "refused v8: sender a: no lane (state: sender a: no "
         "lane)",
         "end v8");
    assert_true(wst_rm_usable(&g.m));
    assert_int_equal(wst_rm_committed(&g.m), 7);
    STEP(&g, begin_result(3, WST_OK, NULL), "resume v7");
    /* Rank 1 had not begun: its BEGIN, on the way, starts no new refit. */
    STEP(&g, begin(1, 8, MOVER_PUT),
         "error r1 WST_ERR_STATE: version 8 failed before this sender began "
         "it; retry on a new connection");
    /* On a new connection it may. */
    QUIET(&g, peer_ev(WST_RM_EV_PEER_LEFT, 1));
    QUIET(&g, peer_ev(WST_RM_EV_PEER_JOINED, 1));
    QUIET(&g, peer_ev(WST_RM_EV_PEER_PLANNED, 1));
    STEP(&g, begin(1, 8, MOVER_PUT), "start v8", "begin hook v8 g5",
         "open rx r1 v8 mover 1");
    /* A begin hook that refuses: refused with its reason, or its status. */
    STEP(&g, begin_result(5, WST_ERR_BUSY, ""),
         "error r0 WST_ERR_BUSY: engine refused to begin version 8: busy",
         "error r1 WST_ERR_BUSY: engine refused to begin version 8: busy",
         "abort rx r0", "abort rx r1",
         "refused v8: engine refused to begin version 8: busy (state: engine "
         "refused to begin version 8: busy)",
         "end v8");
    QUIET(&g, begin_result(5, WST_ERR_BUSY, ""));
    rig_free(&g);
}

/* The defect of commit ac7fea9: an unusable receiver whose next refit is
 * refused before the begin hook answers must not let the engine resume;
 * it tells it is unusable, with the standing reason, which the refusal
 * does not replace. */
static void test_refit_machine_refused_while_unusable(void **state)
{
    struct rig g;

    (void)state;
    dense_rig(&g);
    dense_commit(&g, 7, 1);
    dense_receiving(&g, 8, 3);
    STEP(&g,
         result(WST_RM_EV_FINALIZE_RESULT, 3, 0, 0, WST_ERR_INVALID,
                "engine failed to finalize layer 0: oops"),
         "error r0 WST_ERR_INVALID: engine failed to finalize layer 0: oops",
         "error r1 WST_ERR_INVALID: engine failed to finalize layer 0: oops",
         "abort rx r0", "abort rx r1",
         "unusable v8: engine failed to finalize layer 0: oops", "end v8",
         "tell unusable WST_ERR_INVALID: engine failed to finalize layer 0: "
         "oops");
    STEP(&g, begin(0, 9, MOVER_AM), "start v9", "begin hook v9 g5",
         "open rx r0 v9 mover 2");
    STEP(&g, lost(1, "sender b lost: closed"),
         "error r0 WST_ERR_PEER_FAILED: sender b lost: closed",
         "error r1 WST_ERR_PEER_FAILED: sender b lost: closed", "abort rx r0",
         "abort rx r1",
         "refused v9: sender b lost: closed (state: engine failed to finalize "
         "layer 0: oops)",
         "end v9");
    QUIET(&g, peer_ev(WST_RM_EV_PEER_LEFT, 1));
    STEP(&g, begin_result(5, WST_OK, NULL),
         "tell unusable WST_ERR_UNUSABLE: engine failed to finalize layer 0: "
         "oops");
    assert_false(wst_rm_usable(&g.m));
    assert_int_equal(wst_rm_committed(&g.m), 7);
    rig_free(&g);
}

/* Drives a dense rig into 'st' with version 7 (PREPARED: every layer
 * final; COMMITTING: committed, the committed hook still running). */
static void dense_into(struct rig *g, enum wst_rm_state st)
{
    dense_rig(g);
    if (st == WST_RM_IDLE)
        return;
    if (st == WST_RM_BEGINNING) {
        STEP(g, begin(0, 7, MOVER_AM), "start v7", "begin hook v7 g1",
             "open rx r0 v7 mover 2");
        QUIET(g, rx_opened(0, 1));
        return;
    }
    if (st == WST_RM_READY) {
        STEP(g, begin(0, 7, MOVER_AM), "start v7", "begin hook v7 g1",
             "open rx r0 v7 mover 2");
        QUIET(g, rx_opened(0, 1));
        STEP(g, begin(1, 7, MOVER_PUT), "open rx r1 v7 mover 1");
        QUIET(g, rx_opened(1, 0));
        STEP(g, begin_result(1, WST_OK, NULL), "ready v7", "send ready r0 v7",
             "send ready r1 v7");
        return;
    }
    dense_receiving(g, 7, 1);
    if (st == WST_RM_RECEIVING)
        return;
    dense_all_in(g, 7, 1);
    STEP(g, finalized(1, 1, 0), "final L1 at 0.000 in 0.000");
    feed(g, finalized(1, 0, 0));
    assert_int_equal(wst_rm_state(&g->m), WST_RM_PREPARED);
    if (st == WST_RM_PREPARED)
        return;
    feed(g, commit_ev(0, 7));
    assert_int_equal(wst_rm_state(&g->m), WST_RM_COMMITTING);
}

static void test_refit_machine_peer_lost_in_each_state(void **state)
{
    static const char *const want[6][8] = {
        [WST_RM_IDLE] = {NULL},
        [WST_RM_BEGINNING] =
            {"error r0 WST_ERR_PEER_FAILED: sender b lost",
             "error r1 WST_ERR_PEER_FAILED: sender b lost", "abort rx r0",
             "abort rx r1", "refused v7: sender b lost (state: sender b lost)",
             "end v7", NULL},
        [WST_RM_READY] = {"error r0 WST_ERR_PEER_FAILED: sender b lost",
                          "error r1 WST_ERR_PEER_FAILED: sender b lost",
                          "abort rx r0", "abort rx r1",
                          "refused v7: sender b lost (state: sender b lost)",
                          "end v7", "resume v0", NULL},
        [WST_RM_RECEIVING] =
            {"error r0 WST_ERR_PEER_FAILED: sender b lost",
             "error r1 WST_ERR_PEER_FAILED: sender b lost", "abort rx r0",
             "abort rx r1", "unusable v7: sender b lost", "end v7",
             "tell unusable WST_ERR_PEER_FAILED: sender b lost", NULL},
        /* Rank 0 may still say COMMIT. */
        [WST_RM_PREPARED] = {NULL},
        [WST_RM_COMMITTING] = {"late failure v7: sender b lost", NULL},
    };
    static const int usable_after[6] = {1, 1, 1, 0, 1, 1};

    (void)state;
    for (int st = WST_RM_IDLE; st <= WST_RM_COMMITTING; st++) {
        struct rig g;
        dense_into(&g, (enum wst_rm_state)st);
        step_at(&g, lost(1, "sender b lost"), want[st], __FILE__, __LINE__);
        QUIET(&g, peer_ev(WST_RM_EV_PEER_LEFT, 1));
        assert_int_equal(wst_rm_usable(&g.m), usable_after[st]);
        assert_false(wst_rm_in_refit(&g.m, 1));
        if (st == WST_RM_PREPARED)
            STEP(&g, commit_ev(0, 7),
                 "committed v7: 350 bytes (put 200, am 150, nccl 0) in 0.000",
                 "commit hook v7 g1");
        if (st >= WST_RM_PREPARED) {
            /* The version is complete: it is committed all the same,
             * and only the senders still there hear so. */
            STEP(&g, commit_done(1), "commit r0 v7", "end v7");
            assert_int_equal(wst_rm_committed(&g.m), 7);
        }
        rig_free(&g);
    }
}

/* Senders that are not part of the refit fail nothing: one that never
 * got the plan, one whose error concerns no refit of this version. */
static void test_refit_machine_bystanders(void **state)
{
    struct rig g;

    (void)state;
    dense_into(&g, WST_RM_BEGINNING);
    QUIET(&g, peer_ev(WST_RM_EV_PEER_LEFT, 1));
    QUIET(&g, peer_ev(WST_RM_EV_PEER_JOINED, 1));
    assert_false(wst_rm_in_refit(&g.m, 1));
    QUIET(&g, lost(1, "sender b lost"));
    QUIET(&g, peer_ev(WST_RM_EV_PEER_PLANNED, 1));
    assert_true(wst_rm_in_refit(&g.m, 1));
    struct wst_rm_event err = {.kind = WST_RM_EV_PEER_ERROR,
                               .rank = 1,
                               .status = WST_ERR_IO,
                               .reason = "sender b failed: disk"};
    QUIET(&g, err); /* it has not begun version 7 */
    QUIET(&g, lost(WST_RM_NO_RANK, "a stranger"));
    /* It joins the refit under way, and is acknowledged once it runs. */
    STEP(&g, begin(1, 7, MOVER_PUT), "open rx r1 v7 mover 1");
    QUIET(&g, rx_opened(1, 0));
    STEP(&g, begin_result(1, WST_OK, NULL), "ready v7", "send ready r0 v7",
         "send ready r1 v7");
    STEP(&g, go(0, 7), "receiving v7", "ack r0 v7", "rx begin r0 v7 below all");
    STEP(&g, go(1, 7), "ack r1 v7", "rx begin r1 v7 below all");
    err.rank = 0;
    err.reason = "sender a failed: disk";
    STEP(&g, err, "error r0 WST_ERR_IO: sender a failed: disk",
         "error r1 WST_ERR_IO: sender a failed: disk", "abort rx r0",
         "abort rx r1", "unusable v7: sender a failed: disk", "end v7",
         "tell unusable WST_ERR_IO: sender a failed: disk");
    rig_free(&g);
}

/* READY waits for every sender of the world to begin: one that joins late
 * is waited for, and a sender that begins alone (the others gave up on the
 * version) writes nothing: its refit is refused at the deadline. */
static void test_refit_machine_ready_waits_for_every_sender(void **state)
{
    struct wst_rm_event deadline = {.kind = WST_RM_EV_DEADLINE,
                                    .seconds = 30.0};
    struct rig g;

    (void)state;
    dense_rig(&g);
    QUIET(&g, peer_ev(WST_RM_EV_PEER_LEFT, 1));
    STEP(&g, begin(0, 7, MOVER_AM), "start v7", "begin hook v7 g1",
         "open rx r0 v7 mover 2");
    QUIET(&g, rx_opened(0, 1));
    STEP(&g, begin_result(1, WST_OK, NULL), "ready v7");
    QUIET(&g, peer_ev(WST_RM_EV_PEER_JOINED, 1));
    QUIET(&g, peer_ev(WST_RM_EV_PEER_PLANNED, 1));
    STEP(&g, begin(1, 7, MOVER_PUT), "open rx r1 v7 mover 1");
    STEP(&g, rx_opened(1, 0), "send ready r0 v7", "send ready r1 v7");
    STEP(&g, go(0, 7), "receiving v7", "ack r0 v7", "rx begin r0 v7 below all");
    STEP(&g, go(1, 7), "ack r1 v7", "rx begin r1 v7 below all");
    assert_true(wst_rm_takes_data(&g.m, 1, 7));
    rig_free(&g);

    dense_rig(&g);
    dense_commit(&g, 7, 1);
    STEP(&g, begin(0, 8, MOVER_AM), "start v8", "begin hook v8 g3",
         "open rx r0 v8 mover 2");
    QUIET(&g, rx_opened(0, 1));
    STEP(&g, begin_result(3, WST_OK, NULL), "ready v8");
    assert_false(wst_rm_takes_data(&g.m, 0, 8));
    STEP(&g, deadline,
         "error r0 WST_ERR_TIMED_OUT: version 8: no progress for 30.0 s",
         "error r1 WST_ERR_TIMED_OUT: version 8: no progress for 30.0 s",
         "abort rx r0", "abort rx r1",
         "refused v8: version 8: no progress for 30.0 s (state: version 8: "
         "no progress for 30.0 s)",
         "end v8", "resume v7");
    assert_true(wst_rm_usable(&g.m));
    rig_free(&g);
}

static void test_refit_machine_begin_checks(void **state)
{
    struct rig g;

    (void)state;
    dense_rig(&g);
    dense_commit(&g, 7, 1);
    STEP(&g, begin(0, 7, MOVER_AM),
         "error r0 WST_ERR_STALE_VERSION: version 7 is not above 7");
    STEP(&g, begin(0, 9, MOVER_AM), "start v9", "begin hook v9 g3",
         "open rx r0 v9 mover 2");
    STEP(&g, begin(1, 10, MOVER_AM),
         "error r1 WST_ERR_BUSY: busy with version 9");
    STEP(&g, begin(WST_RM_NO_RANK, 9, MOVER_AM),
         "error r4294967295 WST_ERR_BUSY: begin without the current plan");
    assert_int_equal(wst_rm_state(&g.m), WST_RM_BEGINNING);
    assert_int_equal(wst_rm_version(&g.m), 9);
    rig_free(&g);
}

static struct wst_rm_event labeled(struct wst_rm_event ev, const char *label)
{
    ev.label = label;
    return ev;
}

/* The first BEGIN's label is the refit's; the commit makes it the
 * committed one's; a refit without a label leaves none. */
static void test_refit_machine_label_committed(void **state)
{
    struct rig g;

    (void)state;
    dense_rig(&g);
    STEP(&g, labeled(begin(0, 7, MOVER_AM), "step-7"), "start v7 label step-7",
         "begin hook v7 g1", "open rx r0 v7 mover 2");
    assert_string_equal(g.m.label, "step-7");
    assert_string_equal(g.m.committed_label, "");
    QUIET(&g, rx_opened(0, 1));
    STEP(&g, labeled(begin(1, 7, MOVER_PUT), "step-7"),
         "open rx r1 v7 mover 1");
    QUIET(&g, rx_opened(1, 0));
    STEP(&g, begin_result(1, WST_OK, NULL), "ready v7", "send ready r0 v7",
         "send ready r1 v7");
    feed(&g, go(0, 7)); /* acks are not this test's */
    feed(&g, go(1, 7));
    dense_all_in(&g, 7, 1);
    feed(&g, finalized(1, 0, 0.0));
    feed(&g, finalized(1, 1, 0.0));
    feed(&g, commit_ev(0, 7));
    char line[256];
    wst_rm_action_describe(&g.out.v[0], line, sizeof(line));
    assert_string_equal(line, "committed v7 label step-7: 350 bytes (put "
                              "200, am 150, nccl 0) in 0.000");
    assert_string_equal(g.m.committed_label, "step-7");
    feed(&g, commit_done(1));

    /* The next refit, unlabeled: nothing of step-7 is left once it
     * commits. */
    dense_commit(&g, 8, 3);
    assert_string_equal(g.m.label, "");
    assert_string_equal(g.m.committed_label, "");
    rig_free(&g);

    /* A restarted receiver starts with its persisted label. */
    memset(&g, 0, sizeof(g));
    wst_rm_seed(&g.m, 5, "run-4/step-5", NULL);
    assert_int_equal(wst_rm_committed(&g.m), 5);
    assert_string_equal(g.m.committed_label, "run-4/step-5");
    rig_free(&g);
}

/* One version, one label: a sender that names another one than the
 * refit's fails the refit before anything is written, and every sender
 * hears why. */
static void test_refit_machine_label_mismatch_refused(void **state)
{
    struct rig g;
    const char *why = "version 7 is labeled \"step-7\" by another sender, "
                      "\"step-8\" by this one";
    char err0[256], err1[256], refused[600];

    (void)state;
    dense_rig(&g);
    STEP(&g, labeled(begin(0, 7, MOVER_AM), "step-7"), "start v7 label step-7",
         "begin hook v7 g1", "open rx r0 v7 mover 2");
    QUIET(&g, rx_opened(0, 1));
    snprintf(err0, sizeof(err0), "error r0 WST_ERR_INVALID: %s", why);
    snprintf(err1, sizeof(err1), "error r1 WST_ERR_INVALID: %s", why);
    snprintf(refused, sizeof(refused), "refused v7: %s (state: %s)", why, why);
    STEP(&g, labeled(begin(1, 7, MOVER_PUT), "step-8"), err0, err1,
         "abort rx r0", "abort rx r1", refused, "end v7");
    assert_int_equal(wst_rm_state(&g.m), WST_RM_IDLE);
    assert_int_equal(wst_rm_committed(&g.m), 0);
    assert_string_equal(g.m.committed_label, "");
    /* No label at all is a different one too. */
    rig_free(&g);
    dense_rig(&g);
    STEP(&g, begin(0, 7, MOVER_AM), "start v7", "begin hook v7 g1",
         "open rx r0 v7 mover 2");
    feed(&g, labeled(begin(1, 7, MOVER_PUT), "x"));
    assert_int_equal(g.out.v[0].status, WST_ERR_INVALID);
    assert_int_equal(wst_rm_state(&g.m), WST_RM_IDLE);
    rig_free(&g);
}

static void test_refit_machine_layer_done_checks(void **state)
{
    struct rig g;

    (void)state;
    dense_rig(&g);
    /* Before the begin hook answered: nothing may be reported yet. */
    STEP(&g, begin(0, 7, MOVER_AM), "start v7", "begin hook v7 g1",
         "open rx r0 v7 mover 2");
    STEP(&g, layer_done(0, 7, 0, 100, 1),
         "error r0 WST_ERR_PROTOCOL: sender a (rank 0): unexpected layer-done "
         "for layer 0 of version 7",
         "error r1 WST_ERR_PROTOCOL: sender a (rank 0): unexpected layer-done "
         "for layer 0 of version 7",
         "abort rx r0", "abort rx r1",
         "refused v7: sender a (rank 0): unexpected layer-done for layer 0 of "
         "version 7 (state: sender a (rank 0): unexpected layer-done for "
         "layer 0 of version 7)",
         "end v7");
    QUIET(&g, begin_result(1, WST_ERR_BUSY, NULL));
    /* A short layer. */
    QUIET(&g, peer_ev(WST_RM_EV_PEER_JOINED, 1));
    QUIET(&g, peer_ev(WST_RM_EV_PEER_PLANNED, 1));
    dense_receiving(&g, 8, 3);
    STEP(&g, layer_done(1, 8, 0, 199, 1),
         "error r0 WST_ERR_INTEGRITY: sender b (rank 1): layer 0 has 199 "
         "bytes, the plan 200",
         "error r1 WST_ERR_INTEGRITY: sender b (rank 1): layer 0 has 199 "
         "bytes, the plan 200",
         "abort rx r0", "abort rx r1",
         "unusable v8: sender b (rank 1): layer 0 has 199 bytes, the plan 200",
         "end v8",
         "tell unusable WST_ERR_INTEGRITY: sender b (rank 1): layer 0 has 199 "
         "bytes, the plan 200");
    /* The same layer twice. */
    dense_receiving(&g, 9, 5);
    STEP(&g, layer_done(1, 9, 1, 0, 1), "verify r1 L1 0000000000000001 g5");
    feed(&g, layer_done(1, 9, 1, 0, 1));
    assert_int_equal(g.out.v[0].kind, WST_RM_ACT_SEND_ERROR);
    assert_int_equal(g.out.v[0].status, WST_ERR_PROTOCOL);
    assert_false(wst_rm_usable(&g.m));
    rig_free(&g);
}

static struct wst_rm_event hashed(uint32_t layer, uint64_t bytes,
                                  uint64_t hashed_bytes, uint64_t sum)
{
    struct wst_rm_event ev = landed(0, layer, bytes);

    ev.hashed = hashed_bytes;
    ev.sum = sum;
    return ev;
}

/* The check of a layer gets what was hashed as it landed, added up (mod
 * 2^64), and a refit after a failed one starts from nothing. */
static void test_refit_machine_verify_gets_hashed_parts(void **state)
{
    struct rig g;

    (void)state;
    dense_rig(&g);
    dense_receiving(&g, 7, 1);
    QUIET(&g, hashed(0, 60, 60, 5));
    QUIET(&g, hashed(0, 40, 40, UINT64_MAX));
    feed(&g, layer_done(0, 7, 0, 100, 9));
    assert_int_equal(g.out.n, 1);
    assert_int_equal(g.out.v[0].kind, WST_RM_ACT_VERIFY);
    assert_int_equal(g.out.v[0].bytes, 100);
    assert_int_equal(g.out.v[0].hashed, 100);
    assert_int_equal(g.out.v[0].sum, 4);
    /* Part of a layer unhashed: the check reads it again. */
    QUIET(&g, hashed(1, 20, 20, 3));
    QUIET(&g, hashed(1, 30, 0, 0));
    feed(&g, layer_done(0, 7, 1, 50, 9));
    assert_int_equal(g.out.n, 1);
    assert_int_equal(g.out.v[0].bytes, 50);
    assert_int_equal(g.out.v[0].hashed, 20);
    assert_int_equal(g.out.v[0].sum, 3);
    feed(&g, (struct wst_rm_event){.kind = WST_RM_EV_FAIL,
                                   .status = WST_ERR_IO,
                                   .reason = "lost"});
    assert_false(wst_rm_usable(&g.m));
    dense_receiving(&g, 8, 3);
    QUIET(&g, hashed(0, 100, 100, 11));
    feed(&g, layer_done(0, 8, 0, 100, 9));
    assert_int_equal(g.out.n, 1);
    assert_int_equal(g.out.v[0].hashed, 100);
    assert_int_equal(g.out.v[0].sum, 11);
    rig_free(&g);
}

static void test_refit_machine_deadline(void **state)
{
    const uint64_t limit = 30 * SEC;
    struct wst_rm_event deadline = {.kind = WST_RM_EV_DEADLINE,
                                    .seconds = 30.0};
    struct rig g;

    (void)state;
    dense_rig(&g);
    assert_false(wst_rm_stalled(&g.m, 100 * SEC, limit));
    STEP(&g, begin(0, 7, MOVER_AM), "start v7", "begin hook v7 g1",
         "open rx r0 v7 mover 2");
    assert_false(wst_rm_stalled(&g.m, 30 * SEC, limit));
    assert_true(wst_rm_stalled(&g.m, 31 * SEC, limit));
    g.now_ns = 31 * SEC;
    STEP(&g, deadline,
         "error r0 WST_ERR_TIMED_OUT: version 7: no progress "
         "for 30.0 s",
         "error r1 WST_ERR_TIMED_OUT: version 7: no progress for 30.0 s",
         "abort rx r0", "abort rx r1",
         "refused v7: version 7: no progress for 30.0 s (state: version 7: "
         "no progress for 30.0 s)",
         "end v7");
    assert_false(wst_rm_stalled(&g.m, 100 * SEC, limit));
    QUIET(&g, peer_ev(WST_RM_EV_PEER_JOINED, 1));
    QUIET(&g, peer_ev(WST_RM_EV_PEER_PLANNED, 1));

    /* Receiving: bytes landing are progress. */
    g.now_ns = 40 * SEC;
    dense_receiving(&g, 8, 3);
    g.now_ns = 60 * SEC;
    QUIET(&g, landed(0, 0, 10));
    assert_false(wst_rm_stalled(&g.m, 89 * SEC, limit));
    assert_true(wst_rm_stalled(&g.m, 91 * SEC, limit));
    g.now_ns = 91 * SEC;
    STEP(&g, deadline,
         "error r0 WST_ERR_TIMED_OUT: version 8: no progress "
         "for 30.0 s",
         "error r1 WST_ERR_TIMED_OUT: version 8: no progress for 30.0 s",
         "abort rx r0", "abort rx r1",
         "unusable v8: version 8: no progress for 30.0 s", "end v8",
         "tell unusable WST_ERR_TIMED_OUT: version 8: no progress for 30.0 s");
    assert_false(wst_rm_usable(&g.m));
    rig_free(&g);
}

/* Once every layer is final the version is held: a late failure is only
 * logged, and the commit goes on. */
static void test_refit_machine_failure_when_committing(void **state)
{
    struct wst_rm_event deadline = {.kind = WST_RM_EV_DEADLINE, .seconds = 1};
    struct rig g;

    (void)state;
    dense_into(&g, WST_RM_COMMITTING);
    STEP(&g, failure(WST_ERR_TRANSPORT, "sender a: receiving data failed"),
         "late failure v7: sender a: receiving data failed");
    STEP(&g, deadline, "late failure v7: version 7: no progress for 1.0 s");
    STEP(&g, commit_done(1), "commit r0 v7", "commit r1 v7", "end v7");
    assert_true(wst_rm_usable(&g.m));
    assert_int_equal(wst_rm_committed(&g.m), 7);
    rig_free(&g);
}

/* The engine group's barriers: nothing is written before a GO, a failure
 * before it refuses (and the paused engine resumes), the version is
 * committed only on a COMMIT, and a sender that aborts for its group makes
 * a prepared receiver unusable. */
static void test_refit_machine_group_barriers(void **state)
{
    struct wst_rm_event abort = {.kind = WST_RM_EV_PEER_ERROR,
                                 .rank = 1,
                                 .status = WST_ERR_PEER_FAILED,
                                 .reason = "engine group 'e': receiver x "
                                           "failed"};
    struct rig g;

    (void)state;
    /* A failure while ready: refused, and the engine resumes v7. */
    dense_rig(&g);
    dense_commit(&g, 7, 1);
    STEP(&g, begin(0, 8, MOVER_AM), "start v8", "begin hook v8 g3",
         "open rx r0 v8 mover 2");
    /* GO before READY went out. */
    STEP(&g, go(0, 8),
         "error r0 WST_ERR_PROTOCOL: go for version 8, "
         "unexpected now",
         "error r1 WST_ERR_PROTOCOL: go for version 8, unexpected now",
         "abort rx r0", "abort rx r1",
         "refused v8: go for version 8, unexpected now (state: go for version "
         "8, unexpected now)",
         "end v8");
    QUIET(&g, begin_result(3, WST_ERR_BUSY, NULL));
    QUIET(&g, peer_ev(WST_RM_EV_PEER_LEFT, 0));
    QUIET(&g, peer_ev(WST_RM_EV_PEER_JOINED, 0));
    QUIET(&g, peer_ev(WST_RM_EV_PEER_PLANNED, 0));
    QUIET(&g, peer_ev(WST_RM_EV_PEER_LEFT, 1));
    QUIET(&g, peer_ev(WST_RM_EV_PEER_JOINED, 1));
    QUIET(&g, peer_ev(WST_RM_EV_PEER_PLANNED, 1));
    STEP(&g, begin(0, 9, MOVER_AM), "start v9", "begin hook v9 g5",
         "open rx r0 v9 mover 2");
    QUIET(&g, rx_opened(0, 1));
    STEP(&g, begin(1, 9, MOVER_AM), "open rx r1 v9 mover 2");
    QUIET(&g, rx_opened(1, 1));
    STEP(&g, begin_result(5, WST_OK, NULL), "ready v9", "send ready r0 v9",
         "send ready r1 v9");
    abort.reason = "engine group 'e': receiver x failed";
    STEP(&g, abort,
         "error r0 WST_ERR_PEER_FAILED: engine group 'e': "
         "receiver x failed",
         "error r1 WST_ERR_PEER_FAILED: engine group 'e': receiver x failed",
         "abort rx r0", "abort rx r1",
         "refused v9: engine group 'e': receiver x failed (state: engine "
         "group 'e': receiver x failed)",
         "end v9", "resume v7");
    assert_true(wst_rm_usable(&g.m));
    assert_int_equal(wst_rm_committed(&g.m), 7);
    /* A GO that comes after the refusal is answered, changes nothing. */
    STEP(&g, go(0, 9),
         "error r0 WST_ERR_STATE: go for version 9, "
         "unexpected now");
    assert_int_equal(wst_rm_state(&g.m), WST_RM_IDLE);
    rig_free(&g);

    /* COMMIT before this receiver prepared: the sender is wrong, and bytes
     * were written: unusable. */
    dense_into(&g, WST_RM_RECEIVING);
    feed(&g, commit_ev(0, 7));
    assert_int_equal(g.out.v[0].kind, WST_RM_ACT_SEND_ERROR);
    assert_string_equal(g.out.v[0].text, "commit of version 7, which this "
                                         "receiver has not prepared");
    assert_false(wst_rm_usable(&g.m));
    assert_int_equal(wst_rm_committed(&g.m), 0);
    rig_free(&g);

    /* Prepared, then a sender aborts for its group: unusable. */
    dense_into(&g, WST_RM_PREPARED);
    abort.rank = 0;
    feed(&g, abort);
    assert_false(wst_rm_usable(&g.m));
    assert_int_equal(wst_rm_committed(&g.m), 0);
    /* Too late: the refit is over. */
    STEP(&g, commit_ev(1, 7),
         "error r1 WST_ERR_STATE: commit of version 7, "
         "which this receiver has not prepared");
    assert_int_equal(wst_rm_committed(&g.m), 0);
    rig_free(&g);

    /* Prepared, and every sender is lost: nobody is left to say COMMIT. */
    dense_into(&g, WST_RM_PREPARED);
    QUIET(&g, lost(0, "sender a lost"));
    QUIET(&g, peer_ev(WST_RM_EV_PEER_LEFT, 0));
    assert_true(wst_rm_usable(&g.m));
    feed(&g, lost(1, "sender b lost"));
    assert_false(wst_rm_usable(&g.m));
    assert_int_equal(wst_rm_state(&g.m), WST_RM_IDLE);
    rig_free(&g);
}

static void test_refit_machine_plan_refused_reason(void **state)
{
    struct wst_rm_event refused = {.kind = WST_RM_EV_PLAN_REFUSED,
                                   .reason = "E % ep != 0"};
    struct wst_rm_event shutdown = {.kind = WST_RM_EV_SHUTDOWN};
    struct rig g;

    (void)state;
    dense_rig(&g);
    STEP(&g, refused, "reason: E % ep != 0");
    assert_true(wst_rm_usable(&g.m));
    QUIET(&g, shutdown);
    QUIET(&g, begin_result(0, WST_ERR_BUSY, NULL));
    rig_free(&g);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_refit_machine_dense_two_ranks),
        cmocka_unit_test(test_refit_machine_moe_one_slot),
        cmocka_unit_test(test_refit_machine_moe_two_slots),
        cmocka_unit_test(test_refit_machine_digest_mismatch),
        cmocka_unit_test(test_refit_machine_refused_then_resume),
        cmocka_unit_test(test_refit_machine_refused_while_unusable),
        cmocka_unit_test(test_refit_machine_peer_lost_in_each_state),
        cmocka_unit_test(test_refit_machine_bystanders),
        cmocka_unit_test(test_refit_machine_ready_waits_for_every_sender),
        cmocka_unit_test(test_refit_machine_begin_checks),
        cmocka_unit_test(test_refit_machine_label_committed),
        cmocka_unit_test(test_refit_machine_label_mismatch_refused),
        cmocka_unit_test(test_refit_machine_layer_done_checks),
        cmocka_unit_test(test_refit_machine_verify_gets_hashed_parts),
        cmocka_unit_test(test_refit_machine_deadline),
        cmocka_unit_test(test_refit_machine_failure_when_committing),
        cmocka_unit_test(test_refit_machine_group_barriers),
        cmocka_unit_test(test_refit_machine_plan_refused_reason),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
