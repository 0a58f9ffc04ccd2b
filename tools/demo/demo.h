/* demo.h - wstream-demo's settings and run state, shared by demo_main.c
 * (the run) and scale_report.c (the scale report and its CSV row). */
#ifndef WST_DEMO_H
#define WST_DEMO_H

#include <stddef.h>
#include <stdint.h>

#include "cluster.h"
#include "model.h"

struct demo_settings {
    char *preset;
    uint64_t layers;
    uint64_t experts;
    uint64_t trainer_tp;
    char *csv;
    double heartbeat;
    double peer_timeout;
    uint64_t senders;
    uint64_t receivers;
    uint64_t refits;
    int transport;
    int mover;
    uint64_t seed;
    double timeout;
    int log_level;
    char *workdir;
    int loader;
    int placement;
    int expert_shard;
    char *fault;
    char *dump;
    uint64_t staging_slots;
    uint64_t lanes;
    uint64_t window; /* senders' bytes in flight; 0: their default */
    int engine;
    int engine_ready_check;
    char *device;        /* text: a GPU ordinal, or -1 for host shm */
    char *sender_device; /* text: a GPU ordinal, or -1 for host memory */
    int device_path;
    char *auth_secret_file; /* "": a fresh one in the work folder */
    int insecure;
};

struct demo {
    struct demo_settings set;
    struct wst_moe_options moe;
    uint32_t kill_layer;
    int fault_kill;
    int fault_refuse;
    uint32_t refuse_agent;
    int exit_status; /* negated status of the first sender failure */
    /* --device and --sender-device, parsed; none: host memory */
    int devices[WST_CLUSTER_MAX_GPUS];
    uint32_t n_devices;
    int sender_devices[WST_CLUSTER_MAX_GPUS];
    uint32_t n_sender_devices;
    struct wst_model model;
    char workdir[1024]; /* short enough for every path built from it */
    int own_workdir;
    struct wst_cluster cluster;
    /* figures for the scale report (report_scale) */
    double start_s;   /* agents up and senders registered */
    double connect_s; /* every sender connected, manifests and plans out */
    struct wst_cluster_memory mem_start, mem_end;
    struct wst_cluster_memory mem_first; /* after the first refit (CPU) */
    /* control messages (in + out) and bytes, summed over agents, after the
     * first and after the last refit */
    uint64_t ctl_msgs[2], ctl_bytes[2];
};

/* --transport's names, by value (demo_main.c). */
extern const char *const wst_demo_transport_names[];

/* qsort comparator for doubles, ascending. */
int wst_demo_compare_double(const void *a, const void *b);

/* Control messages and bytes, in and out, summed over the agents' status
 * files, into slot 'i' (0: after the first refit, 1: after the last). */
void wst_demo_control_snapshot(struct demo *d, int i);

/* Prints the scale report and appends --csv's row; see scale_report.c. */
int wst_demo_report_scale(struct demo *d, const double *secs, int *verified_p);

#endif
