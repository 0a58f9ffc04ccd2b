/* agent.h - wstream-agent's context: its settings and what it holds.
 *
 * One struct agent lives in main() (agent_main.c) for the daemon's life;
 * status_file.c, region_import.c and agent_state.c borrow it for the
 * length of a call.
 * Private to receiver/agent/.
 */
#ifndef WST_AGENT_H
#define WST_AGENT_H

#include <stdint.h>
#include <wstream/receiver.h>

#include "alloc_maps.h"
#include "engine_socket.h"
#include "layout_file.h"
#include "log.h"
#include "metrics.h"
#include "state_store.h"

/* The flags, filled from agent_config (agent_main.c); its strings are owned
 * and freed by wst_config_release. */
struct agent_settings {
    char *layout;
    char *listen;
    char *port_file;
    char *status_file;
    char *state_file;
    char *engine_socket;
    double timeout;
    double heartbeat;
    double peer_timeout;
    int mover;
    uint64_t staging_slots;
    uint64_t verify_threads;
    uint64_t lanes;
    uint64_t device_ring;
    char *lane_devices;
    int verify;
    int log_level;
    uint64_t max_manifest_entries;
    uint64_t max_manifest_bytes;
    uint64_t max_unranked_peers;
    int log_format;
    char *metrics_listen;
    char *metrics_port_file;
    char *auth_secret_file;
    int insecure;
    int private_memory;
};

/* The daemon's state: one in main(), agent_stop releases what it holds. */
struct agent {
    struct agent_settings set;
    struct wst_logger log;
    struct wst_log_stream
        log_stream;              /* --log-format, for log and the receiver */
    struct wst_metrics *metrics; /* NULL without --metrics-listen */
    struct wst_layout layout;
    wst_receiver_t *receiver;
    struct wst_engine_socket *engine; /* NULL without --engine-socket */
    /* The layout's allocations, mapped (shm) or imported (CUDA IPC);
     * given back after the receiver is destroyed. */
    struct wst_alloc_maps allocs;
    void **owned;      /* regions the agent allocated itself */
    double register_s; /* registering every region, at start-up */
    char name[32];     /* log name, "agent[rank]" once the layout is read */

    /* What survives a restart (state_store.h): the file, NULL when nothing
     * is persisted (owned), and what it says now. Written from the hooks
     * (the receiver's engine thread) once the receiver runs. */
    char *state_path;
    struct wst_agent_state persisted;
};

#endif
