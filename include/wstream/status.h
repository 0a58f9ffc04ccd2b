/* wstream/status.h - status codes and the small enums shared by the public API.
 *
 * Every wstream function returns a wst_status_t: WST_OK (0), WST_INPROGRESS
 * (1) or a negative error. The list below is the single source of truth: the
 * enum and its message table are both generated from it. Values are part of
 * the wire protocol (ERROR messages carry them) and of the CLI exit codes
 * (exit code = -status), so never renumber an entry; append new ones.
 */
#ifndef WSTREAM_STATUS_H
#define WSTREAM_STATUS_H

#ifdef __cplusplus
extern "C" {
#endif

/* X(name, value, message) */
#define WST_STATUS_LIST(X)                                                     \
    X(WST_OK, 0, "success")                                                    \
    X(WST_INPROGRESS, 1, "operation in progress")                              \
    X(WST_ERR_NO_MEMORY, -1, "out of memory")                                  \
    X(WST_ERR_INVALID, -2, "invalid argument")                                 \
    X(WST_ERR_PROTOCOL, -3, "protocol error")                                  \
    X(WST_ERR_VERSION, -4, "protocol version mismatch")                        \
    X(WST_ERR_TIMED_OUT, -5, "timed out")                                      \
    X(WST_ERR_UNREACHABLE, -6, "peer unreachable")                             \
    X(WST_ERR_UNSUPPORTED_LAYOUT, -7, "unsupported layout")                    \
    X(WST_ERR_INTEGRITY, -8, "integrity check failed")                         \
    X(WST_ERR_UNUSABLE, -9, "receiver unusable")                               \
    X(WST_ERR_NO_DEVICE, -10, "no CUDA device")                                \
    X(WST_ERR_CANCELED, -11, "canceled")                                       \
    X(WST_ERR_DTYPE_MISMATCH, -12, "dtype mismatch")                           \
    X(WST_ERR_SHAPE_MISMATCH, -13, "shape mismatch")                           \
    X(WST_ERR_COVERAGE, -14, "coverage gap")                                   \
    X(WST_ERR_IO, -15, "input/output error")                                   \
    X(WST_ERR_TRANSPORT, -16, "transport error")                               \
    X(WST_ERR_PEER_FAILED, -17, "peer failed")                                 \
    X(WST_ERR_CONFIG, -18, "bad configuration")                                \
    X(WST_ERR_NON_LINEAR_PLACEMENT, -19, "non-linear expert placement")        \
    X(WST_ERR_EXPERT_SHARDING, -20,                                            \
      "experts sharded on a non-expert dimension")                             \
    X(WST_ERR_EXPERT_DIVISIBILITY, -21, "expert count not divisible by ep")    \
    X(WST_ERR_REPACK_SHAPE, -22, "repack layout shape constraint violated")    \
    X(WST_ERR_UNSUPPORTED, -23, "not supported")                               \
    X(WST_ERR_BUSY, -24, "busy")                                               \
    X(WST_ERR_TOO_LARGE, -25, "message or value too large")                    \
    X(WST_ERR_NOT_FOUND, -26, "not found")                                     \
    X(WST_ERR_STATE, -27, "operation not valid in this state")                 \
    X(WST_ERR_STALE_VERSION, -28, "version not above the committed one")

typedef enum {
#define WST_STATUS_ENUM_(name, value, msg) name = value,
    WST_STATUS_LIST(WST_STATUS_ENUM_)
#undef WST_STATUS_ENUM_
} wst_status_t;

/* Static message for a status; "unknown status" for values not in the list.
 * The returned string is owned by the library and never freed. */
const char *wst_status_string(wst_status_t status);

/* The status's enum name ("WST_ERR_TIMED_OUT"), or NULL if unknown. */
const char *wst_status_name(wst_status_t status);

/* Nonzero when 'value' is one of the listed statuses (used to validate
 * statuses that arrive from a peer). */
int wst_status_is_known(int value);

/* A version's label ("step-1200", a run or git id): at most
 * WST_LABEL_MAX - 1 bytes of printable ASCII without spaces (0x21..0x7e);
 * "" is no label. Senders push it with a version, receivers keep it with
 * their committed version. */
#define WST_LABEL_MAX 64 /* bytes, the NUL included */

/* Element types. Values travel on the wire: append only. */
#define WST_DTYPE_LIST(X)                                                      \
    X(WST_DTYPE_BF16, 1, "bf16", 2)                                            \
    X(WST_DTYPE_F16, 2, "f16", 2)                                              \
    X(WST_DTYPE_F32, 3, "f32", 4)                                              \
    X(WST_DTYPE_F64, 4, "f64", 8)                                              \
    X(WST_DTYPE_FP8_E4M3, 5, "fp8_e4m3", 1)                                    \
    X(WST_DTYPE_FP8_E5M2, 6, "fp8_e5m2", 1)                                    \
    X(WST_DTYPE_I8, 7, "i8", 1)                                                \
    X(WST_DTYPE_U8, 8, "u8", 1)                                                \
    X(WST_DTYPE_I32, 9, "i32", 4)                                              \
    X(WST_DTYPE_I64, 10, "i64", 8)

enum wst_dtype {
    WST_DTYPE_INVALID = 0,
#define WST_DTYPE_ENUM_(name, value, str, size) name = value,
    WST_DTYPE_LIST(WST_DTYPE_ENUM_)
#undef WST_DTYPE_ENUM_
};

/* Where a buffer lives. Values travel on the wire: append only. Both
 * sides check a declared type against the pointer (with CUDA) and refuse
 * a mismatch: handing UCX a device pointer it cannot read crashes it. */
enum wst_mem_type {
    WST_MEM_HOST = 1,
    WST_MEM_CUDA = 2,
};

#ifdef __cplusplus
}
#endif
#endif /* WSTREAM_STATUS_H */
