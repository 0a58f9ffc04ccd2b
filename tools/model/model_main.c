/* model_main.c - wstream-model: a refit's predicted time on any cluster.
 *
 * Takes a cluster (each side's GPUs and TP/EP/PP/DP layout, NICs per GPU
 * and their speed, NVLink or not), a model shape (a preset, or a
 * config.json with an optional safetensors index to compare with) and
 * measured efficiencies (flags, or files: wstream-bench's output, the
 * tests/gpu/run.sh benchmark table, any CSV whose columns are named as
 * these flags), and prints every input with where it came from, then the
 * predicted refit and its parts (tools/model/refit_model.h).
 *
 * Precedence, lowest first: the default, a WST_* environment variable, a
 * file (--bench-csv, then --gpu-summary, then --inputs-csv), a flag.
 *
 * Exit status: 0 a prediction printed; 1 a file could not be read (said
 * why); 2 bad usage, inputs that make no prediction among it (a layout
 * that does not fit the model, an unknown preset, zero NICs).
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "model_sources.h"
#include "refit_model.h"

struct model_settings {
    char *model;
    char *config_json;
    char *index_json;
    uint64_t layers;
    int dtype;
    uint64_t trainer_gpus, trainer_tp, trainer_ep, trainer_pp, trainer_dp;
    uint64_t inference_gpus, inference_tp, inference_ep, inference_pp,
        inference_dp;
    double nic_gbps, trainer_nics_per_gpu, inference_nics_per_gpu;
    double wire_efficiency, wstream_efficiency;
    int link_from_bench;
    int bounce;
    double copy_gbps;
    int nvlink;
    double nvlink_gbps, local_fraction;
    double repack_gbps, digest_gbps;
    double plan_us_per_item;
    uint64_t plan_items;
    double plan_ms;
    uint64_t live_bytes;
    double measured_s;
    double rtt_ms;
    uint64_t round_trips;
    double commit_ms;
    double agent_cpu_us, sender_cpu_us;
    uint64_t senders_per_receiver;
    double host_cores;
    char *bench_csv, *gpu_summary, *inputs_csv;
    int csv;
};

static const char *const dtype_choices[] = {"bf16", "fp8", NULL};

#define OFF(f) offsetof(struct model_settings, f)

static const struct wst_config_entry model_config[] = {
    {"model", WST_CONFIG_STRING, "kimi-k2",
     "model preset: deepseek-v3, kimi-k2, qwen3-30b-a3b, qwen3-235b-a22b, "
     "tiny, tiny-moe, dense:<MiB> (ignored with --config-json)",
     OFF(model), NULL, NULL},
    {"config-json", WST_CONFIG_STRING, "",
     "a Hugging Face config.json to take the model's dims from",
     OFF(config_json), NULL, NULL},
    {"index-json", WST_CONFIG_STRING, "",
     "its model.safetensors.index.json: tensor count and total_size are "
     "printed beside the model's",
     OFF(index_json), NULL, NULL},
    {"layers", WST_CONFIG_UINT, "0", "layer count (0: the model's)",
     OFF(layers), NULL, NULL},
    {"dtype", WST_CONFIG_ENUM, "bf16",
     "the engine's weights: bf16, or fp8 (linear weights 1 byte plus a "
     "float32 scale per 128x128 block)",
     OFF(dtype), dtype_choices, NULL},
    {"trainer-gpus", WST_CONFIG_UINT, "0",
     "trainer GPUs, the senders (0: tp x pp x dp)", OFF(trainer_gpus), NULL,
     NULL},
    {"trainer-tp", WST_CONFIG_UINT, "1", "trainer tensor parallelism",
     OFF(trainer_tp), NULL, NULL},
    {"trainer-ep", WST_CONFIG_UINT, "1",
     "trainer expert parallelism (printed; the senders' load is spread "
     "evenly)",
     OFF(trainer_ep), NULL, NULL},
    {"trainer-pp", WST_CONFIG_UINT, "1", "trainer pipeline stages",
     OFF(trainer_pp), NULL, NULL},
    {"trainer-dp", WST_CONFIG_UINT, "0",
     "trainer data parallelism (0: GPUs / (tp x pp), or 1)", OFF(trainer_dp),
     NULL, NULL},
    {"inference-gpus", WST_CONFIG_UINT, "0",
     "inference GPUs, the receivers (0: tp x pp x dp)", OFF(inference_gpus),
     NULL, NULL},
    {"inference-tp", WST_CONFIG_UINT, "8", "engine tensor parallelism",
     OFF(inference_tp), NULL, NULL},
    {"inference-ep", WST_CONFIG_UINT, "0",
     "engine expert parallelism over tp x dp ranks (0: experts split over "
     "tp by their intermediate dim)",
     OFF(inference_ep), NULL, NULL},
    {"inference-pp", WST_CONFIG_UINT, "1", "engine pipeline stages",
     OFF(inference_pp), NULL, NULL},
    {"inference-dp", WST_CONFIG_UINT, "0",
     "engine replicas (data parallel; 0: GPUs / (tp x pp), or 1)",
     OFF(inference_dp), NULL, NULL},
    {"nic-gbps", WST_CONFIG_DOUBLE, "400", "one NIC's line rate, Gb/s",
     OFF(nic_gbps), NULL, NULL},
    {"trainer-nics-per-gpu", WST_CONFIG_DOUBLE, "1",
     "NICs per trainer GPU (0.5: two GPUs share one)",
     OFF(trainer_nics_per_gpu), NULL, NULL},
    {"inference-nics-per-gpu", WST_CONFIG_DOUBLE, "1", "NICs per inference GPU",
     OFF(inference_nics_per_gpu), NULL, NULL},
    {"wire-efficiency", WST_CONFIG_DOUBLE, "0.94",
     "ucx_perftest's share of the NIC's line rate", OFF(wire_efficiency), NULL,
     NULL},
    {"wstream-efficiency", WST_CONFIG_DOUBLE, "0.66",
     "wstream's share of ucx_perftest's rate on the same lanes "
     "(wstream-bench ratio_footprint)",
     OFF(wstream_efficiency), NULL, NULL},
    {"link-from-bench", WST_CONFIG_BOOL, "n",
     "the NIC is --bench-csv's measured link: nic-gbps = its perftest "
     "footprint GB/s x 8, wire efficiency 1 (this machine's refits)",
     OFF(link_from_bench), NULL, NULL},
    {"bounce", WST_CONFIG_BOOL, "n",
     "no GPUDirect RDMA: bytes go through pinned host memory both sides",
     OFF(bounce), NULL, NULL},
    {"copy-gbps", WST_CONFIG_DOUBLE, "54.5",
     "pinned device<->host copy rate, GB/s (--bounce)", OFF(copy_gbps), NULL,
     NULL},
    {"nvlink", WST_CONFIG_BOOL, "n",
     "senders on a receiver's node reach it over NVLink", OFF(nvlink), NULL,
     NULL},
    {"nvlink-gbps", WST_CONFIG_DOUBLE, "450",
     "NVLink rate per GPU each way, GB/s (--nvlink)", OFF(nvlink_gbps), NULL,
     NULL},
    {"local-fraction", WST_CONFIG_DOUBLE, "0",
     "share of a receiver's bytes from senders on its node (--nvlink; 0: "
     "trainers and engines on separate nodes)",
     OFF(local_fraction), NULL, NULL},
    {"repack-gbps", WST_CONFIG_DOUBLE, "1990",
     "expert repack rate, layer bytes per second in GB/s (0: none)",
     OFF(repack_gbps), NULL, NULL},
    {"digest-gbps", WST_CONFIG_DOUBLE, "1999",
     "digest check rate of the last layer, GB/s (0: hidden, hashed as it "
     "lands)",
     OFF(digest_gbps), NULL, NULL},
    {"plan-us-per-item", WST_CONFIG_DOUBLE, "1.2",
     "planning cost per plan item, microseconds", OFF(plan_us_per_item), NULL,
     NULL},
    {"plan-items", WST_CONFIG_UINT, "0",
     "plan items per receiver (0: estimated from the tensors it holds)",
     OFF(plan_items), NULL, NULL},
    {"plan-ms", WST_CONFIG_DOUBLE, "0",
     "a measured plan time per receiver, ms (0: items x cost per item)",
     OFF(plan_ms), NULL, NULL},
    {"live-bytes", WST_CONFIG_UINT, "0",
     "measured bytes all inference GPUs take together (0: the model's); "
     "each GPU takes an even share",
     OFF(live_bytes), NULL, NULL},
    {"measured-s", WST_CONFIG_DOUBLE, "0",
     "a measured steady refit to print the prediction against (0: none)",
     OFF(measured_s), NULL, NULL},
    {"rtt-ms", WST_CONFIG_DOUBLE, "2.75", "one control round trip, ms",
     OFF(rtt_ms), NULL, NULL},
    {"round-trips", WST_CONFIG_UINT, "2",
     "control round trips per refit on the critical path (begin, commit)",
     OFF(round_trips), NULL, NULL},
    {"commit-ms", WST_CONFIG_DOUBLE, "1.5",
     "last layer in to commit acknowledged, ms", OFF(commit_ms), NULL, NULL},
    {"agent-cpu-us", WST_CONFIG_DOUBLE, "22",
     "an agent's CPU per sender and layer per refit, microseconds: its "
     "progress thread's messages (0: not counted; --inputs-csv of a "
     "wstream-demo --csv run derives it)",
     OFF(agent_cpu_us), NULL, NULL},
    {"sender-cpu-us", WST_CONFIG_DOUBLE, "24",
     "a sender's CPU per receiver and layer per refit, microseconds (0: not "
     "counted; --inputs-csv of a wstream-demo --csv run derives it)",
     OFF(sender_cpu_us), NULL, NULL},
    {"host-cores", WST_CONFIG_DOUBLE, "0",
     "cores every agent and sender shares, as on one machine running a "
     "whole cluster (0: each process has its own)",
     OFF(host_cores), NULL, NULL},
    {"senders-per-receiver", WST_CONFIG_UINT, "0",
     "trainer GPUs each inference GPU receives from (0: all of them, as "
     "FSDP shards give)",
     OFF(senders_per_receiver), NULL, NULL},
    {"bench-csv", WST_CONFIG_STRING, "",
     "wstream-bench's output (--csv): wstream efficiency, control and "
     "commit times",
     OFF(bench_csv), NULL, NULL},
    {"gpu-summary", WST_CONFIG_STRING, "",
     "tests/gpu/run.sh's summary.txt (or kernels.txt): repack, digest and "
     "pinned copy rates",
     OFF(gpu_summary), NULL, NULL},
    {"inputs-csv", WST_CONFIG_STRING, "",
     "a CSV (header and rows; the last row is taken) whose columns named "
     "as these flags, dashes as underscores, set them (e.g. "
     "plan_items,plan_us_per_item); wstream-demo --csv's columns too",
     OFF(inputs_csv), NULL, NULL},
    {"csv", WST_CONFIG_BOOL, "n", "also print the parts as CSV", OFF(csv), NULL,
     NULL},
    WST_CONFIG_END,
};

/* Where a default figure comes from (NOTES.md sections), by setting. */
static const struct {
    const char *name, *why;
} default_why[] = {
    {"wire-efficiency", "published: Mooncake ~94% of line rate GPU to GPU "
                        "(ANCHORS.md; no RDMA NIC here)"},
    {"wstream-efficiency", "NOTES.md 2026-12-02 line rate: 16-core H200 "
                           "host, tcp, 1 lane, 3.32 vs perftest 5.03 GB/s "
                           "at 256 MiB"},
    {"copy-gbps", "NOTES.md GPU II: pinned copies 8 MiB chunks, H200"},
    {"repack-gbps", "NOTES.md GPU I: trtllm-bf16 DeepSeek-V3 layer ep=32, "
                    "705 MB in 0.354 ms, H200"},
    {"digest-gbps", "NOTES.md GPU I: GPU digest as 8k runs of 256 KiB, "
                    "H200"},
    {"plan-us-per-item", "NOTES.md test_plan_moe: DeepSeek-V3 ep 5 of 32, "
                         "54,812 items in 40-94 ms"},
    {"rtt-ms", "NOTES.md Two GPUs: 5.5 ms of control round trips in a "
               "refit over TCP, H200 x2"},
    {"commit-ms", "NOTES.md line rate: commit tail 1.2-1.7 ms, H200 host"},
    {"agent-cpu-us", "NOTES.md 2026-12-02 scale test 64 -> 16 over tcp, "
                     "this VM: agents' CPU per refit / pairs / layers"},
    {"sender-cpu-us", "NOTES.md 2026-12-02 scale test 64 -> 16 over tcp, "
                      "this VM: senders' CPU per refit / pairs / layers"},
    {"nvlink-gbps", "NVLink 4 (H100/H200): 450 GB/s each way, not "
                    "measured here"},
};

struct model_run {
    struct model_settings set;
    char source[sizeof(model_config) / sizeof(model_config[0])][512];
    struct wst_rm_arch arch;
    struct wst_rm_model model;
    uint64_t index_tensors, index_bytes;
    int have_index;
};

static int entry_index(const char *name)
{
    for (int i = 0; model_config[i].name != NULL; i++)
        if (strcmp(model_config[i].name, name) == 0)
            return i;
    return -1;
}

/* "--name" or "--name=..." before any "--". */
static int on_command_line(int argc, char **argv, const char *name)
{
    size_t n = strlen(name);

    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--") == 0)
            return 0;
        if (strncmp(argv[i], "--", 2) == 0 &&
            strncmp(argv[i] + 2, name, n) == 0 &&
            (argv[i][2 + n] == '\0' || argv[i][2 + n] == '='))
            return 1;
    }
    return 0;
}

static void env_name(const char *name, char *out, size_t len)
{
    size_t i;

    snprintf(out, len, "WST_");
    for (i = 0; name[i] != '\0' && i + 5 < len; i++)
        out[4 + i] = name[i] == '-' ? '_' : (char)(name[i] & ~0x20);
    out[4 + i] = '\0';
}

static void sources_init(struct model_run *r, int argc, char **argv)
{
    char env[96];

    for (int i = 0; model_config[i].name != NULL; i++) {
        const char *name = model_config[i].name;
        env_name(name, env, sizeof(env));
        if (on_command_line(argc, argv, name))
            snprintf(r->source[i], sizeof(r->source[i]), "flag");
        else if (getenv(env) != NULL)
            snprintf(r->source[i], sizeof(r->source[i]), "environment %s", env);
        else
            snprintf(r->source[i], sizeof(r->source[i]), "default");
        for (size_t k = 0; k < sizeof(default_why) / sizeof(default_why[0]);
             k++)
            if (strcmp(r->source[i], "default") == 0 &&
                strcmp(default_why[k].name, name) == 0)
                snprintf(r->source[i], sizeof(r->source[i]), "default (%s)",
                         default_why[k].why);
    }
}

/* Sets 'name' from a file unless a flag set it; -1 on a bad value. */
static int from_file(struct model_run *r, int argc, char **argv,
                     const char *name, const char *value, const char *where)
{
    int i = entry_index(name);
    char err[256];

    if (i < 0 || on_command_line(argc, argv, name))
        return 0;
    if (wst_config_set(model_config, &r->set, name, value, err, sizeof(err)) !=
        WST_OK) {
        fprintf(stderr, "wstream-model: %s: %s\n", where, err);
        return -1;
    }
    snprintf(r->source[i], sizeof(r->source[i]), "%s", where);
    return 0;
}

static int from_file_double(struct model_run *r, int argc, char **argv,
                            const char *name, double v, const char *where)
{
    char text[64];

    snprintf(text, sizeof(text), "%.9g", v);
    return from_file(r, argc, argv, name, text, where);
}

/* wstream-bench's keys: ratio_footprint (else ratio) is the wstream
 * efficiency; outside_s (begin handshake + commit ack: two round trips)
 * gives the round trip; commit_tail_s the commit. */
static int read_bench(struct model_run *r, int argc, char **argv)
{
    struct wst_rm_pairs *p = calloc(1, sizeof(*p));
    char err[512], where[1200];
    const char *ratio, *v;
    int rc = -1;

    if (p == NULL)
        return -1;
    if (wst_rm_pairs_read(r->set.bench_csv, p, err, sizeof(err)) != WST_OK) {
        fprintf(stderr, "wstream-model: --bench-csv: %s\n", err);
        goto out_free;
    }
    ratio = wst_rm_pairs_get(p, "ratio_footprint");
    if (ratio == NULL || atof(ratio) <= 0)
        ratio = wst_rm_pairs_get(p, "ratio");
    snprintf(where, sizeof(where), "%s (wstream-bench %s)", r->set.bench_csv,
             ratio == wst_rm_pairs_get(p, "ratio_footprint") ? "ratio_footprint"
                                                             : "ratio");
    if (ratio != NULL && atof(ratio) > 0 &&
        from_file(r, argc, argv, "wstream-efficiency", ratio, where) != 0)
        goto out_free;
    v = wst_rm_pairs_get(p, "perftest_footprint_gbps");
    if (v == NULL || atof(v) <= 0)
        v = wst_rm_pairs_get(p, "perftest_gbps");
    if (r->set.link_from_bench) {
        if (v == NULL || atof(v) <= 0) {
            fprintf(stderr,
                    "wstream-model: --link-from-bench: %s has no perftest "
                    "rate\n",
                    r->set.bench_csv);
            goto out_free;
        }
        snprintf(where, sizeof(where), "%s (perftest GB/s x 8)",
                 r->set.bench_csv);
        if (from_file_double(r, argc, argv, "nic-gbps", atof(v) * 8, where) !=
                0 ||
            from_file(r, argc, argv, "wire-efficiency", "1",
                      "--link-from-bench (the link is perftest's rate)") != 0)
            goto out_free;
    }
    v = wst_rm_pairs_get(p, "outside_s");
    snprintf(where, sizeof(where), "%s (wstream-bench outside_s / 2)",
             r->set.bench_csv);
    if (v != NULL && from_file_double(r, argc, argv, "rtt-ms",
                                      atof(v) * 1e3 / 2, where) != 0)
        goto out_free;
    v = wst_rm_pairs_get(p, "commit_tail_s");
    snprintf(where, sizeof(where), "%s (wstream-bench commit_tail_s)",
             r->set.bench_csv);
    if (v != NULL &&
        from_file_double(r, argc, argv, "commit-ms", atof(v) * 1e3, where) != 0)
        goto out_free;
    rc = 0;
out_free:
    free(p);
    return rc;
}

static int read_gpu(struct model_run *r, int argc, char **argv)
{
    struct wst_rm_gpu_table g;
    char err[512], where[1200];

    if (wst_rm_gpu_table_read(r->set.gpu_summary, &g, err, sizeof(err)) !=
        WST_OK) {
        fprintf(stderr, "wstream-model: --gpu-summary: %s\n", err);
        return -1;
    }
    snprintf(where, sizeof(where), "%s (\"%s\")", r->set.gpu_summary,
             g.repack_row);
    if (g.repack_gbps > 0 && from_file_double(r, argc, argv, "repack-gbps",
                                              g.repack_gbps, where) != 0)
        return -1;
    snprintf(where, sizeof(where), "%s (\"%s\")", r->set.gpu_summary,
             g.digest_row);
    if (g.digest_gbps > 0 && from_file_double(r, argc, argv, "digest-gbps",
                                              g.digest_gbps, where) != 0)
        return -1;
    snprintf(where, sizeof(where), "%s (pinned copies, 8 MiB chunks)",
             r->set.gpu_summary);
    if (g.copy_gbps > 0 &&
        from_file_double(r, argc, argv, "copy-gbps", g.copy_gbps, where) != 0)
        return -1;
    return 0;
}

/* wstream-demo --csv's columns (the scale test, issue 21 item 1) that are
 * inputs under other names. */
static const struct {
    const char *column, *input;
} column_alias[] = {
    {"senders", "trainer-gpus"},      {"receivers", "inference-gpus"},
    {"engine_tp", "inference-tp"},    {"engine_ep", "inference-ep"},
    {"trainer_tp", "trainer-tp"},     {"plan_ms_max", "plan-ms"},
    {"steady_refit_s", "measured-s"}, {"preset", "model"},
};

/* The input a column sets, in 'name'; 0 when none. A trainer_tp of 0 (the
 * demo's FSDP) is tp 1; a preset this tool does not know is left out. */
static int column_input(const char *column, const char **value, char *name,
                        size_t len)
{
    struct wst_rm_arch a;
    char err[256];

    snprintf(name, len, "%s", column);
    for (size_t k = 0; k < sizeof(column_alias) / sizeof(column_alias[0]); k++)
        if (strcmp(column, column_alias[k].column) == 0)
            snprintf(name, len, "%s", column_alias[k].input);
    for (char *c = name; *c != '\0'; c++)
        if (*c == '_')
            *c = '-';
    if (entry_index(name) < 0 || strstr(name, "-csv") != NULL ||
        strcmp(name, "gpu-summary") == 0)
        return 0;
    if (strcmp(name, "trainer-tp") == 0 && strcmp(*value, "0") == 0)
        *value = "1";
    if (strcmp(name, "model") == 0 &&
        wst_rm_arch_preset(*value, 0, &a, err, sizeof(err)) != WST_OK) {
        printf("(--inputs-csv: preset \"%s\" is not one of this tool's; the "
               "model's shape is --model's)\n",
               *value);
        return 0;
    }
    return 1;
}

/* A wstream-demo --csv row's agents' CPU per refit, per agent, sender and
 * layer: the agent-cpu-us it measured. */
static int agent_cpu_from_demo(struct model_run *r, int argc, char **argv,
                               const struct wst_rm_pairs *p)
{
    const char *keys[] = {"agent_cpu_s_per_refit", "receivers", "senders",
                          "layers"};
    double v[4];

    for (int k = 0; k < 4; k++) {
        const char *text = wst_rm_pairs_get(p, keys[k]);
        char *end;
        if (text == NULL)
            return 0;
        v[k] = strtod(text, &end);
        if (end == text || !(v[k] > 0))
            return 0;
    }
    if (from_file_double(r, argc, argv, "agent-cpu-us",
                         v[0] / v[1] / v[2] / v[3] * 1e6,
                         "--inputs-csv: agent_cpu_s_per_refit / receivers / "
                         "senders / layers") != 0)
        return -1;
    const char *text = wst_rm_pairs_get(p, "sender_cpu_s_per_refit");
    double sv = text != NULL ? strtod(text, NULL) : 0;
    if (!(sv > 0))
        return 0;
    return from_file_double(r, argc, argv, "sender-cpu-us",
                            sv / v[2] / v[1] / v[3] * 1e6,
                            "--inputs-csv: sender_cpu_s_per_refit / senders / "
                            "receivers / layers");
}

/* Any column named as a setting (underscores for dashes). */
static int read_inputs(struct model_run *r, int argc, char **argv)
{
    struct wst_rm_pairs *p = calloc(1, sizeof(*p));
    char err[512], name[64];
    int rc = -1, used = 0;

    if (p == NULL)
        return -1;
    if (wst_rm_pairs_read(r->set.inputs_csv, p, err, sizeof(err)) != WST_OK) {
        fprintf(stderr, "wstream-model: --inputs-csv: %s\n", err);
        goto out_free;
    }
    for (size_t i = 0; i < p->n; i++) {
        const char *value = p->kv[i].value;
        if (!column_input(p->kv[i].key, &value, name, sizeof(name)))
            continue;
        if (from_file(r, argc, argv, name, value, r->set.inputs_csv) != 0)
            goto out_free;
        used++;
    }
    if (used == 0) {
        fprintf(stderr,
                "wstream-model: --inputs-csv %s: no column is named as an "
                "input\n",
                r->set.inputs_csv);
        goto out_free;
    }
    if (agent_cpu_from_demo(r, argc, argv, p) != 0)
        goto out_free;
    rc = 0;
out_free:
    free(p);
    return rc;
}

/* ---- printing ------------------------------------------------------------ */

static void print_inputs(const struct model_run *r)
{
    printf("inputs (value, where it came from):\n");
    printf("| input | value | source |\n|---|---|---|\n");
    for (int i = 0; model_config[i].name != NULL; i++) {
        char value[512];
        FILE *f = fmemopen(value, sizeof(value), "w");
        struct wst_config_entry one[2] = {model_config[i], WST_CONFIG_END};
        if (f == NULL)
            continue;
        wst_config_print(one, &r->set, f);
        fclose(f);
        value[strcspn(value, "\n")] = '\0';
        printf("| %s | %s | %s |\n", model_config[i].name,
               strstr(value, " = ") ? strstr(value, " = ") + 3 : value,
               r->source[i]);
    }
    printf("\n");
}

static double gb(uint64_t b)
{
    return (double)b / 1e9;
}

/* "65.50 GB", "46.16 MB": small models stay readable. */
static const char *size_text(uint64_t b, char *buf, size_t len)
{
    if (b >= 1000000000ull)
        snprintf(buf, len, "%.3f GB", (double)b / 1e9);
    else
        snprintf(buf, len, "%.3f MB", (double)b / 1e6);
    return buf;
}

static void print_model(const struct model_run *r)
{
    uint64_t tensors, bytes = wst_rm_model_bytes(&r->model, &tensors);
    const struct wst_rm_arch *a = &r->arch;

    printf("model %s: %llu layers, %llu tensors, %.2f GB in %s (hidden "
           "%llu, %llu experts of %llu, %s attention)\n",
           a->name, (unsigned long long)a->n_layers,
           (unsigned long long)tensors, gb(bytes), dtype_choices[r->set.dtype],
           (unsigned long long)a->hidden, (unsigned long long)a->n_experts,
           (unsigned long long)a->moe_inter,
           a->dense_mib ? "no" : (a->q_lora_rank ? "MLA" : "GQA"));
    if (r->have_index)
        printf("index %s: %llu tensors, total_size %.2f GB (the model above: "
               "%llu tensors, %.2f GB)\n",
               r->set.index_json, (unsigned long long)r->index_tensors,
               gb(r->index_bytes), (unsigned long long)tensors, gb(bytes));
}

static void print_prediction(const struct model_run *r,
                             const struct wst_rm_inputs *in,
                             const struct wst_rm_prediction *p)
{
    const struct wst_rm_gpu_bytes *g = &p->gpu;
    double ms = 1e3;

    char t[4][32];

    printf("\nbytes into each inference GPU (stage %llu of %llu, the "
           "fullest): %s = replicated %s + TP-sharded %s + experts %s "
           "(split %llu ways); %llu tensor pieces\n",
           (unsigned long long)p->worst_stage,
           (unsigned long long)in->inference.pp,
           size_text(g->total, t[0], sizeof(t[0])),
           size_text(g->replicated, t[1], sizeof(t[1])),
           size_text(g->sharded, t[2], sizeof(t[2])),
           size_text(g->experts, t[3], sizeof(t[3])),
           (unsigned long long)(in->inference.ep ? in->inference.ep
                                                 : in->inference.tp),
           (unsigned long long)g->tensors);
    if (p->bytes_given)
        printf("(the total is --live-bytes, measured: each GPU takes an even "
               "share; the breakdown above is the model's)\n");
    printf("all inference GPUs (%llu): %s in; each trainer GPU (%llu) "
           "sends %s\n",
           (unsigned long long)p->inference_gpus,
           size_text(p->total_in, t[0], sizeof(t[0])),
           (unsigned long long)p->trainer_gpus,
           size_text(p->per_sender, t[1], sizeof(t[1])));
    printf("\n| part | ms | how |\n|---|---|---|\n");
    printf("| receiving NICs | %.1f | %s at %.2f GB/s (line %.2f x "
           "wire %.3f x wstream %.3f%s) |\n",
           p->recv_s * ms,
           size_text((uint64_t)((double)g->total * (1 - in->local_fraction)),
                     t[0], sizeof(t[0])),
           p->rate_in_gbps, p->line_in_gbps, in->wire_efficiency,
           in->wstream_efficiency,
           in->bounce ? ", capped by pinned copies" : "");
    printf(
        "| sending NICs | %.1f | %s at %.2f GB/s |\n", p->send_s * ms,
        size_text((uint64_t)((double)p->per_sender * (1 - in->local_fraction)),
                  t[0], sizeof(t[0])),
        p->rate_out_gbps);
    if (in->local_fraction > 0)
        printf("| NVLink share | %.1f | %.0f%% of a GPU's bytes at %.0f GB/s "
               "|\n",
               p->nvlink_s * ms, in->local_fraction * 100, in->nvlink_gbps);
    printf("| transfer (the slowest of those) | %.1f | floor at line rate "
           "%.1f ms |\n",
           p->transfer_s * ms, p->floor_s * ms);
    printf("| control round trips | %.1f | %llu x %.3f ms |\n",
           p->control_s * ms, (unsigned long long)in->round_trips,
           in->rtt_s * ms);
    printf("| agent CPU (overlaps the transfer) | %.1f | %llu senders x %llu "
           "layers x %.1f us |\n",
           p->agent_cpu_s * ms, (unsigned long long)p->senders_in,
           (unsigned long long)p->stage_layers, in->agent_cpu_us);
    printf("| sender CPU (overlaps the transfer) | %.1f | %.1f receivers x "
           "%llu layers x %.1f us |\n",
           p->sender_cpu_s * ms, p->receivers_out,
           (unsigned long long)p->stage_layers, in->sender_cpu_us);
    if (in->host_cores > 0)
        printf("| everyone's CPU on %g shared cores | %.1f | (%llu agents + "
               "%llu senders) over the cores |\n",
               in->host_cores, p->shared_cpu_s * ms,
               (unsigned long long)p->inference_gpus,
               (unsigned long long)p->trainer_gpus);
    printf("| finalize/repack not hidden | %.2f | last layer: %s of "
           "experts repacked at %g GB/s + %s checked at %g GB/s (0: hidden) "
           "|\n",
           p->tail_s * ms, size_text(g->last_expert, t[0], sizeof(t[0])),
           in->repack_gbps, size_text(g->last_layer, t[1], sizeof(t[1])),
           in->digest_gbps);
    printf("| commit | %.2f | measured |\n", p->commit_s * ms);
    printf(
        "| **steady refit** | **%.1f** | plans cached; control + max(transfer, "
        "CPU) + tail + commit |\n",
        p->steady_s * ms);
    if (in->plan_s > 0)
        printf("| planning (first refit only) | %.1f | measured |\n",
               p->plan_s * ms);
    else
        printf("| planning (first refit only) | %.1f | %llu items%s x %.2f "
               "us |\n",
               p->plan_s * ms, (unsigned long long)p->plan_items,
               p->plan_items_estimated ? " (estimated)" : "",
               in->plan_us_per_item);
    printf("| first refit | %.1f | steady + planning (connections not "
           "counted) |\n",
           p->first_s * ms);
    if (r->set.measured_s > 0)
        printf("| measured steady refit | %.1f | predicted / measured %.2f "
               "|\n",
               r->set.measured_s * ms, p->steady_s / r->set.measured_s);
    printf("\n");
    if (r->set.csv) {
        printf("csv,model,dtype,inference_gpus,trainer_gpus,gpu_bytes,"
               "replicated_bytes,sharded_bytes,expert_bytes,per_sender_bytes,"
               "recv_s,send_s,transfer_s,floor_s,control_s,tail_s,commit_s,"
               "steady_s,plan_items,plan_s,first_s\n");
        printf("csv,%s,%s,%llu,%llu,%llu,%llu,%llu,%llu,%llu,%.6f,%.6f,%.6f,"
               "%.6f,%.6f,%.6f,%.6f,%.6f,%llu,%.6f,%.6f\n\n",
               r->arch.name, dtype_choices[r->set.dtype],
               (unsigned long long)p->inference_gpus,
               (unsigned long long)p->trainer_gpus,
               (unsigned long long)g->total, (unsigned long long)g->replicated,
               (unsigned long long)g->sharded, (unsigned long long)g->experts,
               (unsigned long long)p->per_sender, p->recv_s, p->send_s,
               p->transfer_s, p->floor_s, p->control_s, p->tail_s, p->commit_s,
               p->steady_s, (unsigned long long)p->plan_items, p->plan_s,
               p->first_s);
    }
    printf("wstream-model: model=%s dtype=%s inference_gpus=%llu "
           "trainer_gpus=%llu gpu_bytes=%llu transfer_s=%.6f floor_s=%.6f "
           "steady_s=%.6f first_s=%.6f",
           r->arch.name, dtype_choices[r->set.dtype],
           (unsigned long long)p->inference_gpus,
           (unsigned long long)p->trainer_gpus, (unsigned long long)g->total,
           p->transfer_s, p->floor_s, p->steady_s, p->first_s);
    if (r->set.measured_s > 0)
        printf(" measured_s=%.6f ratio=%.3f", r->set.measured_s,
               p->steady_s / r->set.measured_s);
    printf("\n");
}

/* ---- set-up -------------------------------------------------------------- */

/* dp 0: GPUs / (tp x pp), or 1 without a GPU count. */
static uint64_t derive_dp(uint64_t gpus, uint64_t tp, uint64_t pp, uint64_t dp)
{
    if (dp != 0 || tp == 0 || pp == 0)
        return dp;
    return gpus != 0 && gpus % (tp * pp) == 0 ? gpus / (tp * pp) : 1;
}

static int build_model(struct model_run *r)
{
    char err[512];
    wst_status_t st;

    if (r->set.config_json[0] != '\0') {
        st = wst_rm_config_read(r->set.config_json, &r->arch, err, sizeof(err));
        if (st == WST_OK && r->set.layers != 0)
            r->arch.n_layers = r->set.layers;
    } else {
        st = wst_rm_arch_preset(r->set.model, r->set.layers, &r->arch, err,
                                sizeof(err));
    }
    if (st == WST_OK && r->set.index_json[0] != '\0') {
        st = wst_rm_index_read(r->set.index_json, &r->index_tensors,
                               &r->index_bytes, err, sizeof(err));
        r->have_index = st == WST_OK;
    }
    if (st == WST_OK)
        st = wst_rm_model_build(&r->arch, (enum wst_rm_dtype)r->set.dtype,
                                &r->model, err, sizeof(err));
    if (st != WST_OK) {
        fprintf(stderr, "wstream-model: %s\n", err);
        return st == WST_ERR_INVALID ? 2 : 1;
    }
    return 0;
}

static void fill_inputs(const struct model_settings *s,
                        struct wst_rm_inputs *in)
{
    memset(in, 0, sizeof(*in));
    in->trainer =
        (struct wst_rm_layout){s->trainer_tp, s->trainer_ep, s->trainer_pp,
                               derive_dp(s->trainer_gpus, s->trainer_tp,
                                         s->trainer_pp, s->trainer_dp)};
    in->inference = (struct wst_rm_layout){
        s->inference_tp, s->inference_ep, s->inference_pp,
        derive_dp(s->inference_gpus, s->inference_tp, s->inference_pp,
                  s->inference_dp)};
    in->trainer_gpus = s->trainer_gpus;
    in->inference_gpus = s->inference_gpus;
    in->nic_gbit = s->nic_gbps;
    in->trainer_nics_per_gpu = s->trainer_nics_per_gpu;
    in->inference_nics_per_gpu = s->inference_nics_per_gpu;
    in->wire_efficiency = s->wire_efficiency;
    in->wstream_efficiency = s->wstream_efficiency;
    in->bounce = s->bounce;
    in->copy_gbps = s->copy_gbps;
    in->nvlink_gbps = s->nvlink ? s->nvlink_gbps : 0;
    in->local_fraction = s->local_fraction;
    in->repack_gbps = s->repack_gbps;
    in->digest_gbps = s->digest_gbps;
    in->plan_us_per_item = s->plan_us_per_item;
    in->plan_items = s->plan_items;
    in->plan_s = s->plan_ms / 1e3;
    in->live_bytes = s->live_bytes;
    in->rtt_s = s->rtt_ms / 1e3;
    in->round_trips = s->round_trips;
    in->commit_s = s->commit_ms / 1e3;
    in->agent_cpu_us = s->agent_cpu_us;
    in->sender_cpu_us = s->sender_cpu_us;
    in->host_cores = s->host_cores;
    in->senders_per_receiver = s->senders_per_receiver;
}

int main(int argc, char **argv)
{
    static struct model_run r;
    struct wst_rm_inputs in;
    struct wst_rm_prediction p;
    char err[512];
    int rc;

    wst_config_cli(model_config, &r.set, argc, argv, "wstream-model",
                   "wstream-model [options]\n\n"
                   "Predicts a refit's time on a cluster from a model's "
                   "shape, both sides'\nlayouts and measured efficiencies; "
                   "prints every input and where it came\nfrom (flag > file "
                   "> environment > default), then each part.\n\n"
                   "exit codes: 0 a prediction printed; 1 a file could not "
                   "be read;\n  2 bad usage (also: inputs that make no "
                   "prediction)",
                   &rc);
    if (rc >= 0)
        goto out_release;
    sources_init(&r, argc, argv);
    rc = 1;
    if ((r.set.bench_csv[0] != '\0' && read_bench(&r, argc, argv) != 0) ||
        (r.set.gpu_summary[0] != '\0' && read_gpu(&r, argc, argv) != 0) ||
        (r.set.inputs_csv[0] != '\0' && read_inputs(&r, argc, argv) != 0))
        goto out_release;
    if (r.set.link_from_bench && r.set.bench_csv[0] == '\0') {
        fprintf(stderr, "wstream-model: --link-from-bench needs --bench-csv\n");
        rc = 2;
        goto out_release;
    }
    rc = build_model(&r);
    if (rc != 0)
        goto out_release;
    print_inputs(&r);
    print_model(&r);
    fill_inputs(&r.set, &in);
    if (wst_rm_predict(&r.model, &in, &p, err, sizeof(err)) != WST_OK) {
        fprintf(stderr, "wstream-model: %s\n", err);
        rc = 2;
        goto out_model;
    }
    print_prediction(&r, &in, &p);
    rc = 0;
out_model:
    wst_rm_model_release(&r.model);
out_release:
    wst_config_release(model_config, &r.set);
    return rc;
}
