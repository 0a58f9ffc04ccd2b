/* test_send_experts.c - wstream-send's per-expert MoE tensors as slices of
 * the grouped wire tensors (tools/send/experts.h): what is grouped, what
 * is left under its own name, and every refusal, which changes nothing.
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

#define MAX_T 64

struct ckpt {
    struct wst_st_tensor t[MAX_T];
    char names[MAX_T][WST_NAME_MAX];
    struct wst_send_tensor x[MAX_T];
    size_t n;
    char err[512];
};

static void add(struct ckpt *c, const char *name, enum wst_dtype dt,
                uint32_t ndim, uint64_t d0, uint64_t d1)
{
    struct wst_st_tensor *t = &c->t[c->n];
    struct wst_send_tensor *x = &c->x[c->n];

    assert_true(c->n < MAX_T);
    snprintf(c->names[c->n], WST_NAME_MAX, "%s", name);
    memset(t, 0, sizeof(*t));
    t->name = c->names[c->n];
    t->dtype = dt;
    t->ndim = ndim;
    t->shape[0] = d0;
    t->shape[1] = d1;
    t->shape[2] = 2;
    memset(x, 0, sizeof(*x));
    x->t = t;
    x->ndim = ndim ? ndim : 1;
    memcpy(x->shape, t->shape, sizeof(x->shape));
    memcpy(x->stop, x->shape, sizeof(x->stop));
    c->n++;
}

/* Layer l's experts [0, n) of gate/up [I, H] and down [H, I], in the
 * order given (experts descending, so that sorting matters). */
static void add_layer(struct ckpt *c, uint32_t l, uint32_t n, uint64_t inter,
                      uint64_t hid, enum wst_dtype dt)
{
    char name[WST_NAME_MAX];

    for (uint32_t e = n; e-- > 0;) {
        snprintf(name, sizeof(name), "model.layers.%u.mlp.experts.%u.%s.weight",
                 l, e, "down_proj");
        add(c, name, dt, 2, hid, inter);
        snprintf(name, sizeof(name), "model.layers.%u.mlp.experts.%u.%s.weight",
                 l, e, "gate_proj");
        add(c, name, dt, 2, inter, hid);
        snprintf(name, sizeof(name), "model.layers.%u.mlp.experts.%u.%s.weight",
                 l, e, "up_proj");
        add(c, name, dt, 2, inter, hid);
    }
}

static size_t find(const struct ckpt *c, const char *name)
{
    for (size_t i = 0; i < c->n; i++)
        if (strcmp(c->t[i].name, name) == 0)
            return i;
    fail_msg("no tensor %s", name);
    return 0;
}

static void expect_slice(const struct ckpt *c, const char *name,
                         const char *group, uint64_t e, uint64_t n_experts)
{
    const struct wst_send_tensor *x = &c->x[find(c, name)];

    assert_string_equal(wst_send_tensor_name(x), group);
    assert_int_equal(x->ndim, 3);
    assert_int_equal(x->shape[0], n_experts);
    assert_int_equal(x->shape[1], x->t->shape[0]);
    assert_int_equal(x->shape[2], x->t->shape[1]);
    assert_int_equal(x->start[0], e);
    assert_int_equal(x->stop[0], e + 1);
    assert_int_equal(x->start[1], 0);
    assert_int_equal(x->start[2], 0);
    assert_int_equal(x->stop[1], x->t->shape[0]);
    assert_int_equal(x->stop[2], x->t->shape[1]);
}

static void expect_own(const struct ckpt *c, const char *name)
{
    const struct wst_send_tensor *x = &c->x[find(c, name)];

    assert_null(x->group_name);
    assert_string_equal(wst_send_tensor_name(x), name);
    assert_int_equal(x->ndim, x->t->ndim ? x->t->ndim : 1);
    assert_int_equal(x->stop[0], x->shape[0]);
}

static void test_send_experts_groups_layers(void **state)
{
    struct ckpt *c = calloc(1, sizeof(*c));
    struct wst_send_experts found = {0};

    (void)state;
    add(c, "model.embed_tokens.weight", WST_DTYPE_BF16, 2, 10, 8);
    add_layer(c, 0, 4, 6, 8, WST_DTYPE_BF16);
    add(c, "model.layers.0.mlp.gate.weight", WST_DTYPE_BF16, 2, 4, 8);
    /* Not per-expert names: left as they are. */
    add(c, "model.layers.0.mlp.shared_experts.gate_proj.weight", WST_DTYPE_BF16,
        2, 6, 8);
    add(c, "model.layers.0.mlp.experts.0.gate_proj.weight_scale_inv",
        WST_DTYPE_F32, 2, 1, 1);
    add(c, "model.layers.1.mlp.experts.01.gate_proj.weight", WST_DTYPE_F32, 2,
        3, 5);
    add(c, "model.layers.1.mlp.experts.0.w1.weight", WST_DTYPE_F32, 2, 3, 5);
    /* Layer 2 without gate (a non-gated MoE), two f32 experts. */
    add(c, "model.layers.2.mlp.experts.1.up_proj.weight", WST_DTYPE_F32, 2, 3,
        5);
    add(c, "model.layers.2.mlp.experts.0.down_proj.weight", WST_DTYPE_F32, 2, 5,
        3);
    add(c, "model.layers.2.mlp.experts.0.up_proj.weight", WST_DTYPE_F32, 2, 3,
        5);
    add(c, "model.layers.2.mlp.experts.1.down_proj.weight", WST_DTYPE_F32, 2, 5,
        3);
    assert_int_equal(
        wst_send_group_experts(c->x, c->n, &found, c->err, sizeof(c->err)),
        WST_OK);
    assert_int_equal(found.n_slices, 12 + 4);
    assert_int_equal(found.n_grouped, 3 + 2);
    assert_int_equal(found.n_layers, 2);
    expect_slice(c, "model.layers.0.mlp.experts.0.gate_proj.weight",
                 "model.layers.0.mlp.experts.gate_proj.weight", 0, 4);
    expect_slice(c, "model.layers.0.mlp.experts.3.down_proj.weight",
                 "model.layers.0.mlp.experts.down_proj.weight", 3, 4);
    expect_slice(c, "model.layers.0.mlp.experts.2.up_proj.weight",
                 "model.layers.0.mlp.experts.up_proj.weight", 2, 4);
    expect_slice(c, "model.layers.2.mlp.experts.1.down_proj.weight",
                 "model.layers.2.mlp.experts.down_proj.weight", 1, 2);
    expect_slice(c, "model.layers.2.mlp.experts.0.up_proj.weight",
                 "model.layers.2.mlp.experts.up_proj.weight", 0, 2);
    expect_own(c, "model.embed_tokens.weight");
    expect_own(c, "model.layers.0.mlp.gate.weight");
    expect_own(c, "model.layers.0.mlp.shared_experts.gate_proj.weight");
    expect_own(c, "model.layers.0.mlp.experts.0.gate_proj.weight_scale_inv");
    expect_own(c, "model.layers.1.mlp.experts.01.gate_proj.weight");
    expect_own(c, "model.layers.1.mlp.experts.0.w1.weight");
    wst_send_tensors_release(c->x, c->n);
    free(c);
}

/* A refused checkpoint: the status, the message, and no entry changed. */
static void expect_refused(struct ckpt *c, const char *needle)
{
    struct wst_send_experts found = {.n_slices = 77};
    struct wst_send_tensor before[MAX_T];

    memcpy(before, c->x, sizeof(before));
    assert_int_equal(
        wst_send_group_experts(c->x, c->n, &found, c->err, sizeof(c->err)),
        WST_ERR_INTEGRITY);
    if (strstr(c->err, needle) == NULL)
        fail_msg("the refusal '%s' does not say '%s'", c->err, needle);
    assert_memory_equal(before, c->x, sizeof(before));
    assert_int_equal(found.n_slices, 77);
}

/* A fresh checkpoint of one good layer (E=3, I=6, H=8) and layer 1's
 * experts as 'edit' changes them. */
static struct ckpt *bad(void (*edit)(struct ckpt *c))
{
    struct ckpt *c = calloc(1, sizeof(*c));

    assert_non_null(c);
    add_layer(c, 0, 3, 6, 8, WST_DTYPE_BF16);
    add_layer(c, 1, 3, 6, 8, WST_DTYPE_BF16);
    edit(c);
    return c;
}

static void gap(struct ckpt *c)
{
    size_t k = find(c, "model.layers.1.mlp.experts.1.gate_proj.weight");
    c->x[k] = c->x[--c->n];
}

static void last_missing(struct ckpt *c)
{
    size_t k = find(c, "model.layers.1.mlp.experts.2.down_proj.weight");
    c->x[k] = c->x[--c->n];
}

static void not_2d(struct ckpt *c)
{
    c->t[find(c, "model.layers.1.mlp.experts.0.up_proj.weight")].ndim = 3;
}

static void other_shape(struct ckpt *c)
{
    c->t[find(c, "model.layers.1.mlp.experts.2.up_proj.weight")].shape[0] = 7;
}

static void other_dtype(struct ckpt *c)
{
    c->t[find(c, "model.layers.1.mlp.experts.1.down_proj.weight")].dtype =
        WST_DTYPE_F16;
}

static void not_transposed(struct ckpt *c)
{
    for (uint32_t e = 0; e < 3; e++) {
        char name[WST_NAME_MAX];
        snprintf(name, sizeof(name),
                 "model.layers.1.mlp.experts.%u.down_proj.weight", e);
        struct wst_st_tensor *t = &c->t[find(c, name)];
        t->shape[0] = 6;
        t->shape[1] = 8;
    }
}

static void both_forms(struct ckpt *c)
{
    add(c, "model.layers.1.mlp.experts.down_proj.weight", WST_DTYPE_BF16, 3, 3,
        8);
}

static void test_send_experts_refusals(void **state)
{
    static const struct {
        void (*edit)(struct ckpt *c);
        const char *needle;
    } cases[] = {
        {gap, "layer 1 gate_proj: expert 1 is missing: no tensor "
              "'model.layers.1.mlp.experts.1.gate_proj.weight' (the layer "
              "has experts up to 2)"},
        {last_missing, "layer 1 down_proj: expert 2 is missing"},
        {not_2d, "tensor 'model.layers.1.mlp.experts.0.up_proj.weight': a "
                 "per-expert projection must be 2-D ([rows, cols]); it has "
                 "shape [6, 8, 2]"},
        {other_shape, "layer 1 up_proj: "
                      "'model.layers.1.mlp.experts.2.up_proj.weight' has "
                      "shape [7, 8] but "
                      "'model.layers.1.mlp.experts.0.up_proj.weight' has [6, "
                      "8]"},
        {other_dtype, "layer 1 experts: "
                      "'model.layers.1.mlp.experts.1.down_proj.weight' is f16 "
                      "but 'model.layers.1.mlp.experts.0.gate_proj.weight' is "
                      "bf16"},
        {not_transposed, "layer 1 experts: "
                         "'model.layers.1.mlp.experts.0.down_proj.weight' has "
                         "shape [6, 8], which does not fit "
                         "'model.layers.1.mlp.experts.0.gate_proj.weight' of "
                         "[6, 8]"},
        {both_forms, "layer 1: the checkpoint holds both the grouped tensor "
                     "'model.layers.1.mlp.experts.down_proj.weight' and "
                     "per-expert tensors"},
    };

    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct ckpt *c = bad(cases[i].edit);
        expect_refused(c, cases[i].needle);
        free(c);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_send_experts_groups_layers),
        cmocka_unit_test(test_send_experts_refusals),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
