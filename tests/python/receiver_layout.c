/* receiver_layout.c - receiver.h's structs as the C compiler lays them out,
 * for python.receiver_args to hold the ctypes mirror
 * (sender/python/wstream/_receiver_lib.py) against, one line each:
 *
 *     STRUCT FIELD OFFSET SIZE    per field
 *     STRUCT - 0 SIZEOF           per struct
 *
 * A field missing here fails that test, which names it. */
#include <stddef.h>
#include <stdio.h>
#include <wstream/receiver.h>

#define STRUCT(s) printf("%s - 0 %zu\n", #s, sizeof(struct s))
#define FIELD(s, f)                                                            \
    printf("%s %s %zu %zu\n", #s, #f, offsetof(struct s, f),                   \
           sizeof(((struct s *)0)->f))

static void hooks(void)
{
    STRUCT(wst_receiver_hooks);
    FIELD(wst_receiver_hooks, arg);
    FIELD(wst_receiver_hooks, begin);
    FIELD(wst_receiver_hooks, layer_finalized);
    FIELD(wst_receiver_hooks, committed);
    FIELD(wst_receiver_hooks, unusable);
}

static void params(void)
{
    STRUCT(wst_receiver_params);
    FIELD(wst_receiver_params, field_mask);
    FIELD(wst_receiver_params, rank);
    FIELD(wst_receiver_params, listen_host);
    FIELD(wst_receiver_params, listen_port);
    FIELD(wst_receiver_params, timeout_s);
    FIELD(wst_receiver_params, mover);
    FIELD(wst_receiver_params, verify);
    FIELD(wst_receiver_params, verify_threads);
    FIELD(wst_receiver_params, log_level);
    FIELD(wst_receiver_params, log_fn);
    FIELD(wst_receiver_params, log_arg);
    FIELD(wst_receiver_params, log_name);
    FIELD(wst_receiver_params, hooks);
    FIELD(wst_receiver_params, heartbeat_s);
    FIELD(wst_receiver_params, peer_timeout_s);
    FIELD(wst_receiver_params, staging_slots);
    FIELD(wst_receiver_params, group);
    FIELD(wst_receiver_params, group_size);
    FIELD(wst_receiver_params, group_member);
    FIELD(wst_receiver_params, initial_committed_version);
    FIELD(wst_receiver_params, initial_unusable_reason);
    FIELD(wst_receiver_params, auth_secret_file);
    FIELD(wst_receiver_params, max_manifest_entries);
    FIELD(wst_receiver_params, max_manifest_bytes);
    FIELD(wst_receiver_params, max_unranked_peers);
    FIELD(wst_receiver_params, lanes);
    FIELD(wst_receiver_params, lane_devices);
    FIELD(wst_receiver_params, initial_committed_label);
    FIELD(wst_receiver_params, device_ring_bytes);
}

static void region_and_want(void)
{
    STRUCT(wst_region);
    FIELD(wst_region, name);
    FIELD(wst_region, data);
    FIELD(wst_region, length);
    FIELD(wst_region, mem_type);
    STRUCT(wst_want_entry);
    FIELD(wst_want_entry, name);
    FIELD(wst_want_entry, dtype);
    FIELD(wst_want_entry, ndim);
    FIELD(wst_want_entry, shape);
    FIELD(wst_want_entry, box_start);
    FIELD(wst_want_entry, box_stop);
    FIELD(wst_want_entry, region);
    FIELD(wst_want_entry, offset);
    FIELD(wst_want_entry, row_pitch);
    FIELD(wst_want_entry, expert_grouped);
    FIELD(wst_want_entry, ep_rank);
    FIELD(wst_want_entry, ep_size);
}

static void expert_layer(void)
{
    STRUCT(wst_expert_layer);
    FIELD(wst_expert_layer, layer);
    FIELD(wst_expert_layer, loader);
    FIELD(wst_expert_layer, dtype);
    FIELD(wst_expert_layer, n_experts);
    FIELD(wst_expert_layer, ep_rank);
    FIELD(wst_expert_layer, ep_size);
    FIELD(wst_expert_layer, hidden);
    FIELD(wst_expert_layer, inter);
    FIELD(wst_expert_layer, expert_ids);
    FIELD(wst_expert_layer, n_expert_ids);
    FIELD(wst_expert_layer, inter_tp_rank);
    FIELD(wst_expert_layer, inter_tp_size);
    FIELD(wst_expert_layer, w13_region);
    FIELD(wst_expert_layer, w13_offset);
    FIELD(wst_expert_layer, w2_region);
    FIELD(wst_expert_layer, w2_offset);
}

static void state_and_times(void)
{
    STRUCT(wst_layer_times);
    FIELD(wst_layer_times, received);
    FIELD(wst_layer_times, repacked);
    FIELD(wst_layer_times, finalized);
    FIELD(wst_layer_times, repack_seconds);
    FIELD(wst_layer_times, finalize_seconds);
    STRUCT(wst_receiver_state);
    FIELD(wst_receiver_state, committed_version);
    FIELD(wst_receiver_state, usable);
    FIELD(wst_receiver_state, refit_in_progress);
    FIELD(wst_receiver_state, reason);
    FIELD(wst_receiver_state, refits_ok);
    FIELD(wst_receiver_state, refits_failed);
    FIELD(wst_receiver_state, last_refit_bytes);
    FIELD(wst_receiver_state, last_refit_put_bytes);
    FIELD(wst_receiver_state, last_refit_am_bytes);
    FIELD(wst_receiver_state, last_refit_nccl_bytes);
    FIELD(wst_receiver_state, last_refit_seconds);
    FIELD(wst_receiver_state, plan_seconds);
    FIELD(wst_receiver_state, refit_version);
    FIELD(wst_receiver_state, refit_phase);
    FIELD(wst_receiver_state, forged_data);
    FIELD(wst_receiver_state, data_resets);
    FIELD(wst_receiver_state, lanes);
    FIELD(wst_receiver_state, last_refit_lane_bytes);
    FIELD(wst_receiver_state, lane_device);
    FIELD(wst_receiver_state, refit_label);
    FIELD(wst_receiver_state, committed_label);
    FIELD(wst_receiver_state, manifest_seconds);
    FIELD(wst_receiver_state, plan_cpu_seconds);
    FIELD(wst_receiver_state, manifest_cpu_seconds);
    FIELD(wst_receiver_state, manifest_bytes);
    FIELD(wst_receiver_state, control_msgs_out);
    FIELD(wst_receiver_state, control_bytes_out);
    FIELD(wst_receiver_state, control_msgs_in);
    FIELD(wst_receiver_state, control_bytes_in);
}

int main(void)
{
    hooks();
    params();
    region_and_want();
    expert_layer();
    state_and_times();
    return 0;
}
