/* status_file.c - wstream-agent's state and bound ports, as files. */
#include "status_file.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "atomic_file.h"
#include "clock.h"
#include "log.h"

/* The state, and the last refit's per-layer timeline (seconds from the
 * engine's begin acknowledgement), as one JSON object. */
void wst_status_file_write(struct agent *a)
{
    struct wst_receiver_state st;
    struct json_object *o, *layers;
    struct wst_layer_times *times = NULL;
    const char *text;
    char err[512];
    uint32_t n;

    if (a->set.status_file[0] == '\0' || a->receiver == NULL)
        return;
    wst_receiver_get_state(a->receiver, &st);
    n = wst_receiver_get_timeline(a->receiver, NULL, 0);
    if (n != 0 && (times = calloc(n, sizeof(*times))) != NULL)
        n = wst_receiver_get_timeline(a->receiver, times, n);
    o = json_object_new_object();
    layers = json_object_new_array();
    json_object_object_add(o, "committed_version",
                           json_object_new_uint64(st.committed_version));
    json_object_object_add(o, "committed_label",
                           json_object_new_string(st.committed_label));
    json_object_object_add(o, "usable", json_object_new_boolean(st.usable));
    json_object_object_add(o, "refits_ok",
                           json_object_new_uint64(st.refits_ok));
    json_object_object_add(o, "refits_failed",
                           json_object_new_uint64(st.refits_failed));
    json_object_object_add(o, "last_refit_bytes",
                           json_object_new_uint64(st.last_refit_bytes));
    json_object_object_add(o, "last_refit_seconds",
                           json_object_new_double(st.last_refit_seconds));
    json_object_object_add(o, "lanes", json_object_new_int((int)st.lanes));
    struct json_object *lb = json_object_new_array();
    for (uint32_t i = 0; i < st.lanes && i < WST_RECEIVER_LANES_MAX; i++)
        json_object_array_add(
            lb, json_object_new_uint64(st.last_refit_lane_bytes[i]));
    json_object_object_add(o, "last_refit_lane_bytes", lb);
    struct json_object *ld = json_object_new_array();
    for (uint32_t i = 0; i < st.lanes && i < WST_RECEIVER_LANES_MAX; i++)
        json_object_array_add(ld, json_object_new_string(st.lane_device[i]));
    json_object_object_add(o, "lane_devices", ld);
    json_object_object_add(o, "plan_seconds",
                           json_object_new_double(st.plan_seconds));
    json_object_object_add(o, "manifest_seconds",
                           json_object_new_double(st.manifest_seconds));
    json_object_object_add(o, "manifest_bytes",
                           json_object_new_uint64(st.manifest_bytes));
    json_object_object_add(o, "plan_cpu_seconds",
                           json_object_new_double(st.plan_cpu_seconds));
    json_object_object_add(o, "manifest_cpu_seconds",
                           json_object_new_double(st.manifest_cpu_seconds));
    json_object_object_add(o, "control_msgs_out",
                           json_object_new_uint64(st.control_msgs_out));
    json_object_object_add(o, "control_bytes_out",
                           json_object_new_uint64(st.control_bytes_out));
    json_object_object_add(o, "control_msgs_in",
                           json_object_new_uint64(st.control_msgs_in));
    json_object_object_add(o, "control_bytes_in",
                           json_object_new_uint64(st.control_bytes_in));
    json_object_object_add(o, "register_seconds",
                           json_object_new_double(a->register_s));
    json_object_object_add(o, "time_ns", json_object_new_uint64(wst_now_ns()));
    json_object_object_add(o, "reason", json_object_new_string(st.reason));
    json_object_object_add(o, "forged_data",
                           json_object_new_uint64(st.forged_data));
    json_object_object_add(o, "data_resets",
                           json_object_new_uint64(st.data_resets));
    /* The refit under way, if any: its version, phase ("ready": paused,
     * nothing written; "prepared": whole, waiting for its engine group)
     * and label, or null. */
    struct json_object *refit = NULL;
    if (st.refit_in_progress) {
        refit = json_object_new_object();
        json_object_object_add(refit, "version",
                               json_object_new_uint64(st.refit_version));
        json_object_object_add(refit, "phase",
                               json_object_new_string(st.refit_phase));
        json_object_object_add(refit, "label",
                               json_object_new_string(st.refit_label));
    }
    json_object_object_add(o, "refit", refit);
    for (uint32_t i = 0; times != NULL && i < n; i++) {
        struct json_object *l = json_object_new_object();
        json_object_object_add(l, "layer", json_object_new_int64(i));
        json_object_object_add(l, "received",
                               json_object_new_double(times[i].received));
        json_object_object_add(l, "repacked",
                               json_object_new_double(times[i].repacked));
        json_object_object_add(l, "finalized",
                               json_object_new_double(times[i].finalized));
        json_object_object_add(l, "repack_seconds",
                               json_object_new_double(times[i].repack_seconds));
        json_object_object_add(
            l, "finalize_seconds",
            json_object_new_double(times[i].finalize_seconds));
        json_object_array_add(layers, l);
    }
    json_object_object_add(o, "layers", layers);
    text = json_object_to_json_string_ext(o, JSON_C_TO_STRING_SPACED);
    if (text == NULL)
        WST_WARN(&a->log, "cannot write status file %s: out of memory",
                 a->set.status_file);
    else if (wst_atomic_replace(a->set.status_file, text, strlen(text), 0644,
                                err, sizeof(err)) != WST_OK)
        WST_WARN(&a->log, "cannot write status file: %s", err);
    json_object_put(o);
    free(times);
}

/* A bound port, for whoever started us ("" path: not asked for). */
wst_status_t wst_status_file_write_port(struct agent *a, const char *path,
                                        uint16_t port, const char *what)
{
    char text[16], err[512];
    wst_status_t status;

    if (path[0] == '\0')
        return WST_OK;
    snprintf(text, sizeof(text), "%u\n", port);
    status =
        wst_atomic_replace(path, text, strlen(text), 0644, err, sizeof(err));
    if (status != WST_OK)
        WST_ERROR(&a->log, "cannot write %s file: %s", what, err);
    return status;
}
