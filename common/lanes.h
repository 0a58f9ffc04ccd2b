/* lanes.h - the lanes of a data endpoint: which transports UCX chose for
 * it, described for the log, and whether puts on it run in hardware.
 *
 * The decision comes from the transports' UCT attributes
 * (transports.h), not from the roles UCX prints: a put runs in hardware
 * when one of the endpoint's lanes is a network or shared-memory
 * transport whose memory domain registers host memory and whose
 * interface does put short and bcopy, get bcopy and has a pending queue
 * (and peer-failure handling when the endpoint asks for it). Those are
 * the flags UCP 1.13 requires of a lane before it gives it the "rma" role
 * for registered memory (ucp_wireup_add_rma_lanes); without such a lane
 * it emulates puts over active messages. RDMA transports (rc, dc) pass;
 * tcp (zero-copy put only), cma and knem (zero-copy only: they serve
 * rendezvous, not put) and posix/sysv (no registration) do not.
 *
 * Which transports the endpoint uses has no query in UCX 1.13
 * (ucp_ep_query learned UCP_EP_ATTR_FIELD_TRANSPORTS in 1.14): their
 * names and roles are read from ucp_ep_print_info's lane lines. Only the
 * "tl/device" names count for the decision; a line that does not parse
 * loses a lane, which can only turn the answer to "no" (the am mover).
 */
#ifndef WST_LANES_H
#define WST_LANES_H

#include <stddef.h>
#include <stdint.h>
#include <ucp/api/ucp.h>

#include "transports.h"

#define WST_LANES_MAX 16

/* One lane of an endpoint. */
struct wst_lane {
    char name[UCT_TL_NAME_MAX + UCT_DEVICE_NAME_MAX + 2]; /* "tl/device" */
    char roles[128]; /* "am,am_bw", as UCX prints them, '#n' dropped */
};

/* Reads ep's lanes into lanes[0..max); returns how many were read. */
size_t wst_lanes_read(ucp_ep_h ep, struct wst_lane *lanes, size_t max);

/* "sysv/memory[am,am_bw] posix/memory[] cma/memory[rma_bw]" into out
 * (truncated to outlen). */
void wst_lanes_format(const struct wst_lane *lanes, size_t n, char *out,
                      size_t outlen);

/* 1 when one of 'lanes' is a transport of 'transports' (from
 * wst_transports_probe) that puts to registered memory in hardware, 0
 * otherwise; peer_errors: the endpoint has UCP_ERR_HANDLING_MODE_PEER.
 * The reason, naming the transports, goes to 'why' (truncated to
 * why_len). */
int wst_lanes_rma_real(const struct wst_lane *lanes, size_t n_lanes,
                       const struct wst_transport *transports,
                       size_t n_transports, int peer_errors, char *why,
                       size_t why_len);

/* 1 when one of 'transports' puts to registered memory in hardware (the
 * rule above, for a lane of it without peer-failure handling); the reason,
 * naming them, goes to 'why' (truncated to why_len). */
int wst_transports_rma_real(const struct wst_transport *transports,
                            size_t n_transports, char *why, size_t why_len);

/* 1 when one of 'lanes' puts into a peer's device memory in hardware: a
 * network or intra-node transport of 'transports' whose memory domain
 * registers CUDA memory with a remote key (reg_cuda) and whose interface
 * does zero-copy put (and peer-failure handling when 'peer_errors'):
 * cuda_ipc within a host, an RDMA transport with GPUDirect across hosts.
 * UCX 1.18 gives such a lane the rma_bw role for CUDA memory; without one
 * it would emulate a put into device memory over active messages, which
 * a receiver that offers no RMA does not serve. The reason goes to 'why'
 * (truncated to why_len). */
int wst_lanes_device_put(const struct wst_lane *lanes, size_t n_lanes,
                         const struct wst_transport *transports,
                         size_t n_transports, int peer_errors, char *why,
                         size_t why_len);

/* wst_lanes_device_put with every transport judged as a lane would be
 * (no peer-failure handling asked for). */
int wst_transports_device_put(const struct wst_transport *transports,
                              size_t n_transports, char *why, size_t why_len);

/* Nonzero when a UCP context's memory_types (ucp_context_attr_t, field
 * UCP_ATTR_FIELD_MEMORY_TYPES) include UCS_MEMORY_TYPE_CUDA. Only that bit
 * counts: CUDA_MANAGED support alone does not let UCX register the
 * cudaMalloc'd memory that weights and staging live in. The raw mask is a
 * local value: never send it (UCX renumbered memory types between versions);
 * send this answer instead. */
int wst_ucx_mem_types_have_cuda(uint64_t memory_types);

/* 1 when a UCX of version major.minor runs its new protocols
 * (UCX_PROTO_ENABLE, on by default from 1.16) under the environment's
 * UCX_PROTO_ENABLE ('env'; NULL when unset; UCX's spellings of yes and
 * no, any case), 0 otherwise. Over tcp they move a rendezvous with
 * peer-failure handling, as the data endpoints have it, at under half
 * the old protocols' rate (NOTES.md, UCX 1.18 on the 2-core VM). */
int wst_ucx_proto_v2(unsigned major, unsigned minor, const char *env);

/* 1 when wstream asks a UCX of version major.minor for its old protocols
 * itself: the environment leaves UCX_PROTO_ENABLE unset ('env' NULL), the
 * new ones would run, and the UCX moves no device memory ('cuda' 0), so
 * the new ones would only slow its tcp data. A CUDA-aware UCX keeps them:
 * the direct GPU path was measured with them. */
int wst_ucx_old_protocols(unsigned major, unsigned minor, const char *env,
                          int cuda);

/* The receive segment wstream gives UCX's tcp transport when
 * UCX_TCP_RX_SEG_SIZE is unset (UCX's own default: 64 KiB). With
 * peer-failure handling, as the data endpoints have it, UCX moves a
 * rendezvous over tcp in fragments of one segment; 1 MiB fragments moved
 * a refit over tcp ~30% faster on the 2-core VM (NOTES.md). */
#define WST_UCX_TCP_RX_SEG (1ull << 20)

/* A size as UCX reads one (ucs_str_to_memunits): digits, then optionally
 * one of b, k, m, g, t (any case), optionally followed by b ("64k",
 * "64KB", "1m", "65536"). 0 and *bytes_p set on success; -1 for anything
 * else, "inf" and "auto" among them, and on overflow. */
int wst_ucx_memunits_parse(const char *s, uint64_t *bytes_p);

/* UCX's own default tcp receive segment (1.13 to 1.18). */
#define WST_UCX_TCP_RX_SEG_UCX (64ull << 10)

/* The key that sets the tcp receive segment through ucp_config_modify in
 * a UCX of version major.minor, or NULL where it is not known. UCP hands a
 * key it does not know to the transports' configs: UCX 1.13 matches it
 * against the field's own name ("RX_SEG_SIZE"), 1.18 against the name
 * with the transport's prefix ("TCP_RX_SEG_SIZE"), and warns about a key
 * nothing took. Both were checked by what a larger fragment does to a
 * receiver (NOTES.md); versions between were not run here. */
const char *wst_ucx_tcp_seg_key(unsigned major, unsigned minor);

/* The tcp receive segment this process's UCX runs with: 'env' is
 * UCX_TCP_RX_SEG_SIZE; when it is unset (NULL), WST_UCX_TCP_RX_SEG where
 * the workers set it ('settable': wst_ucx_tcp_seg_key knows the version),
 * else UCX's default. 0 when 'env' does not parse here (unknown). */
uint64_t wst_ucx_tcp_rx_seg(const char *env, int settable);

/* 1 when a sender whose UCX runs tcp receive segments of 'sender' bytes
 * may send data to a receiver whose UCX runs 'receiver' (0: unknown, not
 * checked). UCX sizes a fragment by its own segment and the peer
 * receives it into a buffer sized by the peer's: a larger fragment trips
 * an assertion in UCX's tcp transport and aborts the receiver (UCX 1.13,
 * tcp_ep.c; without assertions it would overrun the buffer). */
int wst_ucx_tcp_seg_fits(uint64_t sender, uint64_t receiver);

#endif
