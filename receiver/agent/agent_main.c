/* agent_main.c - wstream-agent: the receiver library as a standalone daemon.
 *
 * Reads a layout file (layout_file.h), maps the engine's live regions from
 * the POSIX shared-memory objects the layout names, imports the engine's
 * GPU allocations by the CUDA IPC handles it names ("cuda_ipc": those
 * regions are then device memory, WST_MEM_CUDA), and, with
 * --private-memory only, allocates itself the regions in none of them
 * (region_import.h, region_memory.h); registers them once, and serves
 * refits until SIGTERM or SIGINT. Its state after every commit or failure goes
 * to
 * --status-file as one JSON object (status_file.h), so operators and tests
 * can see the committed version and whether the agent is usable. What a
 * restart must not forget -- the committed version, and that the agent is
 * unusable or was mid-refit -- goes to --state-file (agent_state.h), which
 * seeds the receiver at the next start.
 *
 * This file: the flags, start-up and shutdown, the engine hooks and the
 * signal loop.
 *
 * Exit codes (AGENT_USAGE below, also in --help): 0 after a clean shutdown
 * or --help; 2 bad usage (an unknown flag or bad value, on the command line
 * or in a WST_* variable, a missing --layout), as for every wstream
 * program; otherwise -status of the error that stopped start-up (see
 * include/wstream/status.h): 18 (WST_ERR_CONFIG) for a layout file or a
 * setting that parsed but cannot be served (no auth secret, a readable
 * secret file, a bad layout), 10 no CUDA device, 15 a file or shm object
 * that cannot be opened... A usage error is the caller's to fix before
 * anything ran; a start-up error may be the host's or the engine's.
 */
#include <wstream/receiver.h>

#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent.h"
#include "agent_state.h"
#include "auth.h"
#include "clock.h"
#include "codec.h"
#include "config.h"
#include "engine_socket.h"
#include "gpu_probe.h"
#include "layout_file.h"
#include "log.h"
#include "metrics.h"
#include "nic_choice.h"
#include "receiver_config.h"
#include "region_import.h"
#include "region_memory.h"
#include "status_file.h"
#include "worker.h"

/* Indexes are enum wst_log_format values. */
static const char *const format_choices[] = {"text", "json", NULL};

static const struct wst_config_entry agent_config[] = {
    {"layout", WST_CONFIG_STRING, "", "layout file (JSON) to serve",
     offsetof(struct agent_settings, layout), NULL, NULL},
    {"listen", WST_CONFIG_STRING, "0.0.0.0:7070",
     "address to listen on, host:port (port 0: any)",
     offsetof(struct agent_settings, listen), NULL, NULL},
    {"port-file", WST_CONFIG_STRING, "",
     "write the bound port here once listening",
     offsetof(struct agent_settings, port_file), NULL, NULL},
    {"status-file", WST_CONFIG_STRING, "",
     "write the agent state (JSON) here after every refit",
     offsetof(struct agent_settings, status_file), NULL, NULL},
    {"state-file", WST_CONFIG_STRING, "",
     "keep the committed version and whether the agent is usable here "
     "(JSON), so a restart refuses older versions and stays unusable after "
     "a failed or interrupted refit; on storage that survives a restart; "
     "empty: the --status-file path + .state, or nothing without one",
     offsetof(struct agent_settings, state_file), NULL, NULL},
    {"engine-socket", WST_CONFIG_STRING, "",
     "listen here (Unix socket) for the engine process; empty: no engine, "
     "hooks only log",
     offsetof(struct agent_settings, engine_socket), NULL, NULL},
    /* the receiver's settings, defined in its table (receiver_config.c) */
    WST_CONFIG_LIKE_ENTRY("timeout", NULL,
                          offsetof(struct agent_settings, timeout),
                          &wst_recv_config[WST_RECV_CONFIG_TIMEOUT]),
    WST_CONFIG_LIKE_ENTRY("heartbeat", NULL,
                          offsetof(struct agent_settings, heartbeat),
                          &wst_recv_config[WST_RECV_CONFIG_HEARTBEAT]),
    WST_CONFIG_LIKE_ENTRY("peer-timeout", NULL,
                          offsetof(struct agent_settings, peer_timeout),
                          &wst_recv_config[WST_RECV_CONFIG_PEER_TIMEOUT]),
    WST_CONFIG_LIKE_ENTRY("mover", NULL, offsetof(struct agent_settings, mover),
                          &wst_recv_config[WST_RECV_CONFIG_MOVER]),
    WST_CONFIG_LIKE_ENTRY("staging-slots", NULL,
                          offsetof(struct agent_settings, staging_slots),
                          &wst_recv_config[WST_RECV_CONFIG_STAGING_SLOTS]),
    WST_CONFIG_LIKE_ENTRY("verify", NULL,
                          offsetof(struct agent_settings, verify),
                          &wst_recv_config[WST_RECV_CONFIG_VERIFY]),
    WST_CONFIG_LIKE_ENTRY("verify-threads", NULL,
                          offsetof(struct agent_settings, verify_threads),
                          &wst_recv_config[WST_RECV_CONFIG_VERIFY_THREADS]),
    WST_CONFIG_LIKE_ENTRY("lanes", NULL, offsetof(struct agent_settings, lanes),
                          &wst_recv_config[WST_RECV_CONFIG_LANES]),
    WST_CONFIG_LIKE_ENTRY("device-ring-bytes", NULL,
                          offsetof(struct agent_settings, device_ring),
                          &wst_recv_config[WST_RECV_CONFIG_DEVICE_RING]),
    {"lane-devices", WST_CONFIG_STRING, "auto",
     "network devices for the data lanes, as UCX names them, "
     "comma-separated (mlx5_0:1,mlx5_1:1): lane i uses entry i mod n only; "
     "auto: the ACTIVE RDMA ports nearest the layout's GPU (as "
     "wstream-topology prints them), none for host memory; empty: UCX "
     "chooses",
     offsetof(struct agent_settings, lane_devices), NULL, NULL},
    WST_CONFIG_LIKE_ENTRY("log-level", NULL,
                          offsetof(struct agent_settings, log_level),
                          &wst_recv_config[WST_RECV_CONFIG_LOG_LEVEL]),
    WST_CONFIG_LIKE_ENTRY(
        "max-manifest-entries", NULL,
        offsetof(struct agent_settings, max_manifest_entries),
        &wst_recv_config[WST_RECV_CONFIG_MAX_MANIFEST_ENTRIES]),
    WST_CONFIG_LIKE_ENTRY("max-manifest-bytes", NULL,
                          offsetof(struct agent_settings, max_manifest_bytes),
                          &wst_recv_config[WST_RECV_CONFIG_MAX_MANIFEST_BYTES]),
    WST_CONFIG_LIKE_ENTRY("max-unranked-peers", NULL,
                          offsetof(struct agent_settings, max_unranked_peers),
                          &wst_recv_config[WST_RECV_CONFIG_MAX_UNRANKED]),
    {"log-format", WST_CONFIG_ENUM, "text",
     "text, or json: one object per line (ts, level, component, msg) for "
     "log collectors",
     offsetof(struct agent_settings, log_format), format_choices, NULL},
    {"metrics-listen", WST_CONFIG_STRING, "",
     "HOST:PORT for Prometheus /metrics, /healthz and /readyz (port 0: any); "
     "empty: no HTTP server",
     offsetof(struct agent_settings, metrics_listen), NULL, NULL},
    {"metrics-port-file", WST_CONFIG_STRING, "",
     "write the bound metrics port here once serving",
     offsetof(struct agent_settings, metrics_port_file), NULL, NULL},
    WST_CONFIG_LIKE_ENTRY("auth-secret-file", NULL,
                          offsetof(struct agent_settings, auth_secret_file),
                          &wst_auth_config[WST_AUTH_CONFIG_SECRET_FILE]),
    {"insecure", WST_CONFIG_BOOL, "no",
     "run without an auth secret: any process that reaches --listen is "
     "trusted (said in the log, metrics and /readyz)",
     offsetof(struct agent_settings, insecure), NULL, NULL},
    {"private-memory", WST_CONFIG_BOOL, "no",
     "serve regions in no shm, cuda_ipc or allocation from memory the agent "
     "allocates itself, which no engine can see (tests, benchmarks); no: "
     "refuse such a layout at start (exit 18)",
     offsetof(struct agent_settings, private_memory), NULL, NULL},
    WST_CONFIG_END,
};

/* --lane-devices: as given (the receiver checks it), or for "auto" the
 * ACTIVE RDMA ports nearest the GPU the layout's live memory is on
 * (nic_choice.h), written into buf[len], so that each of its NICs carries
 * lanes; "" (UCX chooses) for host memory, a GPU with no RDMA port near,
 * or UCX_NET_DEVICES set (which wins anyway). */
static const char *lane_devices(struct agent *a, char *buf, size_t len)
{
    char bus_id[32], why[256];
    uint32_t device;

    if (strcmp(a->set.lane_devices, "auto") != 0)
        return a->set.lane_devices;
    if (!wst_layout_cuda_device(&a->layout, &device) ||
        getenv("UCX_NET_DEVICES") != NULL)
        return "";
    if (wst_kernels_device_bus_id((int)device, bus_id, (int)sizeof(bus_id), why,
                                  (int)sizeof(why)) != WST_OK) {
        WST_WARN(&a->log, "--lane-devices auto: %s: UCX chooses", why);
        return "";
    }
    /* A sysfs it cannot read leaves UCX's choice, said in the log. */
    if (wst_nic_lane_devices(NULL, bus_id, &a->log, buf, len) != WST_OK)
        return "";
    return buf;
}

/* Daemon-mode engine hooks: with --engine-socket each event goes to the
 * engine process over the socket (engine_socket.h); without it the agent
 * only logs, and begin is acknowledged at once. The versions' labels come
 * from the receiver's state (receiver.h says when it holds which). */
static wst_status_t hook_begin(void *arg, uint64_t version, char *reason,
                               size_t reason_len)
{
    struct agent *a = arg;
    struct wst_agent_state prev;
    struct wst_receiver_state rs;
    wst_status_t st;

    wst_receiver_get_state(a->receiver, &rs);
    const char *label = rs.refit_version == version ? rs.refit_label : "";
    WST_INFO(&a->log, "engine: begin version %llu%s%s",
             (unsigned long long)version, label[0] != '\0' ? " label " : "",
             label);
    /* Persisted as open before the engine pauses: after a crash from here
     * on the live memory may hold a mix of versions. */
    st = wst_agent_state_begin(a, version, &prev, reason, reason_len);
    if (st != WST_OK || a->engine == NULL)
        return st;
    st = wst_engine_socket_begin(a->engine, version, label, reason, reason_len);
    if (st != WST_OK)
        wst_agent_state_restore(a, &prev);
    return st;
}

static wst_status_t hook_layer_finalized(void *arg, uint32_t layer,
                                         uint64_t version, char *reason,
                                         size_t reason_len)
{
    struct agent *a = arg;

    WST_DEBUG(&a->log, "engine: layer %u of version %llu final", layer,
              (unsigned long long)version);
    if (a->engine == NULL)
        return WST_OK;
    return wst_engine_socket_layer(a->engine, layer, version, reason,
                                   reason_len);
}

static void hook_committed(void *arg, uint64_t version)
{
    struct agent *a = arg;
    struct wst_receiver_state rs;

    wst_receiver_get_state(a->receiver, &rs);
    /* A commit, or a resume of the version held before: either way the
     * committed one, whose label the state has. */
    const char *label =
        rs.committed_version == version ? rs.committed_label : "";
    WST_INFO(&a->log, "engine: serving version %llu%s%s",
             (unsigned long long)version, label[0] != '\0' ? " label " : "",
             label);
    wst_metrics_refit_committed(a->metrics);
    wst_agent_state_committed(a, version, label);
    /* Whoever reads the status file after the engine heard it sees it. */
    wst_status_file_write(a);
    if (a->engine != NULL)
        wst_engine_socket_committed(a->engine, version, label);
}

static void hook_unusable(void *arg, wst_status_t status, const char *reason)
{
    struct agent *a = arg;

    WST_ERROR(&a->log, "engine: unusable (%s): %s", wst_status_string(status),
              reason);
    wst_metrics_refit_failed(a->metrics, status);
    wst_agent_state_unusable(a, status, reason);
    wst_status_file_write(a);
    if (a->engine != NULL)
        wst_engine_socket_unusable(a->engine, status, reason);
}

static wst_status_t split_listen(const char *spec, char *host, size_t hostlen,
                                 uint16_t *port)
{
    const char *colon = strrchr(spec, ':');
    char *end = NULL;

    if (colon == NULL || (size_t)(colon - spec) >= hostlen)
        return WST_ERR_CONFIG;
    unsigned long p = strtoul(colon + 1, &end, 10);
    if (colon[1] == '\0' || *end != '\0' || p > 65535)
        return WST_ERR_CONFIG;
    memcpy(host, spec, (size_t)(colon - spec));
    host[colon - spec] = '\0';
    *port = (uint16_t)p;
    return WST_OK;
}

/* --metrics-listen: the HTTP endpoints, once the receiver is serving. */
static wst_status_t start_metrics(struct agent *a)
{
    char host[256];
    uint16_t port;
    wst_status_t st;

    if (split_listen(a->set.metrics_listen, host, sizeof(host), &port) !=
        WST_OK) {
        WST_ERROR(&a->log,
                  "--metrics-listen: bad value '%s': expected host:port",
                  a->set.metrics_listen);
        return WST_ERR_CONFIG;
    }
    st = wst_metrics_start(&a->log, a->receiver, a->set.insecure, host, port,
                           &port, &a->metrics);
    if (st != WST_OK)
        return st;
    return wst_status_file_write_port(a, a->set.metrics_port_file, port,
                                      "metrics port");
}

static wst_status_t agent_start(struct agent *a)
{
    char host[256], err[512];
    uint16_t port;
    wst_status_t st;

    if (split_listen(a->set.listen, host, sizeof(host), &port) != WST_OK) {
        WST_ERROR(&a->log, "--listen: bad value '%s': expected host:port",
                  a->set.listen);
        return WST_ERR_CONFIG;
    }
    if (a->set.auth_secret_file[0] == '\0' && !a->set.insecure) {
        WST_ERROR(&a->log,
                  "no auth secret: give --auth-secret-file PATH (or "
                  "WST_AUTH_SECRET_FILE), or --insecure to trust any process "
                  "that reaches %s",
                  a->set.listen);
        return WST_ERR_CONFIG;
    }
    if (a->set.auth_secret_file[0] != '\0' && a->set.insecure) {
        WST_ERROR(&a->log, "--insecure and --auth-secret-file %s: choose one",
                  a->set.auth_secret_file);
        return WST_ERR_CONFIG;
    }
    if (a->set.insecure)
        WST_WARN(&a->log,
                 "running --insecure: control connections are not "
                 "authenticated; any process that reaches %s can write the "
                 "engine's weights",
                 a->set.listen);
    if (a->set.staging_slots < 1 || a->set.staging_slots > 64) {
        WST_ERROR(&a->log, "--staging-slots: %llu is not in 1..64",
                  (unsigned long long)a->set.staging_slots);
        return WST_ERR_CONFIG;
    }
    if (a->set.verify_threads > 64) {
        WST_ERROR(&a->log, "--verify-threads: %llu is not in 0..64 (0: auto)",
                  (unsigned long long)a->set.verify_threads);
        return WST_ERR_CONFIG;
    }
    if (a->set.lanes > WST_WORKER_LANES_MAX) {
        WST_ERROR(&a->log, "--lanes: %llu is not in 0..%d (0: auto)",
                  (unsigned long long)a->set.lanes, WST_WORKER_LANES_MAX);
        return WST_ERR_CONFIG;
    }
    char dev[WST_WORKER_DEVICE_MAX], why[256];
    if (strcmp(a->set.lane_devices, "auto") != 0 &&
        wst_worker_lane_device_pick(a->set.lane_devices, 0, dev, why,
                                    sizeof(why)) != WST_OK) {
        WST_ERROR(&a->log, "--lane-devices: %s", why);
        return WST_ERR_CONFIG;
    }
    /* wst_receiver_create refuses the same ranges, but with a bare
     * WST_ERR_INVALID; here the flags and their values are named. The
     * bound is the codec's (a have manifest never holds more). */
    if (a->set.max_manifest_entries > WST_MAX_HAVES ||
        a->set.max_manifest_bytes == 0 || a->set.max_unranked_peers == 0 ||
        a->set.max_unranked_peers > UINT32_MAX) {
        WST_ERROR(&a->log,
                  "--max-manifest-entries %llu (at most %u), "
                  "--max-manifest-bytes %llu, --max-unranked-peers %llu "
                  "(both above 0): out of range",
                  (unsigned long long)a->set.max_manifest_entries,
                  WST_MAX_HAVES, (unsigned long long)a->set.max_manifest_bytes,
                  (unsigned long long)a->set.max_unranked_peers);
        return WST_ERR_CONFIG;
    }
    st = wst_layout_load(a->set.layout, &a->layout, err, sizeof(err));
    if (st != WST_OK) {
        WST_ERROR(&a->log, "layout %s: %s", a->set.layout, err);
        return st;
    }
    snprintf(a->name, sizeof(a->name), "agent[%u]", a->layout.rank);
    st = wst_region_memory_check_private(a);
    if (st == WST_OK)
        st = wst_agent_state_open(a);
    if (st == WST_OK)
        st = wst_region_memory_check_host(a);
    if (st != WST_OK)
        return st;
    st = wst_region_import_allocations(a);
    if (st != WST_OK)
        return st;
    if (a->set.engine_socket[0] != '\0') {
        st = wst_engine_socket_create(a->set.engine_socket, a->set.timeout,
                                      a->persisted.usable ? NULL
                                                          : a->persisted.reason,
                                      &a->log, &a->engine);
        if (st != WST_OK)
            return st;
    }
    char nearest[WST_WORKER_DEVICES_MAX * WST_WORKER_DEVICE_MAX];
    struct wst_receiver_params rp = {
        .field_mask = WST_RECEIVER_PARAM_RANK | WST_RECEIVER_PARAM_LISTEN |
                      WST_RECEIVER_PARAM_TIMEOUT | WST_RECEIVER_PARAM_MOVER |
                      WST_RECEIVER_PARAM_VERIFY | WST_RECEIVER_PARAM_LOG |
                      WST_RECEIVER_PARAM_HOOKS | WST_RECEIVER_PARAM_HEARTBEAT |
                      WST_RECEIVER_PARAM_STAGING_SLOTS |
                      WST_RECEIVER_PARAM_GROUP | WST_RECEIVER_PARAM_AUTH |
                      WST_RECEIVER_PARAM_LIMITS | WST_RECEIVER_PARAM_LANES |
                      WST_RECEIVER_PARAM_LANE_DEVICES |
                      WST_RECEIVER_PARAM_DEVICE_RING,
        .rank = a->layout.rank,
        .group = a->layout.group,
        .group_size = a->layout.group_size,
        .group_member = a->layout.group_member,
        .listen_host = host,
        .listen_port = port,
        .timeout_s = a->set.timeout,
        .mover = wst_recv_mover_names[a->set.mover],
        .verify = a->set.verify,
        .verify_threads = (uint32_t)a->set.verify_threads,
        .lanes = (uint32_t)a->set.lanes,
        .device_ring_bytes = a->set.device_ring,
        .lane_devices = lane_devices(a, nearest, sizeof(nearest)),
        .heartbeat_s = a->set.heartbeat,
        .peer_timeout_s = a->set.peer_timeout,
        .staging_slots = (uint32_t)a->set.staging_slots,
        .auth_secret_file = a->set.auth_secret_file,
        .max_manifest_entries = a->set.max_manifest_entries,
        .max_manifest_bytes = a->set.max_manifest_bytes,
        .max_unranked_peers = (uint32_t)a->set.max_unranked_peers,
        .log_level = a->set.log_level,
        .log_name = a->log.name,
        .log_fn = wst_log_stream_sink,
        .log_arg = &a->log_stream,
        .hooks = {.arg = a,
                  .begin = hook_begin,
                  .layer_finalized = hook_layer_finalized,
                  .committed = hook_committed,
                  .unusable = hook_unusable},
    };
    wst_agent_state_seed(a, &rp);
    st = wst_receiver_create(&rp, &a->receiver);
    if (st != WST_OK)
        return st;
    double t0 = wst_now_s();
    st = wst_region_import_add_layout(a);
    a->register_s = wst_now_s() - t0;
    if (st != WST_OK)
        return st;
    st = wst_receiver_start(a->receiver, &port);
    if (st != WST_OK)
        return st;
    wst_status_file_write(a);
    if (a->set.metrics_listen[0] != '\0' && (st = start_metrics(a)) != WST_OK)
        return st;
    return wst_status_file_write_port(a, a->set.port_file, port, "port");
}

static void agent_stop(struct agent *a)
{
    /* Scrapes read the receiver: the server goes first. */
    wst_metrics_destroy(a->metrics);
    wst_receiver_destroy(a->receiver);
    /* After the receiver: its engine thread may be inside a hook. */
    wst_engine_socket_destroy(a->engine);
    /* After the receiver: its threads copy into the regions until then. */
    wst_region_import_release(a);
    wst_layout_release(&a->layout);
    wst_agent_state_release(a);
    wst_config_release(agent_config, &a->set);
}

#define AGENT_USAGE                                                            \
    "wstream-agent --layout FILE [options]\n\n"                                \
    "exit codes: 0 clean shutdown (SIGTERM/SIGINT) or --help; 2 bad usage;\n"  \
    "  otherwise the negated wst_status_t that stopped start-up, e.g. 18 a\n"  \
    "  bad layout file or setting (no auth secret), 10 no CUDA device, 15 a\n" \
    "  layout, secret or shm object that cannot be opened"

int main(int argc, char **argv)
{
    struct agent a;
    sigset_t sigs;
    int sig, code;
    wst_status_t st;

    memset(&a, 0, sizeof(a));
    wst_config_cli(agent_config, &a.set, argc, argv, "wstream-agent",
                   AGENT_USAGE, &code);
    if (code < 0 && a.set.layout[0] == '\0') {
        fprintf(stderr, "wstream-agent: --layout is required\n");
        code = 2;
    }
    if (code >= 0) {
        wst_config_release(agent_config, &a.set);
        return code;
    }
    /* Signals are taken synchronously below; block them before any thread
     * starts so no library thread receives them. */
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);

    snprintf(a.name, sizeof(a.name), "agent");
    wst_logger_init(&a.log, a.name, (enum wst_log_level)a.set.log_level);
    a.log_stream = (struct wst_log_stream){
        .out = stderr,
        .format = (enum wst_log_format)a.set.log_format,
        .name = a.name,
    };
    a.log.sink = wst_log_stream_sink;
    a.log.sink_arg = &a.log_stream;
    st = agent_start(&a);
    if (st == WST_OK) {
        /* Hooks write the status file at commits and failures; a plan
         * refusal or dropped forged data has no hook, so look for state
         * changes meanwhile. */
        struct wst_receiver_state seen, now;
        struct timespec tick = {.tv_sec = 0, .tv_nsec = 100 * 1000000L};
        wst_receiver_get_state(a.receiver, &seen);
        while ((sig = sigtimedwait(&sigs, NULL, &tick)) < 0) {
            wst_receiver_get_state(a.receiver, &now);
            if (now.usable != seen.usable ||
                now.committed_version != seen.committed_version ||
                now.refit_in_progress != seen.refit_in_progress ||
                now.forged_data != seen.forged_data ||
                now.data_resets != seen.data_resets ||
                strcmp(now.refit_phase, seen.refit_phase) != 0 ||
                strcmp(now.reason, seen.reason) != 0) {
                wst_status_file_write(&a);
                seen = now;
            }
        }
        WST_INFO(&a.log, "signal %d: shutting down", sig);
    } else {
        WST_ERROR(&a.log, "start-up failed: %s", wst_status_string(st));
    }
    agent_stop(&a);
    return st == WST_OK ? 0 : -st;
}
