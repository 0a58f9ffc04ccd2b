/* test_experts.c - the receiver's MoE table (receiver/experts.h): what is
 * refused and how, staging slots and sizes, the staged wants, and the
 * replay of staged experts under their global ids.
 *
 * The replay is checked with the checkpoint loader, whose layout is trivial
 * to state independently (w13[i] = [gate_g; up_g], w2[i] = down_g for
 * g = expert_start + i); the TRTLLM layout has its own tests (test_repack,
 * check_dump.py).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "experts.h"

#define H 128u
#define I 64u
#define E 8u

static struct wst_region_desc regions[2] = {
    {.name = "w13", .length = (uint64_t)E * 2 * I * H * 2, .mem = WST_MEM_HOST},
    {.name = "w2", .length = (uint64_t)E * H * I * 2, .mem = WST_MEM_HOST},
};

static struct wst_expert_layer layer_decl(uint32_t layer, uint32_t ep_rank,
                                          uint32_t ep_size)
{
    struct wst_expert_layer e = {
        .layer = layer,
        .loader = "checkpoint",
        .dtype = WST_DTYPE_BF16,
        .n_experts = E,
        .ep_rank = ep_rank,
        .ep_size = ep_size,
        .hidden = H,
        .inter = I,
        .w13_region = 0,
        .w2_region = 1,
    };
    return e;
}

static void test_experts_add_checks(void **state)
{
    struct wst_moe m;
    struct wst_expert_layer e = layer_decl(0, 0, 2);
    char err[256];

    (void)state;
    wst_moe_init(&m, 2);
    e.loader = "nope";
    assert_int_equal(wst_moe_add(&m, &e, regions, 2, err, sizeof(err)),
                     WST_ERR_INVALID);
    assert_non_null(strstr(err, "no repack loader named \"nope\""));
    e = layer_decl(0, 2, 2); /* ep_rank >= ep_size */
    assert_int_equal(wst_moe_add(&m, &e, regions, 2, err, sizeof(err)),
                     WST_ERR_INVALID);
    e = layer_decl(0, 0, 1); /* all 8 experts: twice the w13 region */
    assert_int_equal(wst_moe_add(&m, &e, regions, 1, err, sizeof(err)),
                     WST_ERR_INVALID);
    e = layer_decl(0, 0, 2);
    e.w13_offset = regions[0].length; /* past the region */
    assert_int_equal(wst_moe_add(&m, &e, regions, 2, err, sizeof(err)),
                     WST_ERR_INVALID);
    assert_non_null(strstr(err, "outside its region"));
    assert_int_equal(m.n_layers, 0);
    e = layer_decl(3, 0, 2);
    assert_int_equal(wst_moe_add(&m, &e, regions, 2, err, sizeof(err)), WST_OK);
    assert_int_equal(wst_moe_add(&m, &e, regions, 2, err, sizeof(err)),
                     WST_ERR_INVALID);
    assert_non_null(strstr(err, "declared twice"));
    assert_int_equal(m.n_layers, 1);
    wst_moe_release(&m);
}

/* One layer declared as 'e', prepared: its refusal status and reason. */
static wst_status_t refusal_of(const struct wst_expert_layer *e, char *reason,
                               size_t len)
{
    struct wst_moe m;
    char err[256];

    wst_moe_init(&m, 2);
    assert_int_equal(wst_moe_add(&m, e, regions, 2, err, sizeof(err)), WST_OK);
    assert_int_equal(wst_moe_prepare(&m, -1), WST_OK);
    wst_status_t st = m.refusal;
    snprintf(reason, len, "%s", m.reason);
    if (st != WST_OK)
        assert_null(m.staging); /* nothing allocated for a refused table */
    wst_moe_release(&m);
    return st;
}

static void test_experts_refusals(void **state)
{
    const char *t = "model.layers.5.mlp.experts.gate_proj.weight";
    uint32_t rr[4] = {1, 3, 5, 7}, shifted[4] = {5, 6, 7, 8};
    struct wst_expert_layer e;
    char why[512];

    (void)state;
    e = layer_decl(5, 1, 2);
    e.expert_ids = rr;
    e.n_expert_ids = 4;
    assert_int_equal(refusal_of(&e, why, sizeof(why)),
                     WST_ERR_NON_LINEAR_PLACEMENT);
    assert_non_null(strstr(why, t));
    assert_non_null(strstr(why, "round-robin"));
    assert_non_null(strstr(why, "1, 3, 5, 7"));
    assert_non_null(strstr(why, "[4, 8)"));
    e.expert_ids = shifted;
    assert_int_equal(refusal_of(&e, why, sizeof(why)),
                     WST_ERR_NON_LINEAR_PLACEMENT);
    assert_non_null(strstr(why, "non-linear expert placement"));
    e = layer_decl(5, 0, 1);
    e.inter_tp_rank = 1;
    e.inter_tp_size = 2;
    assert_int_equal(refusal_of(&e, why, sizeof(why)), WST_ERR_EXPERT_SHARDING);
    assert_non_null(strstr(why, t));
    assert_non_null(strstr(why, "dimension 1"));
    e = layer_decl(5, 0, 3); /* 8 experts over 3 */
    assert_int_equal(refusal_of(&e, why, sizeof(why)),
                     WST_ERR_EXPERT_DIVISIBILITY);
    assert_non_null(strstr(why, "8 experts do not split evenly over "
                                "ep_size 3"));
    e = layer_decl(5, 0, 2);
    e.loader = "trtllm-bf16";
    e.inter = 32; /* I % 64 != 0 */
    assert_int_equal(refusal_of(&e, why, sizeof(why)), WST_ERR_REPACK_SHAPE);
    assert_non_null(strstr(why, t));
    assert_non_null(strstr(why, "trtllm-bf16"));
    /* A linear map spelled out is fine. */
    uint32_t linear[4] = {4, 5, 6, 7};
    e = layer_decl(5, 1, 2);
    e.expert_ids = linear;
    e.n_expert_ids = 4;
    assert_int_equal(refusal_of(&e, why, sizeof(why)), WST_OK);
}

static void test_experts_slots_and_wants(void **state)
{
    struct wst_moe m;
    char err[256];
    uint64_t part = 4ull * I * H * 2; /* L=4 experts of one projection */

    (void)state;
    wst_moe_init(&m, 2);
    /* Declared out of order, with a dense layer (2) between MoE layers. */
    uint32_t layers[4] = {7, 1, 3, 0};
    for (int i = 0; i < 4; i++) {
        struct wst_expert_layer e = layer_decl(layers[i], 1, 2);
        assert_int_equal(wst_moe_add(&m, &e, regions, 2, err, sizeof(err)),
                         WST_OK);
    }
    assert_int_equal(wst_moe_prepare(&m, -1), WST_OK);
    assert_int_equal(m.refusal, WST_OK);
    /* Two slots, whatever the depth; ordinals alternate slots. */
    assert_true(m.slot_bytes >= 3 * part);
    assert_int_equal(m.slot_bytes % 4096, 0);
    assert_int_equal(m.staging_bytes, 2 * m.slot_bytes);
    const uint32_t want_layer[4] = {0, 1, 3, 7};
    /* The staged wants must fit the staging region they name (index 9). */
    struct wst_region_desc staging[10] = {0};
    staging[9].length = m.staging_bytes;
    staging[9].mem = WST_MEM_HOST;
    strcpy(staging[9].name, "staging");
    for (uint32_t k = 0; k < 4; k++) {
        const struct wst_moe_layer *ml = wst_moe_find(&m, want_layer[k]);
        assert_non_null(ml);
        assert_int_equal(ml->ordinal, k);
        assert_int_equal(ml->slot, k % 2);
        assert_int_equal(ml->expert_start, 4);
        assert_int_equal(ml->shape.n_local, 4);
        struct wst_want w[3];
        wst_moe_staging_wants(&m, ml, 9, w);
        for (int p = 0; p < 3; p++) {
            assert_int_equal(w[p].region, 9);
            assert_true(w[p].staged);
            assert_true(w[p].expert.grouped);
            assert_int_equal(w[p].box.start[0], 4);
            assert_int_equal(w[p].box.stop[0], 8);
            assert_int_equal(w[p].offset, ml->slot * m.slot_bytes + p * part);
            assert_int_equal(wst_want_check(&w[p], staging, 10), WST_OK);
        }
        assert_non_null(strstr(w[0].tensor.name, ".experts.gate_proj.weight"));
        assert_non_null(strstr(w[2].tensor.name, ".experts.down_proj.weight"));
        assert_int_equal(w[0].tensor.shape[1], I);
        assert_int_equal(w[2].tensor.shape[1], H);
    }
    assert_null(wst_moe_find(&m, 2));
    wst_moe_release(&m);
}

static void test_experts_replay_global_ids(void **state)
{
    struct wst_moe m;
    char err[256];
    uint64_t per = (uint64_t)I * H; /* elements of one expert's gate */

    (void)state;
    wst_moe_init(&m, 1);
    struct wst_expert_layer e = layer_decl(2, 1, 2); /* globals 4..7 */
    assert_int_equal(wst_moe_add(&m, &e, regions, 2, err, sizeof(err)), WST_OK);
    assert_int_equal(wst_moe_prepare(&m, -1), WST_OK);
    const struct wst_moe_layer *ml = wst_moe_find(&m, 2);
    /* Stage: element value = (global id << 12) | (proj << 10) | index. */
    uint16_t *slot = m.staging;
    for (uint32_t p = 0; p < 3; p++)
        for (uint32_t i = 0; i < 4; i++)
            for (uint64_t x = 0; x < per; x++)
                slot[(p * 4 + i) * per + x] =
                    (uint16_t)(((4 + i) << 12) | (p << 10) | (x & 0x3ff));
    uint16_t *w13 = malloc(regions[0].length), *w2 = malloc(regions[1].length);
    assert_non_null(w13);
    assert_non_null(w2);
    memset(w13, 0xA5, regions[0].length);
    memset(w2, 0xA5, regions[1].length);
    void *data[2] = {w13, w2};
    assert_int_equal(wst_moe_replay(&m, ml, data, err, sizeof(err)), WST_OK);
    for (uint32_t i = 0; i < 4; i++) {
        uint32_t g = 4 + i;
        for (uint64_t x = 0; x < per; x++) {
            /* w13[i] = [gate_g; up_g], w2[i] = down_g */
            uint16_t gate = w13[i * 2 * per + x],
                     up = w13[i * 2 * per + per + x];
            uint16_t down = w2[i * per + x];
            if (gate != (uint16_t)((g << 12) | (0 << 10) | (x & 0x3ff)) ||
                up != (uint16_t)((g << 12) | (1 << 10) | (x & 0x3ff)) ||
                down != (uint16_t)((g << 12) | (2 << 10) | (x & 0x3ff)))
                fail_msg("local expert %u (global %u) element %llu: gate "
                         "%04x up %04x down %04x",
                         i, g, (unsigned long long)x, gate, up, down);
        }
    }
    /* Experts 4..7 of the region (unused by L=4) stay poisoned. */
    const uint8_t *tail = (const uint8_t *)w13 + 4 * 2 * per * 2;
    for (uint64_t b = 0; b < 4 * 2 * per * 2; b++)
        if (tail[b] != 0xA5)
            fail_msg("w13 byte %llu past the local experts was written",
                     (unsigned long long)b);
    free(w13);
    free(w2);
    wst_moe_release(&m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_experts_add_checks),
        cmocka_unit_test(test_experts_refusals),
        cmocka_unit_test(test_experts_slots_and_wants),
        cmocka_unit_test(test_experts_replay_global_ids),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
