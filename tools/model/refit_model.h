/* refit_model.h - the arithmetic of wstream-model: a refit's time on a
 * cluster, from a model's shape, the cluster's layouts and measured costs.
 *
 * Pure computation (no I/O, no globals), so that tests can check it against
 * hand-computed cases. A model is a list of tensor records built from an
 * architecture (wst_rm_arch: a preset or config.json's dims); each record
 * says how an inference engine splits it over its GPUs:
 *  - REPL: every GPU of the stage holds all of it (norms, routers, MLA's
 *    low-rank down projections);
 *  - TP: split over the engine's tensor-parallel ranks (attention by heads,
 *    dense MLPs, shared experts);
 *  - KV: split over min(tp, kv heads) (GQA's k and v: ranks past the kv
 *    heads hold copies);
 *  - VOCAB: split over tp by rows (embedding, lm_head);
 *  - EXPERT: routed experts, split over the expert-parallel ranks.
 * Layers go to pipeline stages in ceil(L/pp) blocks; the embedding to the
 * first stage, the final norm and lm_head to the last. The bytes into a GPU
 * are those of the fullest stage.
 *
 * The time model (wst_rm_predict), each part printed by the tool:
 *   steady refit = control round trips + max(transfer, agent CPU) + tail
 *                  + commit
 *   agent CPU    = senders each receiver hears x layers of its stage x
 *                  measured CPU per sender and layer (the progress
 *                  thread's messages: data, LAYER_DONE and its check; the
 *                  scale test measures it); it overlaps the transfer;
 *                  a sender's the same per receiver and layer
 *   shared cores   = when every process shares host_cores (one machine
 *                  running a whole cluster, as the scale test does): all
 *                  agents' and senders' CPU over those cores, a floor
 *   first refit  = steady refit + planning (plans are cached after it)
 *   transfer     = max(receiving GPU's bytes / its rate,
 *                      sending GPU's bytes / its rate)
 *   rate         = NICs per GPU x NIC Gb/s / 8 x wire efficiency x wstream
 *                  efficiency (capped by the pinned-copy rate on the bounce
 *                  path); bytes from a sender on the same node (NVLink)
 *                  share: max((1-f) B / nic rate, f B / NVLink rate)
 *   sender bytes = every inference GPU's bytes / trainer GPUs (the planner
 *                  spreads replicated tensors over the senders holding them)
 *   tail         = the last layer's expert bytes on a GPU / repack rate +
 *                  its bytes / digest rate (what cannot hide behind bytes
 *                  still arriving); a rate of 0 means hidden (not counted)
 *   planning     = plan items per receiver x measured cost per item, or a
 *                  measured plan time
 * A measured total (inputs.live_bytes) replaces the model's bytes: each
 * inference GPU takes an even share of it.
 */
#ifndef WST_REFIT_MODEL_H
#define WST_REFIT_MODEL_H

#include <stddef.h>
#include <stdint.h>
#include <wstream/status.h>

/* An architecture: what a preset or config.json gives. */
struct wst_rm_arch {
    char name[48];
    uint64_t hidden, n_layers, vocab;
    uint64_t heads, kv_heads, head_dim; /* GQA attention (q_lora_rank 0) */
    /* MLA attention (DeepSeek-V3, Kimi-K2) when q_lora_rank != 0 */
    uint64_t q_lora_rank, kv_lora_rank, qk_nope_dim, qk_rope_dim, v_head_dim;
    uint64_t dense_inter;    /* dense MLP intermediate (0: none) */
    uint64_t first_dense;    /* leading dense layers of an MoE model */
    uint64_t n_experts;      /* routed experts per MoE layer (0: dense) */
    uint64_t moe_inter;      /* intermediate of one expert */
    uint64_t shared_experts; /* shared experts (TP-split), each moe_inter */
    uint64_t qk_norm;        /* 1: per-head q_norm and k_norm (Qwen3) */
    uint64_t router_bias;    /* 1: e_score_correction_bias [E] (fp32) */
    uint64_t dense_mib;      /* > 0: "dense:<MiB>", the demo's sized model */
};

enum wst_rm_split {
    WST_RM_REPL,
    WST_RM_TP,
    WST_RM_KV,
    WST_RM_VOCAB,
    WST_RM_EXPERT
};

#define WST_RM_GLOBAL_FIRST UINT32_MAX       /* embedding: the first stage */
#define WST_RM_GLOBAL_LAST (UINT32_MAX - 1u) /* norm, lm_head: the last */

struct wst_rm_tensor {
    uint32_t layer; /* or WST_RM_GLOBAL_FIRST / _LAST */
    enum wst_rm_split split;
    uint64_t rows, cols; /* 1-D: cols = 1 */
    uint64_t copies;     /* tensors of this shape (experts: E) */
    int linear;          /* a 2-D weight an FP8 engine holds in FP8 */
    int fp32;            /* kept in fp32 whatever the dtype */
};

enum wst_rm_dtype { WST_RM_BF16, WST_RM_FP8 };

struct wst_rm_model {
    struct wst_rm_arch arch;
    enum wst_rm_dtype dtype;
    size_t n;
    struct wst_rm_tensor *t; /* owned, malloc'd */
};

/* The architectures wstream-model knows: "deepseek-v3", "kimi-k2",
 * "qwen3-30b-a3b", "qwen3-235b-a22b", the demo's "tiny" and "tiny-moe",
 * and "dense:<MiB>". n_layers 0: the preset's. WST_ERR_INVALID for an
 * unknown name, with the known ones in 'err'. */
wst_status_t wst_rm_arch_preset(const char *name, uint64_t n_layers,
                                struct wst_rm_arch *a, char *err,
                                size_t errlen);

/* Builds the tensor records of 'a' held in 'dtype' (FP8: linear weights one
 * byte per element plus a float32 scale per 128x128 block, the DeepSeek-V3
 * checkpoint format; everything else bf16). *m owns them on success
 * (wst_rm_model_release). */
wst_status_t wst_rm_model_build(const struct wst_rm_arch *a,
                                enum wst_rm_dtype dtype, struct wst_rm_model *m,
                                char *err, size_t errlen);

void wst_rm_model_release(struct wst_rm_model *m);

/* Bytes of one record's one copy, whole. */
uint64_t wst_rm_tensor_bytes(const struct wst_rm_tensor *t,
                             enum wst_rm_dtype dtype);

/* Every tensor's bytes, and how many tensors (copies counted). */
uint64_t wst_rm_model_bytes(const struct wst_rm_model *m, uint64_t *tensors_p);

/* An engine's parallel layout. ep 0: experts split over tp (vLLM without
 * expert parallelism, by the intermediate dim). */
struct wst_rm_layout {
    uint64_t tp, ep, pp, dp;
};

/* Bytes one GPU of stage 'stage' holds, by kind. */
struct wst_rm_gpu_bytes {
    uint64_t replicated; /* REPL */
    uint64_t sharded;    /* TP, KV, VOCAB */
    uint64_t experts;    /* EXPERT */
    uint64_t total;
    uint64_t tensors;     /* tensor pieces it holds (plan items, at least) */
    uint64_t last_layer;  /* bytes of the stage's last layer */
    uint64_t last_expert; /* expert bytes of the stage's last layer */
};

/* The bytes of one GPU of pipeline stage 'stage' (0..pp-1).
 * WST_ERR_INVALID when the layout is malformed (a zero, ep not dividing
 * the experts, pp above the layers). */
wst_status_t wst_rm_gpu_bytes(const struct wst_rm_model *m,
                              const struct wst_rm_layout *lay, uint64_t stage,
                              struct wst_rm_gpu_bytes *out, char *err,
                              size_t errlen);

/* What the time model takes besides the model; every rate in GB/s (1e9
 * bytes per second), every time in seconds. */
struct wst_rm_inputs {
    struct wst_rm_layout trainer, inference;
    uint64_t trainer_gpus, inference_gpus; /* 0: the layout's product */
    double nic_gbit;                       /* one NIC, Gb/s */
    double trainer_nics_per_gpu, inference_nics_per_gpu; /* may be < 1 */
    double wire_efficiency;    /* perftest vs line rate on that NIC */
    double wstream_efficiency; /* wstream vs perftest (wstream-bench) */
    int bounce;                /* no GPUDirect: GPU<->host pinned copies */
    double copy_gbps;          /* pinned copy rate (bounce only) */
    double nvlink_gbps;        /* 0: no NVLink */
    double local_fraction;     /* share of a GPU's bytes from its node */
    double repack_gbps, digest_gbps; /* 0: hidden */
    double plan_us_per_item;
    uint64_t plan_items; /* 0: estimated (tensor pieces per receiver) */
    double plan_s;       /* > 0: a measured plan time, used as it is */
    uint64_t live_bytes; /* > 0: bytes all inference GPUs take together,
                            measured (a demo's live_bytes); each GPU's is
                            its even share, the model's breakdown kept */
    double rtt_s;
    uint64_t round_trips;
    double commit_s;
    double agent_cpu_us;           /* per sender and layer; 0: not counted */
    double sender_cpu_us;          /* per receiver and layer; 0: idem */
    uint64_t senders_per_receiver; /* 0: every trainer GPU */
    double host_cores;             /* > 0: every process shares these cores */
};

struct wst_rm_prediction {
    struct wst_rm_gpu_bytes gpu; /* the fullest stage's GPU (its total
                                    the even share of live_bytes when
                                    given) */
    int bytes_given;             /* live_bytes was given */
    uint64_t worst_stage;
    uint64_t inference_gpus, trainer_gpus;
    uint64_t total_in;                  /* into every inference GPU together */
    uint64_t per_sender;                /* out of each trainer GPU */
    double line_in_gbps, line_out_gbps; /* NICs of a GPU at line rate */
    double rate_in_gbps, rate_out_gbps; /* at the efficiencies */
    double recv_s, send_s;              /* each side's NIC time */
    double nvlink_s;                    /* the NVLink share's time */
    double transfer_s;                  /* the slowest of those */
    double floor_s;                     /* bytes at line rate, nothing else */
    uint64_t plan_items;
    int plan_items_estimated;
    double plan_s, control_s, tail_s, commit_s;
    uint64_t senders_in;   /* senders each receiver hears */
    uint64_t stage_layers; /* layers of the fullest stage */
    double agent_cpu_s;    /* its progress thread's CPU per refit */
    double receivers_out;  /* receivers each sender sends to */
    double sender_cpu_s;   /* a sender's, likewise */
    double shared_cpu_s;   /* everyone's CPU over host_cores; 0: none */
    double cpu_s;          /* the largest of the three */
    double steady_s, first_s;
};

/* The prediction for 'in' on 'm'. WST_ERR_INVALID (with 'err') for inputs
 * that make no sense: zero GPUs or NICs, efficiencies outside (0, 1.5],
 * a GPU count that disagrees with its layout, a local fraction outside
 * [0, 1] or one above 0 without NVLink. */
wst_status_t wst_rm_predict(const struct wst_rm_model *m,
                            const struct wst_rm_inputs *in,
                            struct wst_rm_prediction *out, char *err,
                            size_t errlen);

#endif
