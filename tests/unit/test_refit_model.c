/* test_refit_model.c - wstream-model's arithmetic (tools/model/
 * refit_model.h) against hand-computed cases, and its file readers
 * (model_sources.h) on files written here. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model_sources.h"
#include "refit_model.h"

static void build(const char *preset, uint64_t layers, enum wst_rm_dtype dt,
                  struct wst_rm_model *m)
{
    struct wst_rm_arch a;
    char err[256] = "";

    assert_int_equal(wst_rm_arch_preset(preset, layers, &a, err, sizeof(err)),
                     WST_OK);
    assert_int_equal(wst_rm_model_build(&a, dt, m, err, sizeof(err)), WST_OK);
}

static void gpu(const struct wst_rm_model *m, uint64_t tp, uint64_t ep,
                uint64_t pp, uint64_t stage, struct wst_rm_gpu_bytes *g)
{
    struct wst_rm_layout lay = {tp, ep, pp, 1};
    char err[256] = "";

    assert_int_equal(wst_rm_gpu_bytes(m, &lay, stage, g, err, sizeof(err)),
                     WST_OK);
}

#define assert_near(a, b)                                                      \
    assert_true(fabs((double)(a) - (double)(b)) <=                             \
                1e-9 * fabs((double)(b)) + 1e-12)

/* ---- shapes -------------------------------------------------------------- */

/* The demo's tiny preset is 47 tensors, 92,295,168 bytes ("92.3 MB"):
 * embed and lm_head 4096 x 1024 bf16 (8,388,608 each), norm 2,048, and per
 * layer 2 norms (4,096), q and o (2,097,152 each), k and v (1,048,576
 * each), q_norm and k_norm (512), gate, up and down (4,194,304 each):
 * 18,878,976 a layer. */
static void test_tiny_matches_the_demo(void **state)
{
    struct wst_rm_model m;
    uint64_t tensors;

    (void)state;
    build("tiny", 0, WST_RM_BF16, &m);
    assert_int_equal(wst_rm_model_bytes(&m, &tensors), 92295168);
    assert_int_equal(tensors, 47);
    wst_rm_model_release(&m);
}

/* At tp 2 a GPU holds half of every split tensor and all of the norms:
 * replicated 4 x 4,608 + 2,048 = 20,480; split (92,295,168 - 20,480) / 2
 * = 46,137,344. Its last layer: 9,441,792. */
static void test_tiny_tp2(void **state)
{
    struct wst_rm_model m;
    struct wst_rm_gpu_bytes g;

    (void)state;
    build("tiny", 0, WST_RM_BF16, &m);
    gpu(&m, 2, 0, 1, 0, &g);
    assert_int_equal(g.replicated, 20480);
    assert_int_equal(g.sharded, 46137344);
    assert_int_equal(g.experts, 0);
    assert_int_equal(g.total, 46157824);
    assert_int_equal(g.last_layer, 9441792);
    assert_int_equal(g.tensors, 47);
    wst_rm_model_release(&m);
}

/* Past the 4 kv heads, k and v are split 4 ways, not 8: at tp 8 a layer
 * holds 2 x 1,048,576 / 4 of them, against 2,097,152 / 8 for q. */
static void test_kv_heads_cap_the_split(void **state)
{
    struct wst_rm_model m;
    struct wst_rm_gpu_bytes g;
    uint64_t layer;

    (void)state;
    build("tiny", 1, WST_RM_BF16, &m);
    gpu(&m, 8, 0, 1, 0, &g);
    /* norms 4096 + q 262144 + k,v 524288 + o 262144 + head norms 512 +
     * gate, up 1048576 + down 524288 */
    layer = 4096 + 262144 + 524288 + 262144 + 512 + 1048576 + 524288;
    assert_int_equal(g.last_layer, layer);
    assert_int_equal(g.total, layer + 2 * 8388608 / 8 + 2048);
    wst_rm_model_release(&m);
}

/* Pipeline stages: tiny at pp 2 puts embed and layers 0-1 on stage 0
 * (46,146,560), layers 2-3, norm and lm_head on stage 1 (46,148,608). */
static void test_pipeline_stages(void **state)
{
    struct wst_rm_model m;
    struct wst_rm_gpu_bytes g0, g1;

    (void)state;
    build("tiny", 0, WST_RM_BF16, &m);
    gpu(&m, 1, 0, 2, 0, &g0);
    gpu(&m, 1, 0, 2, 1, &g1);
    assert_int_equal(g0.total, 8388608 + 2 * 18878976);
    assert_int_equal(g1.total, 2 * 18878976 + 2048 + 8388608);
    assert_int_equal(g0.total + g1.total, 92295168);
    wst_rm_model_release(&m);
}

/* tiny-moe's experts: [16, 256, 1024] gate and up, [16, 1024, 256] down,
 * 524,288 bytes an expert matrix, 25,165,824 a layer; ep 2 holds half. */
static void test_experts_by_ep(void **state)
{
    struct wst_rm_model m;
    struct wst_rm_gpu_bytes g;
    struct wst_rm_layout bad = {2, 3, 1, 1}, wide = {2, 4, 1, 1};
    char err[256] = "";

    (void)state;
    build("tiny-moe", 0, WST_RM_BF16, &m);
    gpu(&m, 2, 2, 1, 0, &g);
    assert_int_equal(g.experts, 4 * 25165824 / 2);
    assert_int_equal(g.last_expert, 25165824 / 2);
    /* ep 0: split by the intermediate dim over tp, the same bytes */
    gpu(&m, 2, 0, 1, 0, &g);
    assert_int_equal(g.experts, 4 * 25165824 / 2);
    assert_int_equal(wst_rm_gpu_bytes(&m, &bad, 0, &g, err, sizeof(err)),
                     WST_ERR_INVALID);
    assert_non_null(strstr(err, "ep 3 must divide the 16 experts"));
    assert_int_equal(wst_rm_gpu_bytes(&m, &wide, 0, &g, err, sizeof(err)),
                     WST_ERR_INVALID);
    wst_rm_model_release(&m);
}

/* FP8: one byte an element and a float32 per 128 x 128 block; a 256 x 300
 * matrix has 2 x 3 blocks: 76,800 + 24 bytes. */
static void test_fp8_bytes(void **state)
{
    struct wst_rm_tensor t = {
        .rows = 256, .cols = 300, .copies = 1, .linear = 1};

    (void)state;
    assert_int_equal(wst_rm_tensor_bytes(&t, WST_RM_FP8), 76824);
    assert_int_equal(wst_rm_tensor_bytes(&t, WST_RM_BF16), 153600);
    t.linear = 0; /* an embedding stays bf16 */
    assert_int_equal(wst_rm_tensor_bytes(&t, WST_RM_FP8), 153600);
    t.fp32 = 1;
    assert_int_equal(wst_rm_tensor_bytes(&t, WST_RM_FP8), 307200);
}

/* DeepSeek-V3's main model: 671,026,419,200 parameters (computed from
 * config.json by hand: embed and lm_head, 61 MLA layers, 3 dense MLPs, 58
 * MoE layers of 256 routed and 1 shared expert, routers); bf16, with the
 * 58 x 256 router biases in fp32: 2 bytes more each. Kimi-K2: 1,026,408,
 * 232,448; the Qwen3 models 30,532,122,624 and 235,093,634,560. */
static void test_large_presets_parameter_counts(void **state)
{
    static const struct {
        const char *name;
        uint64_t bytes;
    } c[] = {
        {"deepseek-v3", 2 * 671026419200ull + 2 * 58 * 256},
        {"kimi-k2", 2 * 1026408232448ull + 2 * 60 * 384},
        {"qwen3-30b-a3b", 2 * 30532122624ull},
        {"qwen3-235b-a22b", 2 * 235093634560ull},
    };
    struct wst_rm_model m;

    (void)state;
    for (size_t i = 0; i < sizeof(c) / sizeof(c[0]); i++) {
        build(c[i].name, 0, WST_RM_BF16, &m);
        assert_int_equal(wst_rm_model_bytes(&m, NULL), c[i].bytes);
        wst_rm_model_release(&m);
    }
}

/* dense:64 over 4 layers: 8 tensors of 1,024 x 4,096 bf16 (8,388,608
 * bytes); at tp 3 the fullest GPU holds ceil(8,388,608 / 3) of each. */
static void test_dense_sized_model(void **state)
{
    struct wst_rm_model m;
    struct wst_rm_gpu_bytes g;
    struct wst_rm_arch a;
    char err[256] = "";

    (void)state;
    build("dense:64", 0, WST_RM_BF16, &m);
    assert_int_equal(wst_rm_model_bytes(&m, NULL), 64ull << 20);
    gpu(&m, 3, 0, 1, 0, &g);
    assert_int_equal(g.total, 8 * 2796203ull);
    wst_rm_model_release(&m);
    assert_int_equal(wst_rm_arch_preset("dense:x", 0, &a, err, sizeof(err)),
                     WST_ERR_INVALID);
    assert_int_equal(wst_rm_arch_preset("llama", 0, &a, err, sizeof(err)),
                     WST_ERR_INVALID);
    assert_non_null(strstr(err, "unknown model preset \"llama\""));
}

/* ---- time ---------------------------------------------------------------- */

/* tiny, engine tp 2 (2 GPUs), 4 trainer GPUs, 80 Gb/s NICs (10 GB/s),
 * wire 0.5 x wstream 0.8: 4 GB/s. A GPU takes 46,157,824 bytes: 11.539456
 * ms; each sender sends 92,315,648 / 4 = 23,078,912: 5.769728 ms. Round
 * trips 2 x 1 ms, the last layer's 9,441,792 bytes checked at 10 GB/s
 * (0.9441792 ms), commit 1.5 ms: 15.9836352 ms; with 100 plan items at 2
 * us, 16.1836352 ms. */
static struct wst_rm_inputs base_inputs(void)
{
    struct wst_rm_inputs in = {
        .trainer = {1, 1, 1, 4},
        .inference = {2, 0, 1, 1},
        .nic_gbit = 80,
        .trainer_nics_per_gpu = 1,
        .inference_nics_per_gpu = 1,
        .wire_efficiency = 0.5,
        .wstream_efficiency = 0.8,
        .copy_gbps = 54.5,
        .repack_gbps = 1000,
        .digest_gbps = 10,
        .plan_us_per_item = 2,
        .plan_items = 100,
        .rtt_s = 1e-3,
        .round_trips = 2,
        .commit_s = 1.5e-3,
    };
    return in;
}

static void test_predict_by_hand(void **state)
{
    struct wst_rm_model m;
    struct wst_rm_inputs in = base_inputs();
    struct wst_rm_prediction p;
    char err[256] = "";

    (void)state;
    build("tiny", 0, WST_RM_BF16, &m);
    assert_int_equal(wst_rm_predict(&m, &in, &p, err, sizeof(err)), WST_OK);
    assert_int_equal(p.inference_gpus, 2);
    assert_int_equal(p.trainer_gpus, 4);
    assert_int_equal(p.total_in, 92315648);
    assert_int_equal(p.per_sender, 23078912);
    assert_near(p.rate_in_gbps, 4.0);
    assert_near(p.recv_s, 0.011539456);
    assert_near(p.send_s, 0.005769728);
    assert_near(p.transfer_s, 0.011539456);
    assert_near(p.floor_s, 0.0046157824);
    assert_near(p.control_s, 0.002);
    assert_near(p.tail_s, 0.0009441792);
    assert_near(p.steady_s, 0.0159836352);
    assert_near(p.plan_s, 0.0002);
    assert_near(p.first_s, 0.0161836352);
    /* estimated items: the 47 tensors it holds, one piece each */
    in.plan_items = 0;
    assert_int_equal(wst_rm_predict(&m, &in, &p, err, sizeof(err)), WST_OK);
    assert_int_equal(p.plan_items, 47);
    assert_true(p.plan_items_estimated);
    wst_rm_model_release(&m);
}

/* The agent's CPU overlaps the transfer: tiny has 4 layers and 4 trainer
 * GPUs, so at 500 us per sender and layer an agent spends 8 ms (under the
 * 11.539456 ms transfer: no change); at 1000 us, 16 ms replaces the
 * transfer: 2 + 16 + 0.9441792 + 1.5 = 20.4441792 ms. Two senders per
 * receiver halve it back under the transfer. */
static void test_predict_agent_cpu(void **state)
{
    struct wst_rm_model m;
    struct wst_rm_inputs in = base_inputs();
    struct wst_rm_prediction p;
    char err[256] = "";

    (void)state;
    build("tiny", 0, WST_RM_BF16, &m);
    in.agent_cpu_us = 500;
    assert_int_equal(wst_rm_predict(&m, &in, &p, err, sizeof(err)), WST_OK);
    assert_int_equal(p.senders_in, 4);
    assert_int_equal(p.stage_layers, 4);
    assert_near(p.agent_cpu_s, 0.008);
    assert_near(p.steady_s, 0.0159836352);
    in.agent_cpu_us = 1000;
    assert_int_equal(wst_rm_predict(&m, &in, &p, err, sizeof(err)), WST_OK);
    assert_near(p.agent_cpu_s, 0.016);
    assert_near(p.steady_s, 0.0204441792);
    in.senders_per_receiver = 2;
    assert_int_equal(wst_rm_predict(&m, &in, &p, err, sizeof(err)), WST_OK);
    assert_near(p.agent_cpu_s, 0.008);
    assert_near(p.steady_s, 0.0159836352);
    /* Each sender then talks to 2 x 2 / 4 = 1 receiver: 4 layers x 2000
     * us = 8 ms, under the transfer. On one shared core, the 2 agents'
     * 8 ms and the 4 senders' 8 ms add up: 48 ms, 2 + 48 + 0.9441792 +
     * 1.5 = 52.4441792 ms. */
    in.sender_cpu_us = 2000;
    assert_int_equal(wst_rm_predict(&m, &in, &p, err, sizeof(err)), WST_OK);
    assert_near(p.receivers_out, 1.0);
    assert_near(p.sender_cpu_s, 0.008);
    assert_near(p.steady_s, 0.0159836352);
    in.host_cores = 1;
    assert_int_equal(wst_rm_predict(&m, &in, &p, err, sizeof(err)), WST_OK);
    assert_near(p.shared_cpu_s, 0.048);
    assert_near(p.steady_s, 0.0524441792);
    wst_rm_model_release(&m);
}

/* The slowest side wins: one NIC for every 8 trainer GPUs (10/8 GB/s x
 * 0.4) makes sending 23,078,912 bytes take 46.157824 ms. The bounce path
 * caps a GPU at the pinned copy rate (3 GB/s: 15.385941 ms). NVLink
 * carries a quarter at 1 GB/s: 11.539456 ms, above the NIC's three
 * quarters (8.654592 ms). */
static void test_predict_sides_bounce_nvlink(void **state)
{
    struct wst_rm_model m;
    struct wst_rm_inputs in = base_inputs();
    struct wst_rm_prediction p;
    char err[256] = "";

    (void)state;
    build("tiny", 0, WST_RM_BF16, &m);
    in.trainer_nics_per_gpu = 0.125;
    assert_int_equal(wst_rm_predict(&m, &in, &p, err, sizeof(err)), WST_OK);
    assert_near(p.send_s, 0.046157824);
    assert_near(p.transfer_s, 0.046157824);
    in = base_inputs();
    in.bounce = 1;
    in.copy_gbps = 3;
    assert_int_equal(wst_rm_predict(&m, &in, &p, err, sizeof(err)), WST_OK);
    assert_near(p.rate_in_gbps, 3.0);
    assert_near(p.recv_s, 0.046157824 / 3);
    in = base_inputs();
    in.nvlink_gbps = 1;
    in.local_fraction = 0.25;
    assert_int_equal(wst_rm_predict(&m, &in, &p, err, sizeof(err)), WST_OK);
    assert_near(p.recv_s, 0.008654592);
    assert_near(p.nvlink_s, 0.011539456);
    assert_near(p.transfer_s, 0.011539456);
    wst_rm_model_release(&m);
}

/* A measured total replaces the model's bytes: 100,000,000 over 2 GPUs is
 * 50,000,000 each (12.5 ms at 4 GB/s), 25,000,000 a sender (6.25 ms); a
 * measured plan time is used as it is. */
static void test_predict_measured_bytes_and_plan(void **state)
{
    struct wst_rm_model m;
    struct wst_rm_inputs in = base_inputs();
    struct wst_rm_prediction p;
    char err[256] = "";

    (void)state;
    build("tiny", 0, WST_RM_BF16, &m);
    in.live_bytes = 100000000;
    in.plan_s = 0.04;
    assert_int_equal(wst_rm_predict(&m, &in, &p, err, sizeof(err)), WST_OK);
    assert_true(p.bytes_given);
    assert_int_equal(p.gpu.total, 50000000);
    assert_int_equal(p.total_in, 100000000);
    assert_int_equal(p.per_sender, 25000000);
    assert_near(p.recv_s, 0.0125);
    assert_near(p.send_s, 0.00625);
    assert_near(p.plan_s, 0.04);
    assert_near(p.first_s, p.steady_s + 0.04);
    wst_rm_model_release(&m);
}

static void expect_invalid(struct wst_rm_inputs in, const char *needle)
{
    struct wst_rm_model m;
    struct wst_rm_prediction p;
    char err[256] = "";

    build("tiny", 0, WST_RM_BF16, &m);
    assert_int_equal(wst_rm_predict(&m, &in, &p, err, sizeof(err)),
                     WST_ERR_INVALID);
    if (strstr(err, needle) == NULL)
        fail_msg("\"%s\" does not say \"%s\"", err, needle);
    wst_rm_model_release(&m);
}

static void test_predict_refusals(void **state)
{
    struct wst_rm_inputs in = base_inputs();

    (void)state;
    in.inference_gpus = 3;
    expect_invalid(in, "inference: 3 GPUs, but its layout");
    in = base_inputs();
    in.local_fraction = 0.5;
    expect_invalid(in, "needs an NVLink rate");
    in = base_inputs();
    in.wire_efficiency = 0;
    expect_invalid(in, "efficiencies");
    in = base_inputs();
    in.inference_nics_per_gpu = 0;
    expect_invalid(in, "NICs per GPU");
    in = base_inputs();
    in.inference.pp = 5;
    expect_invalid(in, "pp 5 is more than the 4 layers");
}

/* ---- files --------------------------------------------------------------- */

static char *write_tmp(const char *text)
{
    char *path = strdup("/tmp/test_refit_model.XXXXXX");
    int fd;

    assert_non_null(path);
    fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    return path;
}

/* wstream-bench's output: its CSV pair (a quoted field with commas) and
 * its key=value line. */
static void test_pairs_from_bench_output(void **state)
{
    static struct wst_rm_pairs p;
    char err[256] = "";
    char *path =
        write_tmp("refit 1/3: 0.100 s, 2.68 GB/s\n"
                  "csv,transport,lanes,ratio,ratio_footprint\n"
                  "csv,tcp,\"tcp/lo[am,am_bw]\",0.450,0.959\n\n"
                  "wstream-bench: transport=tcp ratio=0.450 outside_s=0.013730 "
                  "commit_tail_s=0.012140 verified=yes\n");

    (void)state;
    memset(&p, 0, sizeof(p));
    assert_int_equal(wst_rm_pairs_read(path, &p, err, sizeof(err)), WST_OK);
    assert_string_equal(wst_rm_pairs_get(&p, "lanes"), "tcp/lo[am,am_bw]");
    assert_string_equal(wst_rm_pairs_get(&p, "ratio_footprint"), "0.959");
    assert_string_equal(wst_rm_pairs_get(&p, "outside_s"), "0.013730");
    assert_string_equal(wst_rm_pairs_get(&p, "verified"), "yes");
    assert_null(wst_rm_pairs_get(&p, "csv"));
    assert_null(wst_rm_pairs_get(&p, "refit 1/3"));
    unlink(path);
    free(path);
}

/* A plain CSV (what the scale test may write): header, row. */
static void test_pairs_from_plain_csv(void **state)
{
    static struct wst_rm_pairs p;
    char err[256] = "";
    char *path = write_tmp("# a comment\nplan_items,plan_us_per_item\n"
                           "54812,1.3\n");
    char *bad = write_tmp("a,b\n1,2,3\n");
    char *rows = write_tmp("a,b\n1,2\n3,4\n");

    (void)state;
    memset(&p, 0, sizeof(p));
    assert_int_equal(wst_rm_pairs_read(path, &p, err, sizeof(err)), WST_OK);
    assert_int_equal(p.n, 2);
    assert_string_equal(wst_rm_pairs_get(&p, "plan_items"), "54812");
    assert_string_equal(wst_rm_pairs_get(&p, "plan_us_per_item"), "1.3");
    /* rows appended under one header (wstream-demo --csv): the last */
    memset(&p, 0, sizeof(p));
    assert_int_equal(wst_rm_pairs_read(rows, &p, err, sizeof(err)), WST_OK);
    assert_int_equal(p.n, 2);
    assert_string_equal(wst_rm_pairs_get(&p, "a"), "3");
    assert_string_equal(wst_rm_pairs_get(&p, "b"), "4");
    memset(&p, 0, sizeof(p));
    assert_int_equal(wst_rm_pairs_read(bad, &p, err, sizeof(err)),
                     WST_ERR_INVALID);
    assert_int_equal(wst_rm_pairs_read("/nonexistent/x", &p, err, sizeof(err)),
                     WST_ERR_IO);
    unlink(path);
    unlink(bad);
    unlink(rows);
    free(path);
    free(bad);
    free(rows);
}

/* tests/gpu/run.sh's table: a repack row's MB counts the layer twice
 * (1409.3 MB in 0.354 ms: 1990.5 GB/s of layer bytes); the slowest GPU
 * digest row and pinned copy row are taken, never the CPU digest. */
static void test_gpu_table(void **state)
{
    struct wst_rm_gpu_table g;
    char err[256] = "";
    char *path = write_tmp(
        "| benchmark | MB | ms | GB/s | vs ceil |\n|---|---|---|---|---|\n"
        "| repack trtllm-bf16, DeepSeek-V3 ep=32 layer |     1409.3 |      "
        "0.354 |    3976.0 |      94% |\n"
        "| repack checkpoint, DeepSeek-V3 ep=32 layer | 1409.3 | 0.362 | "
        "3895.0 | 92% |\n"
        "| digest 2 GiB one run | 2147.5 | 0.592 | 3627.0 | 86% |\n"
        "| digest 2 GiB as 8k runs | 2145.5 | 1.073 | 1999.0 | 47% |\n"
        "| digest cpu 256 MiB (1 thread, libxxhash) | 268.4 | 41.9 | 6.4 | - "
        "|\n"
        "| pinned device-to-host 1 GiB, 8 MiB chunks | 1073.7 | 19.7 | 54.5 | "
        "- |\n"
        "| pinned host-to-device 1 GiB, 8 MiB chunks | 1073.7 | 19.9 | 54.0 | "
        "- |\n");

    (void)state;
    assert_int_equal(wst_rm_gpu_table_read(path, &g, err, sizeof(err)), WST_OK);
    /* 704.65 MB of layer in 0.354 ms: MB per ms is GB/s */
    assert_true(fabs(g.repack_gbps - 1990.536723) < 1e-5);
    assert_true(fabs(g.digest_gbps - 1999.0) < 1e-9);
    assert_true(fabs(g.copy_gbps - 54.0) < 1e-9);
    assert_non_null(strstr(g.repack_row, "DeepSeek-V3"));
    unlink(path);
    free(path);
}

/* A DeepSeek-V3 config.json gives the preset's model, byte for byte. */
static void test_config_json(void **state)
{
    struct wst_rm_arch a;
    struct wst_rm_model from_json, preset;
    uint64_t tensors, total;
    char err[256] = "";
    char *path =
        write_tmp("{\"model_type\": \"deepseek_v3\", \"hidden_size\": 7168, "
                  "\"num_hidden_layers\": 61, \"vocab_size\": 129280, "
                  "\"num_attention_heads\": 128, \"num_key_value_heads\": 128, "
                  "\"q_lora_rank\": 1536, \"kv_lora_rank\": 512, "
                  "\"qk_nope_head_dim\": 128, \"qk_rope_head_dim\": 64, "
                  "\"v_head_dim\": 128, \"intermediate_size\": 18432, "
                  "\"first_k_dense_replace\": 3, \"n_routed_experts\": 256, "
                  "\"moe_intermediate_size\": 2048, \"n_shared_experts\": 1, "
                  "\"topk_method\": \"noaux_tc\"}");
    char *index = write_tmp("{\"metadata\": {\"total_size\": 1234}, "
                            "\"weight_map\": {\"a\": \"x\", \"b\": \"y\"}}");

    (void)state;
    assert_int_equal(wst_rm_config_read(path, &a, err, sizeof(err)), WST_OK);
    assert_int_equal(
        wst_rm_model_build(&a, WST_RM_FP8, &from_json, err, sizeof(err)),
        WST_OK);
    build("deepseek-v3", 0, WST_RM_FP8, &preset);
    assert_int_equal(wst_rm_model_bytes(&from_json, NULL),
                     wst_rm_model_bytes(&preset, NULL));
    assert_int_equal(
        wst_rm_index_read(index, &tensors, &total, err, sizeof(err)), WST_OK);
    assert_int_equal(tensors, 2);
    assert_int_equal(total, 1234);
    wst_rm_model_release(&from_json);
    wst_rm_model_release(&preset);
    unlink(path);
    unlink(index);
    free(path);
    free(index);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tiny_matches_the_demo),
        cmocka_unit_test(test_tiny_tp2),
        cmocka_unit_test(test_kv_heads_cap_the_split),
        cmocka_unit_test(test_pipeline_stages),
        cmocka_unit_test(test_experts_by_ep),
        cmocka_unit_test(test_fp8_bytes),
        cmocka_unit_test(test_large_presets_parameter_counts),
        cmocka_unit_test(test_dense_sized_model),
        cmocka_unit_test(test_predict_by_hand),
        cmocka_unit_test(test_predict_agent_cpu),
        cmocka_unit_test(test_predict_sides_bounce_nvlink),
        cmocka_unit_test(test_predict_measured_bytes_and_plan),
        cmocka_unit_test(test_predict_refusals),
        cmocka_unit_test(test_pairs_from_bench_output),
        cmocka_unit_test(test_pairs_from_plain_csv),
        cmocka_unit_test(test_gpu_table),
        cmocka_unit_test(test_config_json),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
