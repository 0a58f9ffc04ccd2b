/* test_refusal.c - a real wstream-agent refuses senders whose shards do not
 * describe its model (coverage gap, dtype, shape) before it writes a byte,
 * stays usable, and then takes a correct refit from the same rank.
 *
 * The MoE cases give the agent a hand-made layout of one MoE layer (layer 0,
 * no dense wants: only the "experts" entry and its live w13 and w2) and push
 * the three grouped expert tensors from in-process senders. Every refusal
 * there -- of the engine's expert declaration (placement, sharding,
 * divisibility, loader shape) or of the senders' shards (dtype, coverage) --
 * must reach every sender with its status and a message naming
 * model.layers.0.mlp.experts.gate_proj.weight and the reason, reach the
 * agent's status file, and leave the live shm as it was: still poison on a
 * fresh agent, still the committed version on one that committed.
 *
 * usage: test_refusal PATH_TO_WSTREAM_AGENT
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "agent_fixture.h"

static const char *agent_bin;

static int setup_agent(void **state)
{
    return it_agent_setup(state, agent_bin);
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

/* The agent is rank 1 of a two-agent engine whose other agent this sender
 * does not reach. */
static void half_a_group(struct wst_layout *l)
{
    snprintf(l->group, sizeof(l->group), "engine-7");
    l->group_size = 2;
    l->group_member = 1;
}

/* A sender that reaches only part of an engine group could commit part of
 * it: push refuses before anything is begun, naming the group. */
static void test_refusal_part_of_a_group(void **state)
{
    struct it_agent a;
    struct it_sender s;
    wst_status_t st;

    (void)state;
    if (it_agent_start_edited(&a, agent_bin, half_a_group) != 0)
        fail_msg("could not start wstream-agent '%s'", agent_bin);
    assert_int_equal(it_sender_load(&s, &a), 0);
    assert_int_equal(it_sender_setup(&s, &a, SIZE_MAX, 1), WST_OK);
    st = wst_sender_push(s.sender, 1);
    fprintf(stderr, "push: %s: %s\n", wst_status_string(st),
            wst_sender_last_error(s.sender));
    assert_int_equal(st, WST_ERR_CONFIG);
    assert_string_equal(wst_sender_last_error(s.sender),
                        "engine group 'engine-7' has 2 members; this sender "
                        "reaches 1 of them");
    it_sender_destroy(&s);
    assert_agent_untouched(&a);
    it_agent_stop(&a);
}

/* A second process saying HELLO as a rank whose connection is alive is
 * refused, naming the holder; the holder keeps its rank and refits on
 * (issue 16: it used to drop the holder). */
static void test_refusal_rank_already_connected(void **state)
{
    struct it_agent a;
    struct it_sender holder, intruder;
    wst_status_t st;

    (void)state;
    if (it_agent_start(&a, agent_bin) != 0)
        fail_msg("could not start wstream-agent '%s'", agent_bin);
    assert_int_equal(it_sender_load(&holder, &a), 0);
    assert_int_equal(it_sender_setup(&holder, &a, SIZE_MAX, 1), WST_OK);
    assert_int_equal(wst_sender_push(holder.sender, 1), WST_OK);
    assert_int_equal(wst_sender_wait(holder.sender, 30.0), WST_OK);

    assert_int_equal(it_sender_load(&intruder, &a), 0);
    assert_int_equal(it_sender_setup(&intruder, &a, SIZE_MAX, 2), WST_OK);
    st = wst_sender_push(intruder.sender, 2);
    if (st == WST_OK)
        st = wst_sender_wait(intruder.sender, 10.0);
    fprintf(stderr, "intruder: %s: %s\n", wst_status_string(st),
            wst_sender_last_error(intruder.sender));
    assert_int_equal(st, WST_ERR_BUSY);
    assert_non_null(strstr(wst_sender_last_error(intruder.sender),
                           "sender rank 0 is already connected from"));
    assert_true(it_agent_log_has(&a, "refused sender"));
    it_sender_destroy(&intruder);

    it_sender_fill(&holder, 2);
    assert_int_equal(wst_sender_push(holder.sender, 2), WST_OK);
    assert_int_equal(wst_sender_wait(holder.sender, 30.0), WST_OK);
    assert_int_equal(it_agent_wait_status(&a, 2, 10.0), 0);
    it_sender_destroy(&holder);
    it_agent_stop(&a);
}

/* ---- MoE layers ---------------------------------------------------------- */

#define MOE_TENSOR "model.layers.0.mlp.experts.gate_proj.weight"
#define MOE_ALIGN 64u
#define MOE_MAX_SENDERS 2

/* MoE layer 0 as the engine declares it in the layout's "experts" array. */
struct moe_layer {
    const char *loader;
    uint32_t n_experts, ep_rank, ep_size, hidden, inter;
    int round_robin;        /* expert_ids ep_rank, ep_rank + ep_size, ... */
    uint32_t inter_tp_size; /* > 1: "inter_tp" {rank 0, size} */
};

/* One case: the agent's layer, the senders, and the refusal expected. */
struct moe_case {
    struct moe_layer layer;
    uint32_t world; /* sender ranks, 1..MOE_MAX_SENDERS */
    /* Edits rank 'rank''s haves (gate, up, down) before they are sized,
     * filled and registered; NULL: the model's own shards. */
    void (*edit)(struct wst_have *haves, size_t n, uint32_t rank);
    wst_status_t want;
    const char *keyword; /* in the senders' errors and the status reason */
};

/* A test's agent, started by setup_moe_agent for its case. */
struct moe_fixture {
    struct it_agent agent;
    const struct moe_case *c;
};

/* The layer moe_layout declares: it_agent_start_edited takes a bare
 * callback, so setup_moe_agent leaves it here just before the start. */
static struct moe_layer moe_next;

static uint64_t moe_align(uint64_t x)
{
    return (x + MOE_ALIGN - 1) / MOE_ALIGN * MOE_ALIGN;
}

/* Replaces the tiny model's layout by one holding only moe_next: regions
 * w13 (ceil(E/ep) * 2I' * H) and w2 (ceil(E/ep) * H * I'), I' = I/inter_tp,
 * bf16, and the experts entry pointing at them. Out of memory: an empty
 * layout, whose shm of 0 bytes makes the start fail. */
static void moe_layout(struct wst_layout *l)
{
    const struct moe_layer *c = &moe_next;
    uint32_t tp = c->inter_tp_size > 1 ? c->inter_tp_size : 1;
    uint64_t n_local = (c->n_experts + c->ep_size - 1) / c->ep_size;
    uint64_t proj = n_local * c->hidden * (c->inter / tp) * 2; /* bf16 */
    struct wst_layout_region *regions = calloc(2, sizeof(*regions));
    struct wst_layout_experts *x = calloc(1, sizeof(*x));
    uint32_t *ids = c->round_robin ? calloc(n_local, sizeof(*ids)) : NULL;

    wst_layout_release(l);
    if (regions == NULL || x == NULL || (c->round_robin && ids == NULL)) {
        free(regions);
        free(x);
        free(ids);
        return;
    }
    snprintf(regions[0].name, sizeof(regions[0].name),
             "model.layers.0.mlp.experts.w13_weight");
    regions[0].bytes = 2 * proj;
    snprintf(regions[1].name, sizeof(regions[1].name),
             "model.layers.0.mlp.experts.w2_weight");
    regions[1].offset = moe_align(regions[0].bytes);
    regions[1].bytes = proj;
    snprintf(x->loader, sizeof(x->loader), "%s", c->loader);
    x->dtype = WST_DTYPE_BF16;
    x->n_experts = c->n_experts;
    x->ep_rank = c->ep_rank;
    x->ep_size = c->ep_size;
    x->hidden = c->hidden;
    x->inter = c->inter;
    for (uint64_t k = 0; ids != NULL && k < n_local; k++)
        ids[k] = c->ep_rank + (uint32_t)k * c->ep_size;
    x->expert_ids = ids;
    x->n_expert_ids = ids != NULL ? (uint32_t)n_local : 0;
    x->inter_tp_size = c->inter_tp_size;
    x->w13_region = 0;
    x->w2_region = 1;
    l->regions = regions;
    l->n_regions = 2;
    l->experts = x;
    l->n_experts = 1;
    l->shm_bytes = moe_align(regions[1].offset + regions[1].bytes);
}

static int setup_moe_agent(void **state)
{
    struct moe_fixture *f = calloc(1, sizeof(*f));

    if (f == NULL)
        return -1;
    f->c = *state;
    moe_next = f->c->layer;
    if (it_agent_start_edited(&f->agent, agent_bin, moe_layout) != 0) {
        fprintf(stderr, "setup: could not start wstream-agent '%s'\n",
                agent_bin);
        free(f);
        return -1;
    }
    *state = f;
    return 0;
}

static int teardown_moe_agent(void **state)
{
    struct moe_fixture *f = *state;

    it_agent_stop(&f->agent);
    free(f);
    return 0;
}

/* Rank 'rank' of 'world''s FSDP shards of layer 0's grouped expert tensors
 * gate_proj, up_proj [E, I, H] and down_proj [E, H, I], bf16. */
static int moe_sender_load(struct it_sender *s, const struct moe_layer *c,
                           uint32_t rank, uint32_t world)
{
    static const char *const proj[3] = {"gate_proj", "up_proj", "down_proj"};
    struct wst_model m;
    wst_status_t st;

    memset(s, 0, sizeof(*s));
    memset(&m, 0, sizeof(m));
    m.tensors = calloc(3, sizeof(*m.tensors));
    if (m.tensors == NULL)
        return -1;
    for (int p = 0; p < 3; p++) {
        struct wst_tensor_desc *t = &m.tensors[p];
        snprintf(t->name, sizeof(t->name),
                 "model.layers.0.mlp.experts.%s.weight", proj[p]);
        t->dtype = WST_DTYPE_BF16;
        t->ndim = 3;
        t->shape[0] = c->n_experts;
        t->shape[1] = p < 2 ? c->inter : c->hidden;
        t->shape[2] = p < 2 ? c->hidden : c->inter;
    }
    m.n_tensors = 3;
    st = wst_model_trainer_shards(&m, rank, world, &s->haves, &s->n_haves);
    wst_model_release(&m);
    return st == WST_OK ? 0 : -1;
}

struct moe_push {
    struct it_sender *s;
    uint64_t version;
    wst_status_t status;
};

static void *moe_push_thread(void *arg)
{
    struct moe_push *p = arg;

    p->status = wst_sender_push(p->s->sender, p->version);
    if (p->status == WST_OK)
        p->status = wst_sender_wait(p->s->sender, 10.0);
    return NULL;
}

/* Builds 'world' senders of 'layer''s expert tensors, each edited by
 * 'edit' (may be NULL), and pushes 'version' from all of them at once --
 * the receiver plans only once every rank sent its manifest, so one thread
 * each. Their statuses go to st[]; the senders stay alive for their
 * messages (the caller destroys them). */
static void moe_push_all(struct it_agent *a, const struct moe_layer *layer,
                         uint32_t world,
                         void (*edit)(struct wst_have *, size_t, uint32_t),
                         uint64_t version, struct it_sender *s,
                         wst_status_t *st)
{
    struct moe_push push[MOE_MAX_SENDERS];
    pthread_t th[MOE_MAX_SENDERS];

    assert_in_range(world, 1, MOE_MAX_SENDERS);
    for (uint32_t r = 0; r < world; r++) {
        assert_int_equal(moe_sender_load(&s[r], layer, r, world), 0);
        if (edit != NULL)
            edit(s[r].haves, s[r].n_haves, r);
        assert_int_equal(
            it_sender_setup_rank(&s[r], a, r, world, SIZE_MAX, version),
            WST_OK);
    }
    for (uint32_t r = 0; r < world; r++) {
        push[r] = (struct moe_push){.s = &s[r], .version = version};
        assert_int_equal(
            pthread_create(&th[r], NULL, moe_push_thread, &push[r]), 0);
    }
    for (uint32_t r = 0; r < world; r++) {
        pthread_join(th[r], NULL);
        st[r] = push[r].status;
    }
}

/* The "reason" string of the agent's status file, JSON escapes kept; 0 or
 * -1 when the file or the key is missing. */
static int status_reason(const struct it_agent *a, char *out, size_t len)
{
    static const char key[] = "\"reason\": \"";
    char text[16384];
    const char *p;
    size_t k = 0;

    if (it_agent_status_text(a, text, sizeof(text)) != 0)
        return -1;
    if ((p = strstr(text, key)) == NULL)
        return -1;
    for (p += sizeof(key) - 1; *p != '\0' && *p != '"' && k + 1 < len; p++) {
        if (*p == '\\' && p[1] != '\0')
            out[k++] = *p++;
        if (k + 1 < len)
            out[k++] = *p;
    }
    out[k] = '\0';
    return 0;
}

/* Polls the status file (up to 3 s) until its reason names MOE_TENSOR and
 * 'keyword'. */
static void expect_status_reason(const struct it_agent *a, const char *keyword)
{
    char reason[4096] = "";
    int found = 0;

    for (int i = 0; i < 300 && !found; i++) {
        if (status_reason(a, reason, sizeof(reason)) == 0)
            found = strstr(reason, MOE_TENSOR) != NULL &&
                    strstr(reason, keyword) != NULL;
        if (!found)
            usleep(10000);
    }
    if (!found)
        fail_msg("the agent's status file %s says reason \"%s\": it does not "
                 "name %s and \"%s\"",
                 a->status_path, reason, MOE_TENSOR, keyword);
}

/* Pushes 'version' as case 'c' describes and expects every sender to fail
 * with c->want and a message naming MOE_TENSOR and c->keyword, and the
 * status file to say the same. */
static void moe_expect_refused(struct it_agent *a, const struct moe_case *c,
                               uint64_t version)
{
    struct it_sender s[MOE_MAX_SENDERS];
    wst_status_t st[MOE_MAX_SENDERS];

    moe_push_all(a, &c->layer, c->world, c->edit, version, s, st);
    for (uint32_t r = 0; r < c->world; r++) {
        const char *msg = wst_sender_last_error(s[r].sender);
        fprintf(stderr, "push %llu, rank %u of %u: %s: %s\n",
                (unsigned long long)version, r, c->world,
                wst_status_string(st[r]), msg);
        if (st[r] != c->want)
            fail_msg("rank %u: %s (%d), want %s (%d): %s", r,
                     wst_status_string(st[r]), st[r],
                     wst_status_string(c->want), c->want, msg);
        if (strstr(msg, MOE_TENSOR) == NULL || strstr(msg, c->keyword) == NULL)
            fail_msg("rank %u: the error '%s' does not name %s and \"%s\"", r,
                     msg, MOE_TENSOR, c->keyword);
    }
    for (uint32_t r = 0; r < c->world; r++)
        it_sender_destroy(&s[r]);
    expect_status_reason(a, c->keyword);
}

/* Pushes a correct 'version' from 'world' senders and checks every live
 * byte (the loader's layout, through wst_model_verify) and the status
 * file. */
static void moe_push_good(struct it_agent *a, const struct moe_layer *layer,
                          uint32_t world, uint64_t version)
{
    struct it_sender s[MOE_MAX_SENDERS];
    wst_status_t st[MOE_MAX_SENDERS];
    uint64_t committed = 0, checked = 0;
    int usable = 0;
    char err[512];

    moe_push_all(a, layer, world, NULL, version, s, st);
    for (uint32_t r = 0; r < world; r++)
        if (st[r] != WST_OK)
            fail_msg("version %llu, rank %u: %s: %s",
                     (unsigned long long)version, r, wst_status_string(st[r]),
                     wst_sender_last_error(s[r].sender));
    for (uint32_t r = 0; r < world; r++)
        it_sender_destroy(&s[r]);
    if (wst_model_verify(&a->layout, a->shm, IT_SEED, version, &checked, err,
                         sizeof(err)) != WST_OK)
        fail_msg("version %llu: %s", (unsigned long long)version, err);
    assert_true(checked > 0);
    assert_int_equal(it_agent_wait_status(a, version, 5.0), 0);
    assert_int_equal(it_agent_status(a, &committed, &usable), 0);
    assert_int_equal(committed, version);
    assert_true(usable);
}

/* Rank 0 declares gate_proj f16 (same element size: the buffer is as
 * big); the engine holds bf16. */
static void moe_gate_f16(struct wst_have *haves, size_t n, uint32_t rank)
{
    if (rank == 0 && n > 0)
        haves[0].tensor.dtype = WST_DTYPE_F16;
}

/* Rank 1 of 2 holds experts [3, 4) of E=4 instead of [2, 4): no sender has
 * expert 2. */
static void moe_drop_expert2(struct wst_have *haves, size_t n, uint32_t rank)
{
    for (size_t i = 0; rank == 1 && i < n; i++)
        haves[i].box.start[0] = 3;
}

#define MOE_H 128
#define MOE_I 128

static struct moe_case moe_round_robin = {
    .layer = {.loader = "checkpoint",
              .n_experts = 4,
              .ep_rank = 1,
              .ep_size = 2,
              .hidden = MOE_H,
              .inter = MOE_I,
              .round_robin = 1},
    .world = 1,
    .want = WST_ERR_NON_LINEAR_PLACEMENT,
    .keyword = "round-robin",
};

static struct moe_case moe_shard_inter = {
    .layer = {.loader = "checkpoint",
              .n_experts = 4,
              .ep_rank = 0,
              .ep_size = 1,
              .hidden = MOE_H,
              .inter = MOE_I,
              .inter_tp_size = 2},
    .world = 1,
    .want = WST_ERR_EXPERT_SHARDING,
    .keyword = "dimension 1",
};

static struct moe_case moe_indivisible = {
    .layer = {.loader = "checkpoint",
              .n_experts = 6,
              .ep_rank = 0,
              .ep_size = 4,
              .hidden = MOE_H,
              .inter = MOE_I},
    .world = 1,
    .want = WST_ERR_EXPERT_DIVISIBILITY,
    .keyword = "do not split evenly over ep_size 4",
};

static struct moe_case moe_trtllm_i96 = {
    .layer = {.loader = "trtllm-bf16",
              .n_experts = 4,
              .ep_rank = 0,
              .ep_size = 1,
              .hidden = MOE_H,
              .inter = 96},
    .world = 1,
    .want = WST_ERR_REPACK_SHAPE,
    .keyword = "I % 64 != 0 (I=96)",
};

/* The valid layout of the last two: checkpoint loader, all 4 experts. */
#define MOE_VALID                                                              \
    {                                                                          \
        .loader = "checkpoint", .n_experts = 4, .ep_rank = 0, .ep_size = 1,    \
        .hidden = MOE_H, .inter = MOE_I                                        \
    }

static struct moe_case moe_dtype = {
    .layer = MOE_VALID,
    .world = 2,
    .edit = moe_gate_f16,
    .want = WST_ERR_DTYPE_MISMATCH,
    .keyword = "dtype f16",
};

static struct moe_case moe_coverage = {
    .layer = MOE_VALID,
    .world = 2,
    .edit = moe_drop_expert2,
    .want = WST_ERR_COVERAGE,
    .keyword = "no sender has element",
};

/* A fresh agent refuses its case's first refit and stays as it started. */
static void moe_refused_fresh(void **state)
{
    struct moe_fixture *f = *state;

    moe_expect_refused(&f->agent, f->c, 1);
    assert_agent_untouched(&f->agent);
}

static void test_refusal_moe_round_robin(void **state)
{
    moe_refused_fresh(state);
}

static void test_refusal_moe_sharded_inter(void **state)
{
    moe_refused_fresh(state);
}

static void test_refusal_moe_indivisible(void **state)
{
    moe_refused_fresh(state);
}

static void test_refusal_moe_repack_shape(void **state)
{
    moe_refused_fresh(state);
}

static void test_refusal_moe_dtype_mismatch(void **state)
{
    moe_refused_fresh(state);
}

static void test_refusal_moe_coverage_gap(void **state)
{
    moe_refused_fresh(state);
}

/* An agent serving version 1 refuses a version 2 of the wrong dtype and
 * then one with an expert missing, and keeps serving version 1 untouched,
 * byte for byte; a correct version 2 then commits. */
static void test_refusal_moe_keeps_committed(void **state)
{
    struct moe_fixture *f = *state;
    struct it_agent *a = &f->agent;
    uint64_t committed = 0;
    int usable = 0;
    unsigned char *v1;
    char err[512];

    moe_push_good(a, &f->c->layer, f->c->world, 1);
    v1 = malloc(a->layout.shm_bytes);
    assert_non_null(v1);
    memcpy(v1, a->shm, a->layout.shm_bytes);
    moe_expect_refused(a, &moe_dtype, 2);
    moe_expect_refused(a, &moe_coverage, 2);
    assert_true(it_agent_alive(a));
    assert_int_equal(it_agent_status(a, &committed, &usable), 0);
    assert_int_equal(committed, 1);
    assert_true(usable);
    for (uint64_t i = 0; i < a->layout.shm_bytes; i++)
        if (((const unsigned char *)a->shm)[i] != v1[i]) {
            free(v1);
            fail_msg("shm byte %llu changed after the refusals",
                     (unsigned long long)i);
        }
    free(v1);
    if (wst_model_verify(&a->layout, a->shm, IT_SEED, 1, NULL, err,
                         sizeof(err)) != WST_OK)
        fail_msg("version 1 after the refusals: %s", err);
    moe_push_good(a, &f->c->layer, f->c->world, 2);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_refusal_coverage_gap, setup_agent,
                                        it_agent_teardown),
        cmocka_unit_test_setup_teardown(test_refusal_dtype_mismatch,
                                        setup_agent, it_agent_teardown),
        cmocka_unit_test_setup_teardown(test_refusal_shape_mismatch,
                                        setup_agent, it_agent_teardown),
        cmocka_unit_test_setup_teardown(test_refusal_then_refit, setup_agent,
                                        it_agent_teardown),
        cmocka_unit_test(test_refusal_non_linear_experts),
        cmocka_unit_test(test_refusal_part_of_a_group),
        cmocka_unit_test(test_refusal_rank_already_connected),
        cmocka_unit_test_prestate_setup_teardown(
            test_refusal_moe_round_robin, setup_moe_agent, teardown_moe_agent,
            &moe_round_robin),
        cmocka_unit_test_prestate_setup_teardown(
            test_refusal_moe_sharded_inter, setup_moe_agent, teardown_moe_agent,
            &moe_shard_inter),
        cmocka_unit_test_prestate_setup_teardown(
            test_refusal_moe_indivisible, setup_moe_agent, teardown_moe_agent,
            &moe_indivisible),
        cmocka_unit_test_prestate_setup_teardown(
            test_refusal_moe_repack_shape, setup_moe_agent, teardown_moe_agent,
            &moe_trtllm_i96),
        cmocka_unit_test_prestate_setup_teardown(
            test_refusal_moe_dtype_mismatch, setup_moe_agent,
            teardown_moe_agent, &moe_dtype),
        cmocka_unit_test_prestate_setup_teardown(
            test_refusal_moe_coverage_gap, setup_moe_agent, teardown_moe_agent,
            &moe_coverage),
        cmocka_unit_test_prestate_setup_teardown(
            test_refusal_moe_keeps_committed, setup_moe_agent,
            teardown_moe_agent, &moe_dtype),
    };

    if (argc != 2) {
        fprintf(stderr, "usage: %s PATH_TO_WSTREAM_AGENT\n", argv[0]);
        return 2;
    }
    agent_bin = argv[1];
    return cmocka_run_group_tests(tests, NULL, NULL);
}
