/* cluster.h - a refit cluster on one machine: agent and sender processes.
 *
 * Used by wstream-demo, wstream-bench and the fault tests. The "engine" of
 * each receiver rank is a POSIX shared-memory object, poisoned with 0xA5
 * bytes, that a wstream-agent process per rank maps: with engine_bin, a
 * wstream-engine-standin process per rank creates and owns it and speaks
 * the agent's engine socket (as a real engine would); without, this
 * process creates it. With n_devices the live memory is instead device
 * memory on the GPUs 'devices' that each stand-in engine allocates and exports
 * by CUDA IPC; the agent's layout names the handle ("cuda_ipc") and this
 * process imports it only to verify (after the senders are forked: CUDA
 * does not survive a fork). Sender processes
 * are forked before this process starts any thread; each owns the FSDP
 * shards of its rank of the model (model.h), registers them once, reports
 * "ready", then pushes one version per command read from its pipe and
 * answers with one result line. Agents may run in a network namespace
 * (through `ip netns exec`), senders in another (setns before UCX starts).
 *
 * All times are CLOCK_MONOTONIC nanoseconds, comparable across processes.
 */
#ifndef WST_CLUSTER_H
#define WST_CLUSTER_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "layout_file.h"
#include "model.h"
#include <wstream/receiver.h>

enum wst_transport {
    WST_TRANSPORT_AUTO = 0, /* UCX chooses */
    WST_TRANSPORT_TCP = 1,  /* UCX_TLS=tcp */
    WST_TRANSPORT_SHM = 2,  /* UCX_TLS=sm,tcp: control on TCP, data on shm */
};

#define WST_CLUSTER_MAX_GPUS 16
/* Processes one machine is asked to hold (each sender and agent is one,
 * with its UCX worker and threads). */
#define WST_CLUSTER_MAX_SENDERS 1024
#define WST_CLUSTER_MAX_RECEIVERS 256

struct wst_cluster_params {
    const struct wst_model *model; /* borrowed for the cluster's lifetime */
    uint32_t n_senders;
    uint32_t n_receivers;
    /* The trainer's tensor parallelism (wst_model_trainer_shards_tp):
     * 0, FSDP shards over every sender; N, Megatron TP N with n_senders/N
     * data-parallel replicas. Experts go by EP over every sender either
     * way. */
    uint32_t trainer_tp;
    enum wst_transport transport;
    const char *mover; /* "auto", "put", "am" */
    uint64_t seed;
    double timeout_s;      /* agents' --timeout and senders' wait */
    double heartbeat_s;    /* 0: library default */
    double peer_timeout_s; /* 0: library default */
    int log_level;         /* 0..4 */
    const char *agent_bin;
    const char *workdir;      /* exists; layout, port and status files */
    const char *agent_host;   /* listen and connect address; NULL: 127.0.0.1 */
    const char *agent_netns;  /* NULL: none */
    const char *sender_netns; /* NULL: none */
    int shm_data; /* senders' shm_data (sender.h): data over shared memory */
    const struct wst_moe_options *moe; /* engine's experts; NULL: defaults */
    uint32_t staging_slots; /* agents' --staging-slots; 0: their default */
    uint64_t window_bytes;  /* senders' bytes in flight; 0: their default */
    uint32_t lanes; /* agents' --lanes and senders' lanes; 0: defaults */
    uint32_t digest_threads; /* senders' digest_threads; 0: their default */
    /* The agents' --lane-devices and the senders' lane_devices (each side
     * names the devices of its own namespace); NULL: none. */
    const char *agent_lane_devices;
    const char *sender_lane_devices;
    const char *engine_bin; /* wstream-engine-standin; NULL: no engine */
    /* The engines skip their check that nothing is written before READY
     * (two hashes of the live memory at each BEGIN): a benchmark's. */
    int engine_no_ready_check;
    /* Live memory on the GPUs 'devices' (needs engine_bin) when n_devices
     * is nonzero: agent k's on devices[k % n_devices]. Zeroed params keep
     * the host shm. */
    int devices[WST_CLUSTER_MAX_GPUS];
    uint32_t n_devices;
    /* Trainer shards on the GPUs 'sender_devices' when n_sender_devices is
     * nonzero (sender r's on sender_devices[r % n_sender_devices]): each
     * sender copies its shards there after every fill and pushes from
     * device memory, by the senders' device_path (NULL: auto). */
    int sender_devices[WST_CLUSTER_MAX_GPUS];
    uint32_t n_sender_devices;
    const char *device_path;
    /* Fault: sender kill_sender SIGKILLs itself as it starts streaming
     * layer kill_layer of version kill_version (0: no fault). */
    uint32_t kill_sender;
    uint32_t kill_layer;
    uint64_t kill_version;
    /* Fault: the engine of agent refuse_agent answers BEGIN of
     * refuse_version with REFUSE (0: no fault; needs engine_bin). */
    uint32_t refuse_agent;
    uint64_t refuse_version;
    /* The deployment's secret, given to every agent and sender. NULL: a
     * fresh random one in workdir/secret (mode 0600) -- unless insecure,
     * which runs the agents --insecure and the senders without one. */
    const char *secret_file;
    int insecure;
    /* Fault trigger (the campaign's): sender trigger_sender, as it starts
     * streaming layer trigger_layer of version trigger_version (0: none),
     * writes one byte to trigger_fd (a pipe the caller reads, to inject a
     * fault into another process at that moment), then raises
     * trigger_self_signal on itself (0: none). Once per process. */
    uint32_t trigger_sender;
    uint32_t trigger_layer;
    uint64_t trigger_version;
    int trigger_fd;
    int trigger_self_signal;
};

struct wst_sender_result {
    int status; /* wst_status_t of push + wait */
    uint64_t bytes;
    double seconds;      /* push to the last commit */
    uint64_t end_ns;     /* when wait returned */
    double push_seconds; /* until push returned */
    char mover[16];
    char lanes[256];
    char error[512];
};

struct wst_agent_status {
    uint64_t committed_version;
    int usable;
    uint64_t refits_ok;
    uint64_t refits_failed;
    double plan_seconds;
    double manifest_seconds; /* unpacking manifests, summed */
    double plan_cpu_seconds, manifest_cpu_seconds; /* the planner thread's */
    uint64_t manifest_bytes; /* decoded manifests held at the plan */
    /* control messages with the senders since start (status file) */
    uint64_t control_msgs_out, control_bytes_out;
    uint64_t control_msgs_in, control_bytes_in;
    double register_seconds;
    double last_refit_seconds; /* begin acknowledgement to commit */
    uint64_t time_ns;          /* when the agent wrote it */
    char reason[512];
    int refit_open;         /* a refit is under way ("refit" not null) */
    uint64_t refit_version; /* its version, with refit_open */
    char refit_phase[32];   /* its phase, with refit_open */
    uint32_t lanes;         /* its data lanes */
    /* bytes of its last committed refit per data lane [0..lanes) */
    uint64_t lane_bytes[WST_RECEIVER_LANES_MAX];
};

struct wst_cluster_agent {
    pid_t pid;
    pid_t engine_pid; /* the stand-in engine; 0: none */
    char engine_socket[1200];
    char engine_state[1200];
    char shm_name[64];
    void *shm; /* host live memory (mapped here); NULL with n_devices */
    /* with n_devices: the engine's memory imported here by CUDA IPC for
     * verification (NULL until first needed; closed by stop), and the host
     * copy of it that is verified (malloc'd, cuda_bytes long). */
    void *ipc_base;
    void *live_copy;
    struct wst_layout layout; /* cuda_ipc from the engine with n_devices */
    uint16_t port;
    char layout_path[1200];
    char port_file[1200];
    char status_file[1200];
};

struct wst_cluster_sender {
    pid_t pid;
    int cmd_fd;
    int res_fd;
    double register_seconds;
};

struct wst_cluster {
    struct wst_cluster_params p;
    struct wst_cluster_agent *agents;
    struct wst_cluster_sender *senders;
    uint64_t live_bytes;    /* wanted bytes over all agents */
    char secret_file[1200]; /* "" when insecure */
};

/* Creates the shm objects (with n_devices: starts the engines and waits
 * for their IPC handles), starts the agents and waits for their ports,
 * then forks the senders and waits until each has registered its shards.
 * Returns 0, or -1 after printing why (the caller still calls stop). */
int wst_cluster_start(struct wst_cluster *c,
                      const struct wst_cluster_params *params);

/* Has every sender connect to every agent at once and exchange
 * manifests and plans (wst_sender_connect), before any push; the slowest
 * sender's seconds go to *slowest_s. -1 after printing why, with the
 * first failing sender's wst_status_t in *status_p (0 when none said). */
int wst_cluster_connect(struct wst_cluster *c, double timeout_s,
                        double *slowest_s, int *status_p);

/* Resident anonymous memory (RssAnon of /proc/PID/status: the heap, UCX
 * buffers, staging; not the shared live memory nor files) of one side's
 * processes, and the CPU time they used. */
#define WST_CLUSTER_THREAD_KINDS 16
struct wst_cluster_mem_side {
    uint32_t n;
    uint64_t anon_sum, anon_max; /* bytes */
    double cpu_s; /* CPU seconds (user + system) used so far, summed */
    /* The same, summed by thread name (comm) over the side's live
     * threads, in the order first seen; names past the last are left
     * out. Threads that exited are not in it (they are in cpu_s). */
    uint32_t n_kinds;
    struct wst_cluster_thread_cpu {
        char comm[16];
        double cpu_s;
    } kinds[WST_CLUSTER_THREAD_KINDS];
};
struct wst_cluster_memory {
    struct wst_cluster_mem_side agents, senders;
};
void wst_cluster_memory(struct wst_cluster *c, struct wst_cluster_memory *m);

/* Tells every sender to push 'version'. */
int wst_cluster_push(struct wst_cluster *c, uint64_t version);

/* Reads sender r's result of the last push; -1 on timeout or if it died. */
int wst_cluster_result(struct wst_cluster *c, uint32_t r, double timeout_s,
                       struct wst_sender_result *res);

/* Checks every agent's live bytes against the generator for 'version';
 * -1 after printing the first mismatch. */
int wst_cluster_verify(struct wst_cluster *c, uint64_t version);

/* The same for agent k alone. */
int wst_cluster_verify_agent(struct wst_cluster *c, uint32_t k,
                             uint64_t version);

/* Agent k's live bytes as host memory, layout.shm_bytes (or cuda_bytes)
 * long: its shm, or with n_devices a fresh copy of its device memory.
 * Owned by the cluster, valid until the next call for k or stop; NULL
 * after printing why. */
const void *wst_cluster_agent_live(struct wst_cluster *c, uint32_t k);

/* Whether GPU 'device' can hold live memory: a CUDA build and a visible
 * device of that ordinal. Probes in a child process, so this one stays free
 * of CUDA until its senders are forked. 0, or -1 with the reason in 'why'. */
int wst_cluster_device_check(int device, char *why, size_t len);

/* Reads agent k's status file. */
int wst_cluster_agent_status(struct wst_cluster *c, uint32_t k,
                             struct wst_agent_status *st);

/* Agent k's per-layer timeline of its last refit (from its status file)
 * into t[0..n); returns the number of layers it reported, -1 on error. */
int wst_cluster_agent_timeline(struct wst_cluster *c, uint32_t k,
                               struct wst_layer_times *t, uint32_t n);

/* Agent k's engine's state ("serving", "paused", "unusable") and, when
 * unusable, the reason the agent gave it; -1 without an engine. */
int wst_cluster_engine_state(struct wst_cluster *c, uint32_t k, char *state,
                             size_t state_len, char *reason, size_t reason_len);

/* Agent k's engine's committed_version (the version it serves when
 * "serving") into *version_p; -1 without an engine or a readable state. */
int wst_cluster_engine_version(struct wst_cluster *c, uint32_t k,
                               uint64_t *version_p);

/* Sends 'sig' to agent k or sender r (SIGKILL, SIGSTOP, SIGCONT, ...). */
void wst_cluster_signal_agent(struct wst_cluster *c, uint32_t k, int sig);
void wst_cluster_signal_sender(struct wst_cluster *c, uint32_t r, int sig);

/* Kills (if alive) and starts agent k again on the same port, with its
 * live memory untouched. */
int wst_cluster_restart_agent(struct wst_cluster *c, uint32_t k);

/* Kills (if alive) and forks sender r again; waits until it is ready. */
int wst_cluster_restart_sender(struct wst_cluster *c, uint32_t r);

/* The folder for layout, port and status files: 'given' when not empty
 * (*own_p = 0; made with its missing parents, mode 0700, if absent), else a
 * new /tmp/<prog>-XXXXXX (*own_p = 1). -1 after printing why.
 * wst_cluster_workdir_remove deletes an owned one. */
int wst_cluster_workdir(const char *prog, const char *given, char *buf,
                        size_t len, int *own_p);
void wst_cluster_workdir_remove(const char *prog, const char *dir);

/* Waits up to TIMEOUT_S for process *PID (an agent started with
 * --port-file) to write its port (1..65535) into PORT_FILE, polling every
 * 10 ms. 0 with *port_p set; -1 when the time ran out, or when the process
 * exited first: then *pid is 0 and *wstatus_p (may be NULL) its wait
 * status. */
int wst_cluster_wait_port(pid_t *pid, const char *port_file, double timeout_s,
                          uint16_t *port_p, int *wstatus_p);

/* The wstream-agent installed beside the running program (build/bin) into
 * buf; -1 if /proc/self/exe cannot be read. */
int wst_cluster_agent_path(char *buf, size_t len);

/* Stops every process, removes the shm objects, closes imported device
 * memory first (before its engine frees it). Safe after a failed start. */
void wst_cluster_stop(struct wst_cluster *c);

#endif
