/* experts.h - per-expert Hugging Face MoE tensors, sent as slices of the
 * grouped expert tensors receivers want.
 *
 * Hugging Face MoE checkpoints (Qwen3-MoE, DeepSeek, Mixtral-style names)
 * hold one tensor per routed expert:
 *
 *   model.layers.{l}.mlp.experts.{e}.gate_proj.weight   [I, H]
 *   model.layers.{l}.mlp.experts.{e}.up_proj.weight     [I, H]
 *   model.layers.{l}.mlp.experts.{e}.down_proj.weight   [H, I]
 *
 * while on the wire a layer's experts travel as one grouped tensor per
 * projection (DESIGN.md section 2; struct wst_expert_layer in
 * include/wstream/receiver.h):
 *
 *   model.layers.{l}.mlp.experts.{proj}.weight   [E, I, H] (gate, up),
 *                                                [E, H, I] (down)
 *
 * Each per-expert tensor becomes the slice [e:e+1, 0:rows, 0:cols] of its
 * grouped tensor, its bytes still the file's own (no copy); the sender
 * registers every slice under the grouped name (include/wstream/sender.h).
 * E is the number of experts found in the layer. {l} and {e} are decimal
 * without leading zeros; other names (shared experts, the router,
 * ".weight_scale_inv" and the like) are sent under their own names.
 *
 * Refused, each as WST_ERR_INTEGRITY with a message naming the layer and
 * a tensor, before anything connects: a per-expert tensor that is not 2-D;
 * an expert missing in a projection (ids must be 0..E-1 in every
 * projection present, E = 1 + the largest id of the layer); experts of one
 * projection with different shapes, of one layer with different dtypes,
 * or a down_proj that is not [H, I] for gate/up's [I, H]; a grouped tensor
 * and per-expert tensors of the same layer both in the checkpoint.
 */
#ifndef WST_SEND_EXPERTS_H
#define WST_SEND_EXPERTS_H

#include <stddef.h>
#include <stdint.h>

#include "manifest.h"
#include "safetensors.h"
#include <wstream/status.h>

/* One checkpoint tensor as the sender is given it: the box [start, stop)
 * of a tensor of 'shape' (the whole tensor, or its slice of a grouped
 * one). */
struct wst_send_tensor {
    const struct wst_st_tensor *t; /* borrowed from the checkpoint */
    char *group_name; /* owned: the grouped tensor it is a slice of; NULL:
                         sent under t->name */
    uint32_t ndim;
    uint64_t shape[WST_MAX_DIMS];
    uint64_t start[WST_MAX_DIMS];
    uint64_t stop[WST_MAX_DIMS];
    uint32_t layer; /* progress layer (progress.h) */
};

/* What grouping found. */
struct wst_send_experts {
    size_t n_slices;  /* per-expert tensors sent as slices */
    size_t n_grouped; /* grouped tensors they make */
    size_t n_layers;  /* layers they are in */
};

/* The name 'x' is registered under (owned by x or its checkpoint). */
const char *wst_send_tensor_name(const struct wst_send_tensor *x);

/* Finds the per-expert tensors among x[0..n) (each the whole of its
 * tensor on entry), checks every layer's set as above and turns each into
 * its slice of the grouped tensor (group_name, shape, start, stop). On
 * success *out says what was grouped. On a refusal or WST_ERR_NO_MEMORY,
 * 'err' says why and no entry of x is changed. */
wst_status_t wst_send_group_experts(struct wst_send_tensor *x, size_t n,
                                    struct wst_send_experts *out, char *err,
                                    size_t errlen);

/* Frees the group names of x[0..n). */
void wst_send_tensors_release(struct wst_send_tensor *x, size_t n);

#endif
