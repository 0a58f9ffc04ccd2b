/* demo_main.c - wstream-demo: a verified multi-process refit on one machine.
 *
 * It plays both sides of a refit with real processes over real UCX:
 *  - the "engine" of each of K TP ranks is a POSIX shared-memory object this
 *    process creates and poisons; a wstream-agent process per rank maps it
 *    from its layout file and receives into it;
 *  - N sender processes (forked before any thread exists) own FSDP shards
 *    (dim-0 chunks, uneven and empty ones; flat shards for 1-D tensors) and
 *    push each version when told to through a pipe.
 * After every version it reads every agent's live bytes and checks them
 * against the data generator (tools/demo/model.h), which knows nothing of
 * the planner. Exit 0 only when every byte of every version verified.
 *
 * MoE presets (tiny-moe, qwen3-30b-a3b): trainer ranks own experts by EP
 * (dim-0 chunks over the senders), each agent holds E/receivers experts in
 * the layout of --loader, and a wstream-engine-standin process per agent
 * owns the live shm and speaks the engine socket. --placement round-robin
 * and --engine-expert-shard intermediate declare layouts the receiver must
 * refuse; --fault kill-sender:LAYER kills sender 0 mid-layer in the last
 * version, which must leave them failed closed, and --fault
 * engine-refuse:K has agent K's engine refuse the last version, which must
 * leave every agent on the version before (check_fail_closed).
 *
 * --device N puts every engine's live memory on GPU N (N,M,...: agent k
 * on the (k mod n)-th): each stand-in engine allocates it there and
 * exports it by CUDA IPC, its agent imports it from its layout file, and
 * this process imports it to copy it out and verify the copy, bit-exact as
 * for shm. --sender-device puts the trainer shards on GPUs the same way.
 *
 * Exit status: 0 every byte verified; 1 failed; 2 bad usage; a refusal or
 * failure a sender reported exits with its negated wst_status_t (19
 * non-linear placement, 20 expert sharding, 21 E % ep, 22 repack shape...).
 */
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "auth.h"
#include "clock.h"
#include "cluster.h"
#include "config.h"
#include "log.h"
#include "dump.h"
#include "model.h"
#include "receiver_config.h"
#include "sender_config.h"
#include "demo.h"

static const char *const loader_choices[] = {"trtllm-bf16", "checkpoint", NULL};
static const char *const placement_choices[] = {"linear", "round-robin", NULL};
static const char *const shard_choices[] = {"expert", "intermediate", NULL};

const char *const wst_demo_transport_names[] = {"auto", "tcp", "shm", NULL};

static const struct wst_config_entry demo_config[] = {
    {"preset", WST_CONFIG_STRING, "tiny-moe",
     "model preset: tiny-moe, tiny (dense), qwen3-30b-a3b (MoE), "
     "deepseek-v3-narrow (every tensor and expert, widths cut; use --loader "
     "checkpoint), dense:<MiB>",
     offsetof(struct demo_settings, preset), NULL, NULL},
    {"layers", WST_CONFIG_UINT, "0", "layer count (0: the preset's)",
     offsetof(struct demo_settings, layers), NULL, NULL},
    {"experts", WST_CONFIG_UINT, "0",
     "routed experts per MoE layer (0: the preset's; MoE presets only)",
     offsetof(struct demo_settings, experts), NULL, NULL},
    {"trainer-tp", WST_CONFIG_UINT, "0",
     "trainer layout: 0, FSDP (dim-0 shards over every sender); N, "
     "Megatron TP N (column/row-parallel splits, norms and router whole) "
     "with senders/N data-parallel replicas; experts by EP over every "
     "sender either way",
     offsetof(struct demo_settings, trainer_tp), NULL, NULL},
    WST_CONFIG_LIKE_ENTRY("heartbeat",
                          "seconds between heartbeats of agents and senders "
                          "(with --peer-timeout; 0: their default)",
                          offsetof(struct demo_settings, heartbeat),
                          &wst_recv_config[WST_RECV_CONFIG_HEARTBEAT]),
    WST_CONFIG_LIKE_ENTRY("peer-timeout",
                          "seconds of silence after which agents and senders "
                          "fail a peer (with --heartbeat; 0: their default)",
                          offsetof(struct demo_settings, peer_timeout),
                          &wst_recv_config[WST_RECV_CONFIG_PEER_TIMEOUT]),
    {"csv", WST_CONFIG_STRING, "",
     "append one row of this run's scale figures to this CSV file (a header "
     "first when it is empty; columns below)",
     offsetof(struct demo_settings, csv), NULL, NULL},
    {"senders", WST_CONFIG_UINT, "3",
     "sender processes (trainer ranks: FSDP shards, experts split over them)",
     offsetof(struct demo_settings, senders), NULL, NULL},
    {"receivers", WST_CONFIG_UINT, "2",
     "agent processes (engine TP ranks, experts split over them: EP)",
     offsetof(struct demo_settings, receivers), NULL, NULL},
    {"refits", WST_CONFIG_UINT, "3", "versions to push and verify",
     offsetof(struct demo_settings, refits), NULL, NULL},
    {"transport", WST_CONFIG_ENUM, "auto",
     "auto (UCX chooses), tcp, or shm (shared memory for data)",
     offsetof(struct demo_settings, transport), wst_demo_transport_names, NULL},
    WST_CONFIG_LIKE_ENTRY("mover", NULL, offsetof(struct demo_settings, mover),
                          &wst_send_config[WST_SEND_CONFIG_MOVER]),
    {"seed", WST_CONFIG_UINT, "1", "data generator seed",
     offsetof(struct demo_settings, seed), NULL, NULL},
    {"timeout", WST_CONFIG_DOUBLE, "60", "seconds allowed per refit",
     offsetof(struct demo_settings, timeout), NULL, NULL},
    {"log-level", WST_CONFIG_ENUM, "warn", "log level of agents and senders",
     offsetof(struct demo_settings, log_level), wst_log_level_names, NULL},
    {"workdir", WST_CONFIG_STRING, "",
     "folder for layout, port and status files (default: a new temp dir)",
     offsetof(struct demo_settings, workdir), NULL, NULL},
    {"loader", WST_CONFIG_ENUM, "trtllm-bf16",
     "engine's expert layout: trtllm-bf16 (FlashInfer TRTLLM BF16 blocks) or "
     "checkpoint",
     offsetof(struct demo_settings, loader), loader_choices, NULL},
    {"placement", WST_CONFIG_ENUM, "linear",
     "engine's expert placement: linear, or round-robin (refused)",
     offsetof(struct demo_settings, placement), placement_choices, NULL},
    {"engine-expert-shard", WST_CONFIG_ENUM, "expert",
     "engine splits experts by expert (EP), or inside each expert on the "
     "intermediate dim (refused)",
     offsetof(struct demo_settings, expert_shard), shard_choices, NULL},
    {"fault", WST_CONFIG_STRING, "",
     "kill-sender:LAYER: SIGKILL sender 0 as it streams LAYER in the last "
     "version (the agents must fail closed); engine-refuse:K: agent K's "
     "engine refuses the last version (every agent must keep the one "
     "before)",
     offsetof(struct demo_settings, fault), NULL, NULL},
    {"dump", WST_CONFIG_STRING, "",
     "after the last refit, write agent 0's live tensors and the global "
     "source tensors here (tests/tools/check_dump.py checks them)",
     offsetof(struct demo_settings, dump), NULL, NULL},
    WST_CONFIG_LIKE_ENTRY("lanes",
                          "data lanes of every agent and sender (UCX workers "
                          "with a progress thread each)",
                          offsetof(struct demo_settings, lanes),
                          &wst_recv_config[WST_RECV_CONFIG_LANES]),
    WST_CONFIG_LIKE_ENTRY("window",
                          "every sender's data bytes in flight (0: its "
                          "default, 32 MiB a lane, at least 64 MiB; 1 GiB "
                          "on the direct device path)",
                          offsetof(struct demo_settings, window),
                          &wst_send_config[WST_SEND_CONFIG_WINDOW]),
    WST_CONFIG_LIKE_ENTRY("staging-slots",
                          "MoE layers the agents stage at once",
                          offsetof(struct demo_settings, staging_slots),
                          &wst_recv_config[WST_RECV_CONFIG_STAGING_SLOTS]),
    {"engine", WST_CONFIG_BOOL, "yes",
     "run a stand-in engine process per agent that owns its live memory",
     offsetof(struct demo_settings, engine), NULL, NULL},
    {"engine-ready-check", WST_CONFIG_BOOL, "yes",
     "the stand-in engines check that nothing writes the live memory "
     "between BEGIN and READY by hashing it twice (no: for measuring "
     "wstream alone; a real engine pauses without reading its weights)",
     offsetof(struct demo_settings, engine_ready_check), NULL, NULL},
    {"device", WST_CONFIG_STRING, "-1",
     "GPU(s) for the engines' live memory, N or N,M,... (agent k on the "
     "(k mod n)-th): each stand-in engine allocates it there and its agent "
     "imports it by CUDA IPC (needs a CUDA build and a GPU); -1: host shm",
     offsetof(struct demo_settings, device), NULL, NULL},
    {"sender-device", WST_CONFIG_STRING, "-1",
     "GPU(s) for the senders' shards (trainer memory), N or N,M,... "
     "(sender r on the (r mod n)-th): each sender copies its shards there "
     "after every fill and pushes from device memory (needs a CUDA build "
     "and a GPU); -1: host memory",
     offsetof(struct demo_settings, sender_device), NULL, NULL},
    WST_CONFIG_LIKE_ENTRY("device-path",
                          "how senders move device shards: auto, direct (UCX "
                          "with CUDA), bounce (pinned host ring) or nccl",
                          offsetof(struct demo_settings, device_path),
                          &wst_send_config[WST_SEND_CONFIG_DEVICE_PATH]),
    WST_CONFIG_LIKE_ENTRY("auth-secret-file",
                          "the deployment's secret for agents and senders "
                          "(default: a fresh random one in the work folder)",
                          offsetof(struct demo_settings, auth_secret_file),
                          &wst_auth_config[WST_AUTH_CONFIG_SECRET_FILE]),
    {"insecure", WST_CONFIG_BOOL, "no",
     "no secret: agents run --insecure, senders have none",
     offsetof(struct demo_settings, insecure), NULL, NULL},
    WST_CONFIG_END,
};

/* --help's account of the --csv columns (NOTES.md has the same). */
#define CSV_HELP                                                               \
    "--csv columns (one row per run; times in seconds unless _ms):\n"          \
    "  preset layers experts tensors model_bytes: the model (experts per\n"    \
    "    MoE layer, 0 dense); live_bytes: bytes all agents receive\n"          \
    "  senders receivers trainer_tp (0 FSDP) engine_tp engine_ep (0 no\n"      \
    "    experts) transport refits\n"                                          \
    "  start_s: agents up and every sender registered; connect_s: the\n"       \
    "    slowest sender's connect (connections, manifests, plans)\n"           \
    "  plan_ms_median plan_ms_max: the agents' plan builds;\n"                 \
    "    manifest_ms_median manifest_ms_max: their manifest unpacking\n"       \
    "    (wall time); plan_cpu_ms_* manifest_cpu_ms_*: the same as the\n"      \
    "    planner thread's CPU time (no waits for a core)\n"                    \
    "  ctl_msgs_per_refit ctl_bytes_per_refit: control messages in and\n"      \
    "    out of all agents per steady refit, heartbeats included (payload\n"   \
    "    bytes; 0 with one refit)\n"                                           \
    "  agent_rss_start_mb agent_rss_mb agent_rss_max_mb, sender_...: mean\n"   \
    "    RssAnon per process before the connect and after the last\n"          \
    "    refit, and the largest after; agent_kb_per_sender and\n"              \
    "    sender_kb_per_agent: the growth divided by the peers\n"               \
    "  agent_cpu_s_per_refit sender_cpu_s_per_refit: CPU seconds (user +\n"    \
    "    system) of all agents, of all senders, per steady refit\n"            \
    "  agent_manifest_kb_per_sender: decoded manifests an agent holds per\n"   \
    "    sender, by its own account (status file manifest_bytes)\n"            \
    "  first_refit_s; steady_refit_s: median of the others; verified: 1\n"     \
    "    when every byte of every version verified"

/* The transport asked for must be the one UCX used: a "tcp" run must not
 * quietly move data over shared memory, nor "shm" over TCP. */
static int lanes_match(int transport, const char *lanes)
{
    int has_tcp = strstr(lanes, "tcp/") != NULL;
    int has_shm = strstr(lanes, "/memory") != NULL;

    if (transport == WST_TRANSPORT_TCP)
        return has_tcp && !has_shm;
    if (transport == WST_TRANSPORT_SHM)
        return has_shm && !has_tcp;
    return 1;
}

/* Pushes one version through every sender; fills 'first' with sender 0's
 * result and returns the refit's duration (the slowest sender), or -1. */
static double run_refit(struct demo *d, uint64_t version, double wait_s,
                        struct wst_sender_result *first)
{
    struct wst_cluster *c = &d->cluster;
    double seconds = 0;
    int ok = wst_cluster_push(c, version) == 0;

    for (uint32_t r = 0; r < c->p.n_senders; r++) {
        struct wst_sender_result res;
        if (wst_cluster_result(c, r, wait_s, &res) != 0) {
            fprintf(stderr,
                    "wstream-demo: sender %u died or gave no result in "
                    "%.0f s\n",
                    r, wait_s);
            ok = 0;
            continue;
        }
        if (res.status != WST_OK) {
            fprintf(stderr, "wstream-demo: sender %u, version %llu: %s: %s\n",
                    r, (unsigned long long)version,
                    wst_status_string((wst_status_t)res.status), res.error);
            if (ok && d->exit_status == 0 && res.status < -2 &&
                res.status > -126)
                d->exit_status = -res.status;
            ok = 0;
        }
        if (r == 0)
            *first = res;
        if (res.seconds > seconds)
            seconds = res.seconds;
    }
    return ok ? seconds : -1;
}

/* Agent 0's last refit, layer by layer: when each was received (every
 * sender's bytes verified), repacked and finalized, in ms from the
 * engine's begin acknowledgement. */
static void print_timeline(struct demo *d)
{
    struct wst_layer_times t[512];
    int n = wst_cluster_agent_timeline(&d->cluster, 0, t, 512);

    if (n <= 0)
        return;
    printf("timeline of agent 0, last refit (ms after begin was "
           "acknowledged):\n  layer  received  repacked (repack)  finalized "
           "(finalize)\n");
    for (int i = 0; i < n && i < 512; i++) {
        char rp[40] = "        -          ";
        if (t[i].repack_seconds > 0)
            snprintf(rp, sizeof(rp), "%9.2f (%6.2f)", t[i].repacked * 1e3,
                     t[i].repack_seconds * 1e3);
        printf("  %5d %9.2f %s %9.2f (%6.3f)%s\n", i, t[i].received * 1e3, rp,
               t[i].finalized * 1e3, t[i].finalize_seconds * 1e3,
               i == n - 1 ? "  global tensors" : "");
    }
}

/* After --fault: the agents are the ranks of one engine (one engine
 * group). Fail-closed holds when every one refused the version before
 * writing a byte and still serves the last committed one, every byte of it
 * (always so when an engine refused: nothing was written anywhere), or
 * when at least one failed closed (unusable, saying why, its engine told)
 * and every other one either did too or still serves the last committed
 * version intact: an engine with an unusable rank serves nothing, and no
 * two ranks ever serve different versions. (A sender killed between its GO
 * messages leaves some agents refused and others unusable: README, "Engine
 * groups".) Prints the verdict; 0 when fail-closed held. */
static int check_fail_closed(struct demo *d)
{
    uint64_t committed = d->set.refits - 1;
    uint32_t n_unusable = 0, n_serving = 0;

    for (uint32_t k = 0; k < d->set.receivers; k++) {
        struct wst_agent_status st = {0};
        char state[32] = "-", reason[600] = "";
        uint64_t deadline = wst_deadline_ns(d->set.timeout);
        while (wst_now_ns() < deadline &&
               (wst_cluster_agent_status(&d->cluster, k, &st) != 0 ||
                st.reason[0] == '\0'))
            usleep(20000);
        /* The engine hears it from the agent's engine thread, just after
         * the status file says so. */
        const char *want = st.usable ? "serving" : "unusable";
        while (d->set.engine && wst_now_ns() < deadline &&
               (wst_cluster_engine_state(&d->cluster, k, state, sizeof(state),
                                         reason, sizeof(reason)) != 0 ||
                strcmp(state, want) != 0))
            usleep(20000);
        int engine_ok = !d->set.engine || strcmp(state, want) == 0;
        if (!st.usable) {
            printf("agent %u: unusable, committed version %llu: %s\n", k,
                   (unsigned long long)st.committed_version, st.reason);
            n_unusable += engine_ok && st.committed_version == committed;
        } else {
            int intact =
                st.committed_version == committed &&
                (committed == 0 ||
                 wst_cluster_verify_agent(&d->cluster, k, committed) == 0);
            printf("agent %u: refused before writing, still serving version "
                   "%llu%s: %s\n",
                   k, (unsigned long long)st.committed_version,
                   intact ? " (every byte verified)" : " (NOT INTACT)",
                   st.reason);
            n_serving += engine_ok && intact;
        }
        if (d->set.engine)
            printf("agent %u's engine: %s%s%s\n", k, state,
                   reason[0] ? ": " : "", reason);
    }
    int held = n_serving == d->set.receivers ||
               (n_unusable >= 1 && n_unusable + n_serving == d->set.receivers &&
                !d->fault_refuse);
    printf("wstream-demo: fail-closed %s: %u agents unusable, %u still serving "
           "version %llu untouched\n",
           held ? "held" : "BROKEN", n_unusable, n_serving,
           (unsigned long long)committed);
    return held ? 0 : -1;
}

/* Which of agent 0's data lanes carried the last refit (its status). */
static void print_lanes(struct demo *d)
{
    struct wst_agent_status as = {0};
    char list[256] = "";
    size_t used = 0;
    unsigned carried = 0;

    if (wst_cluster_agent_status(&d->cluster, 0, &as) != 0 || as.lanes <= 1)
        return;
    for (uint32_t i = 0; i < as.lanes && i < WST_RECEIVER_LANES_MAX; i++) {
        carried += as.lane_bytes[i] > 0;
        int n = snprintf(list + used, sizeof(list) - used, "%s%.1f",
                         i ? " " : "", as.lane_bytes[i] / 1e6);
        if (n > 0 && (size_t)n < sizeof(list) - used)
            used += (size_t)n;
    }
    printf("wstream-demo: agent 0: %u data lanes, %u carried the last "
           "refit (MB: %s)\n",
           as.lanes, carried, list);
}

static int run(struct demo *d)
{
    struct wst_sender_result res = {0};
    uint64_t live = d->cluster.live_bytes;
    double *secs = calloc(d->set.refits, sizeof(*secs));
    int verified = 1;

    if (secs == NULL)
        return -1;
    for (uint64_t v = 1; v <= d->set.refits; v++) {
        int fault = (d->fault_kill || d->fault_refuse) && v == d->set.refits;
        /* With a rank killed, the survivors' pushes wait for it until their
         * deadline (a trainer rank may restart): do not wait for them. */
        double t = run_refit(d, v, fault ? 5.0 : d->set.timeout + 10, &res);
        if (fault) {
            if (d->fault_kill)
                printf("refit %llu/%llu: version %llu, sender 0 killed in "
                       "layer %u: %s\n",
                       (unsigned long long)v, (unsigned long long)d->set.refits,
                       (unsigned long long)v, d->kill_layer,
                       t > 0 ? "refit completed anyway" : "refit failed");
            else
                printf("refit %llu/%llu: version %llu, agent %u's engine "
                       "refused it: %s\n",
                       (unsigned long long)v, (unsigned long long)d->set.refits,
                       (unsigned long long)v, d->refuse_agent,
                       t > 0 ? "refit completed anyway" : "refit failed");
            check_fail_closed(d);
            free(secs);
            return -1;
        }
        int ok = t > 0 && wst_cluster_verify(&d->cluster, v) == 0;
        secs[v - 1] = t;
        if (ok && (v == 1 || v == d->set.refits))
            wst_demo_control_snapshot(d, v == 1 ? 0 : 1);
        if (ok && v == 1)
            wst_cluster_memory(&d->cluster, &d->mem_first);
        printf("refit %llu/%llu: version %llu, %.1f MB in %.3f s "
               "(%.2f GB/s), %s\n",
               (unsigned long long)v, (unsigned long long)d->set.refits,
               (unsigned long long)v, live / 1e6, t, t > 0 ? live / t / 1e9 : 0,
               ok ? "every byte verified" : "FAILED");
        fflush(stdout);
        if (!ok) {
            verified = 0;
            break;
        }
    }
    /* nccl moves data outside UCX: no lanes to check. */
    if (verified && strcmp(res.mover, "nccl") != 0 &&
        !lanes_match(d->set.transport, res.lanes)) {
        fprintf(stderr,
                "wstream-demo: transport %s asked, but UCX chose "
                "lanes %s\n",
                wst_demo_transport_names[d->set.transport], res.lanes);
        verified = 0;
    }
    if (verified && d->set.dump[0] != '\0') {
        char err[512];
        if (wst_dump_write(d->set.dump, &d->model, &d->cluster.agents[0].layout,
                           wst_cluster_agent_live(&d->cluster, 0), d->set.seed,
                           d->set.refits, err, sizeof(err)) != WST_OK) {
            fprintf(stderr, "wstream-demo: --dump: %s\n", err);
            verified = 0;
        } else {
            printf("wstream-demo: agent 0's live tensors and the source "
                   "tensors of version %llu are in %s\n",
                   (unsigned long long)d->set.refits, d->set.dump);
        }
    }
    if (verified)
        print_timeline(d);
    print_lanes(d);
    wst_cluster_memory(&d->cluster, &d->mem_end);
    if (wst_demo_report_scale(d, secs, &verified) != 0)
        verified = 0;
    qsort(secs, d->set.refits, sizeof(*secs), wst_demo_compare_double);
    double median = secs[(d->set.refits - 1) / 2];
    printf(
        "wstream-demo: %s, %zu tensors, %llu senders -> %llu receivers, "
        "%llu versions x %.1f MB, median %.3f s (%.2f GB/s), transport %s, "
        "mover %s, lanes %s: %s\n",
        d->model.preset, d->model.n_tensors, (unsigned long long)d->set.senders,
        (unsigned long long)d->set.receivers, (unsigned long long)d->set.refits,
        live / 1e6, median, median > 0 ? live / median / 1e9 : 0,
        wst_demo_transport_names[d->set.transport], res.mover, res.lanes,
        verified ? "every byte verified" : "NOT VERIFIED");
    free(secs);
    return verified ? 0 : -1;
}

static void teardown(struct demo *d)
{
    wst_cluster_stop(&d->cluster);
    if (d->own_workdir)
        wst_cluster_workdir_remove("wstream-demo", d->workdir);
    wst_model_release(&d->model);
}

/* --OPTION: GPU ordinals this build and machine have ("0", or "0,1":
 * rank i takes the (i mod n)-th), or -1 for host memory (*n_p = 0). Fails
 * here, before any process starts, with what is missing. */
static int parse_gpus(const char *option, const char *text, int *gpus,
                      uint32_t *n_p)
{
    const char *at = text;
    char why[320];

    *n_p = 0;
    if (strcmp(text, "-1") == 0)
        return 0;
    do {
        char *end = NULL;
        errno = 0;
        long v = strtol(at, &end, 10);
        if (end == at || (*end != '\0' && *end != ',') || errno != 0 || v < 0 ||
            v > INT_MAX || *n_p == WST_CLUSTER_MAX_GPUS) {
            fprintf(stderr,
                    "wstream-demo: --%s: bad value '%s': expected GPU "
                    "ordinals (N or N,M,...; at most %d), or -1 for host "
                    "memory\n",
                    option, text, WST_CLUSTER_MAX_GPUS);
            return -1;
        }
        gpus[(*n_p)++] = (int)v;
        at = *end == ',' ? end + 1 : end;
    } while (*at != '\0');
    for (uint32_t i = 0; i < *n_p; i++)
        if (wst_cluster_device_check(gpus[i], why, sizeof(why)) != 0) {
            fprintf(stderr,
                    "wstream-demo: --%s needs a CUDA build and a GPU: %s\n",
                    option, why);
            return -1;
        }
    return 0;
}

static int check_device(struct demo *d)
{
    if (parse_gpus("device", d->set.device, d->devices, &d->n_devices) != 0 ||
        parse_gpus("sender-device", d->set.sender_device, d->sender_devices,
                   &d->n_sender_devices) != 0)
        return -1;
    if (d->n_devices > 0 && !d->set.engine) {
        fprintf(stderr, "wstream-demo: --device needs the stand-in engines "
                        "(--engine yes): they own the device memory\n");
        return -1;
    }
    return 0;
}

/* --fault kill-sender:LAYER or engine-refuse:AGENT; 0 when it parses. */
static int parse_fault(struct demo *d)
{
    static const char *const kinds[] = {"kill-sender:", "engine-refuse:"};
    const char *f = d->set.fault;

    for (int k = 0; k < 2; k++) {
        size_t n = strlen(kinds[k]);
        char *end = NULL;
        if (strncmp(f, kinds[k], n) != 0 || f[n] < '0' || f[n] > '9')
            continue;
        unsigned long arg = strtoul(f + n, &end, 10);
        if (*end != '\0' || arg > 100000)
            break;
        if (k == 0) {
            d->fault_kill = 1;
            d->kill_layer = (uint32_t)arg;
            return 0;
        }
        if (arg >= d->set.receivers || !d->set.engine || d->set.refits < 2) {
            fprintf(stderr,
                    "wstream-demo: --fault %s needs an engine per agent, "
                    "agent %lu of %llu, and two refits or more\n",
                    f, arg, (unsigned long long)d->set.receivers);
            return -1;
        }
        d->fault_refuse = 1;
        d->refuse_agent = (uint32_t)arg;
        return 0;
    }
    fprintf(stderr,
            "wstream-demo: --fault %s: expected kill-sender:LAYER or "
            "engine-refuse:AGENT\n",
            f);
    return -1;
}

/* Checks what the table cannot express; 0 when the settings are usable. */
static int check_settings(struct demo *d)
{
    if (d->set.senders == 0 || d->set.senders > WST_CLUSTER_MAX_SENDERS ||
        d->set.receivers == 0 || d->set.receivers > WST_CLUSTER_MAX_RECEIVERS ||
        d->set.refits == 0 || d->set.refits > 100000) {
        fprintf(stderr,
                "wstream-demo: need 1..%d senders, 1..%d receivers and at "
                "least one refit\n",
                WST_CLUSTER_MAX_SENDERS, WST_CLUSTER_MAX_RECEIVERS);
        return -1;
    }
    if (d->set.experts > 65536 || d->set.trainer_tp > d->set.senders ||
        (d->set.trainer_tp != 0 && d->set.senders % d->set.trainer_tp != 0)) {
        fprintf(stderr, "wstream-demo: --experts takes 0..65536, --trainer-tp "
                        "0 or a divisor of --senders\n");
        return -1;
    }
    if (d->set.fault[0] != '\0' && parse_fault(d) != 0)
        return -1;
    if (d->set.staging_slots == 0 ||
        d->set.staging_slots > WST_RECV_STAGING_SLOTS_MAX) {
        fprintf(stderr, "wstream-demo: --staging-slots must be 1..%d\n",
                WST_RECV_STAGING_SLOTS_MAX);
        return -1;
    }
    return check_device(d);
}

static int prepare(struct demo *d, const char *agent_bin)
{
    char err[512], engine_bin[PATH_MAX + 32];

    if (wst_model_preset_experts(d->set.preset, (uint32_t)d->set.layers,
                                 (uint32_t)d->set.experts, &d->model, err,
                                 sizeof(err)) != WST_OK) {
        fprintf(stderr, "wstream-demo: %s\n", err);
        return -1;
    }
    /* The stand-in engine is installed beside the agent. */
    snprintf(engine_bin, sizeof(engine_bin), "%s", agent_bin);
    char *slash = strrchr(engine_bin, '/');
    snprintf(slash != NULL ? slash + 1 : engine_bin,
             sizeof(engine_bin) -
                 (size_t)(slash != NULL ? slash + 1 - engine_bin : 0),
             "wstream-engine-standin");
    if (wst_cluster_workdir("wstream-demo", d->set.workdir, d->workdir,
                            sizeof(d->workdir), &d->own_workdir) != 0)
        return -1;
    printf("wstream-demo: preset %s (%zu tensors, %.1f MB), %llu senders -> "
           "%llu agents, transport %s\n",
           d->model.preset, d->model.n_tensors,
           wst_model_bytes(&d->model) / 1e6, (unsigned long long)d->set.senders,
           (unsigned long long)d->set.receivers,
           wst_demo_transport_names[d->set.transport]);
    if (d->n_devices > 0)
        printf("wstream-demo: live memory on GPU %s, imported by the agents "
               "by CUDA IPC\n",
               d->set.device);
    if (d->n_sender_devices > 0)
        printf("wstream-demo: trainer shards on GPU %s, device path %s\n",
               d->set.sender_device,
               wst_send_device_path_names[d->set.device_path]);
    fflush(stdout);
    struct wst_cluster_params cp = {
        .model = &d->model,
        .n_senders = (uint32_t)d->set.senders,
        .n_receivers = (uint32_t)d->set.receivers,
        .trainer_tp = (uint32_t)d->set.trainer_tp,
        .heartbeat_s = d->set.heartbeat,
        .peer_timeout_s = d->set.peer_timeout,
        .transport = (enum wst_transport)d->set.transport,
        .mover = wst_send_mover_names[d->set.mover],
        .seed = d->set.seed,
        .timeout_s = d->set.timeout,
        .log_level = d->set.log_level,
        .agent_bin = agent_bin,
        .workdir = d->workdir,
        /* Asking for shm means data over shared memory (sender.h says
         * what that trades away on UCX 1.13). */
        .shm_data = d->set.transport == WST_TRANSPORT_SHM,
        .moe = &d->moe,
        .staging_slots = (uint32_t)d->set.staging_slots,
        .lanes = (uint32_t)d->set.lanes,
        .window_bytes = d->set.window,
        .engine_bin = d->set.engine ? engine_bin : NULL,
        .engine_no_ready_check = !d->set.engine_ready_check,
        .n_devices = d->n_devices,
        .n_sender_devices = d->n_sender_devices,
        .device_path = wst_send_device_path_names[d->set.device_path],
        .kill_sender = 0,
        .kill_layer = d->kill_layer,
        .kill_version = d->fault_kill ? d->set.refits : 0,
        .refuse_agent = d->refuse_agent,
        .refuse_version = d->fault_refuse ? d->set.refits : 0,
        .secret_file = d->set.auth_secret_file,
        .insecure = d->set.insecure,
    };
    memcpy(cp.devices, d->devices, sizeof(cp.devices));
    memcpy(cp.sender_devices, d->sender_devices, sizeof(cp.sender_devices));
    d->moe.loader = loader_choices[d->set.loader];
    d->moe.round_robin = d->set.placement == 1;
    d->moe.shard_inter = d->set.expert_shard == 1;
    double t0 = wst_now_s();
    if (wst_cluster_start(&d->cluster, &cp) != 0)
        return -1;
    d->start_s = wst_now_s() - t0;
    wst_cluster_memory(&d->cluster, &d->mem_start);
    /* Connections, manifests and plans before the first push, so that the
     * first refit is timed without them (a push would do them itself). */
    int st = 0;
    if (wst_cluster_connect(&d->cluster, d->set.timeout + 10, &d->connect_s,
                            &st) != 0) {
        /* a refusal of the plan exits as a push's would (run_refit) */
        if (st < -2 && st > -126)
            d->exit_status = -st;
        return -1;
    }
    printf("wstream-demo: %llu senders registered and %llu agents up in "
           "%.2f s; connected, manifests and plans exchanged in %.2f s\n",
           (unsigned long long)d->set.senders,
           (unsigned long long)d->set.receivers, d->start_s, d->connect_s);
    fflush(stdout);
    return 0;
}

int main(int argc, char **argv)
{
    struct demo d;
    char agent_bin[PATH_MAX];
    int rc;

    memset(&d, 0, sizeof(d));
    wst_config_cli(
        demo_config, &d.set, argc, argv, "wstream-demo",
        "wstream-demo [options]\n\n"
        "exit codes: 0 every byte verified; 1 failed; 2 bad usage;\n"
        "  otherwise the negated wst_status_t a sender reported\n"
        "  (19 non-linear placement, 20 expert sharding, ...)\n\n" CSV_HELP,
        &rc);
    if (rc >= 0)
        goto out_release;
    rc = 2;
    if (check_settings(&d) != 0 ||
        wst_cluster_agent_path(agent_bin, sizeof(agent_bin)) != 0)
        goto out_release;
    signal(SIGPIPE, SIG_IGN);
    rc = prepare(&d, agent_bin) == 0 && run(&d) == 0 ? 0 : 1;
    if (rc != 0 && d.exit_status != 0)
        rc = d.exit_status;
    teardown(&d);
out_release:
    wst_config_release(demo_config, &d.set);
    return rc;
}
