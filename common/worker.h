/* worker.h - the UCX context and worker, owned by one progress thread.
 *
 * One wst_worker per process side (sender or receiver). Its progress thread
 * creates the UCX context and worker, owns every endpoint and listener, and
 * is the only thread that calls UCX. Other threads reach it through
 * wst_worker_post (asynchronous) or wst_worker_call (synchronous); both wake
 * the thread through an eventfd. When idle the thread sleeps in epoll on the
 * worker's event fd (UCP_FEATURE_WAKEUP) and that eventfd, waking at least
 * every tick to run the owner's tick callback (heartbeats, deadlines).
 *
 *     API thread ──post(fn,arg)──▶ queue ─eventfd─▶ progress thread
 *                                                   ├ ucp_worker_progress
 *                                                   ├ AM handlers → ops
 *                                                   └ tick → ops.tick
 *
 * Connections: a wst_conn is one control channel -- a TCP socket of ours,
 * authenticated by a handshake over the deployment's secret (handshake.h),
 * carrying one encoded proto message per MAC'd frame (frame.h) -- plus, on
 * the connecting side, an optional UCX data endpoint created from the
 * peer's worker address (which only travels over the authenticated
 * channel). Data for the AM mover are active messages WST_AM_DATA with a
 * struct wst_data_hdr header. No UCX listener: a peer reaches our UCX
 * worker only after it authenticated.
 *
 * Every function marked "progress thread" must only be called there (from
 * an ops callback or a posted function).
 */
#ifndef WST_WORKER_H
#define WST_WORKER_H

#include <stddef.h>
#include <stdint.h>
#include <ucp/api/ucp.h>
#include <wstream/status.h>

#include "auth.h"
#include "log.h"

typedef struct wst_worker wst_worker_t;
typedef struct wst_conn wst_conn_t;

enum {
    WST_AM_DATA = 2, /* 1 was the control message, now a socket frame */
};

/* Header of a data active message. Peers are assumed to share byte order
 * (the protocol targets little-endian x86_64 and aarch64 only). */
struct wst_data_hdr {
    /* The receiver's secret for the sending peer (its plan's data token):
     * data is taken only from whoever got that peer's plan on its own
     * control connection, whatever rank a message claims. */
    uint64_t token;
    uint32_t rank;    /* the sending peer's rank */
    uint32_t item;    /* index into that peer's plan items */
    uint64_t offset;  /* bytes into the item (items move in chunks) */
    uint64_t version; /* refit version the bytes belong to */
    uint32_t count;   /* items [item, item + count) back to back, whose
                         destinations follow each other (offset 0); 1 for
                         a chunk of one item */
    uint32_t flags;   /* WST_DATA_*; a receiver refuses other bits */
};

/* Flags of a data message. SCATTER: the 'count' items are whole, back to
 * back in the message, but their destinations need not follow each other
 * (each lands at its own place); always eager, at most WST_SCATTER_BYTES,
 * host destinations only, and only to a receiver whose plan offered it
 * (WST_CAP_SCATTER). Many small items of one layer then go as one
 * message instead of one each, which is what a refit from hundreds of
 * FSDP shards is made of. */
#define WST_DATA_SCATTER 1u
#define WST_DATA_FLAGS_ALL WST_DATA_SCATTER
#define WST_SCATTER_BYTES (64u * 1024u)

/* Callbacks, all invoked on the progress thread with ops.arg. Any may be
 * NULL. Connections passed in stay valid until wst_conn_close. */
struct wst_worker_ops {
    void *arg;
    /* A peer connected to our listener and authenticated. */
    void (*accepted)(void *arg, wst_conn_t *conn);
    /* One control message; buf is valid only during the call. */
    void (*message)(void *arg, wst_conn_t *conn, const void *buf, size_t len);
    /* The connection failed (peer died, unreachable, ...). Called once. */
    void (*conn_failed)(void *arg, wst_conn_t *conn, wst_status_t status,
                        const char *why);
    /* A data message arrived: return WST_OK with *dest_p the place for its
     * 'len' bytes; WST_ERR_BUSY when there is no room for it yet (the
     * message is parked, with every later one behind it, until the owner
     * calls wst_worker_data_resume); or another error to drop it (then
     * data_done is not called). 'rndv' is nonzero for a rendezvous
     * message, whose bytes UCX itself moves into *dest_p (device memory
     * too, with a CUDA-aware UCX); an eager one's bytes are copied there
     * with memcpy, so its place must be host memory. */
    wst_status_t (*data_dest)(void *arg, const struct wst_data_hdr *hdr,
                              size_t len, int rndv, void **dest_p);
    /* The bytes of an accepted data message are at 'dest' (or failed;
     * dest is NULL when the message never got one). */
    void (*data_done)(void *arg, const struct wst_data_hdr *hdr, void *dest,
                      size_t len, wst_status_t status);
    /* Periodic, every tick_ms. */
    void (*tick)(void *arg);
};

/* Encodes heartbeat number SEQ of a connection into a new malloc'd buffer
 * (*msg_p, *len_p) that the worker sends and frees. Progress thread. */
typedef wst_status_t (*wst_heartbeat_encode_fn)(uint64_t seq, void **msg_p,
                                                size_t *len_p);

/* Liveness of control connections. Every interval the worker sends a
 * heartbeat on each connection, numbered 1, 2, ... per connection and
 * encoded by the owner's 'encode' (common/ knows no message format); a
 * connection that has received no control message for 'timeout' fails
 * with WST_ERR_TIMED_OUT (conn_failed), which is what catches a stopped
 * or partitioned peer: TCP may not notice for minutes. */
struct wst_heartbeat_params {
    double interval_s;              /* 0: no heartbeats */
    double timeout_s;               /* silence that fails a connection */
    wst_heartbeat_encode_fn encode; /* NULL: no heartbeats */
};

/* Whether the worker offers remote memory access (UCP_FEATURE_RMA). UCX
 * 1.13 emulates RMA over transports that have none in hardware (tcp,
 * shared memory) and then writes wherever a peer's put says, whatever
 * memory its remote key was packed for: any process that reaches the
 * worker could write or read live weights. Only a transport that puts in
 * hardware (lanes.h: RDMA) checks the key. */
enum wst_worker_rma {
    WST_WORKER_RMA_HARDWARE, /* offered only where a transport puts in
                                hardware (the default) */
    WST_WORKER_RMA_NEVER,
    WST_WORKER_RMA_ALWAYS, /* also emulated: the put mover's own tests */
    /* As HARDWARE, and also where a transport puts into a peer's device
     * memory in hardware (lanes.h, wst_lanes_device_put: cuda_ipc). For
     * a process that only puts (a sender): its UCX then also serves
     * emulated RMA over tcp, but only to the receivers it connected to
     * and authenticated; a receiver, which anyone may reach, never asks
     * for it (cuda_ipc needs nothing of the target's UCX but the key). */
    WST_WORKER_RMA_INITIATOR,
};

/* Data lanes a worker may have (wst_worker_params.lanes). */
#define WST_WORKER_LANES_MAX 8
#define WST_WORKER_DEVICES_MAX 16 /* entries of lane_devices */
#define WST_WORKER_DEVICE_MAX 64  /* bytes of one, with its NUL */

struct wst_worker_params {
    const struct wst_logger *log; /* borrowed for the worker's lifetime */
    struct wst_worker_ops ops;
    unsigned tick_ms;       /* 0: 100 */
    size_t max_control_msg; /* bytes; larger control messages are refused */
    struct wst_heartbeat_params heartbeat;
    enum wst_worker_rma rma;
    /* The deployment's secret (copied); NULL or empty: insecure (peers
     * without a secret only, and the listener says so in the log). */
    const struct wst_auth_secret *secret;
    /* An IPv4 address or host (copied): UCX's network transports use only
     * the interface that has it (UCX_NET_DEVICES), unless the environment
     * sets UCX_NET_DEVICES. NULL, "" or "0.0.0.0": every interface. */
    const char *confine_ip;
    /* Data lanes, 1..WST_WORKER_LANES_MAX (0: 1; wst_worker_lanes_auto
     * gives the measured default). Lane 0 is this worker's
     * own UCX worker; each further lane is a UCX context and worker of
     * its own with its own progress thread, which carries a share of the
     * am mover's data messages (see "Data lanes" below). */
    unsigned lanes;
    /* Network devices for the lanes, as UCX names them ("mlx5_0:1",
     * "eth1"), comma-separated (copied): lane i's UCX context uses entry
     * i mod n only (UCX_NET_DEVICES), lane 0 included; so with one entry
     * per NIC and at least as many lanes, every NIC carries a share. It
     * takes the place of confine_ip; UCX_NET_DEVICES in the environment
     * wins over both. NULL or "": none (confine_ip applies). At most
     * WST_WORKER_DEVICES_MAX entries of WST_WORKER_DEVICE_MAX - 1
     * characters each, of letters, digits and "_.:-"; anything else fails
     * wst_worker_create with WST_ERR_INVALID. */
    const char *lane_devices;
};

typedef void (*wst_worker_fn)(void *arg);

/* Starts the progress thread, which creates the UCX context and worker.
 * On success *worker_p is owned by the caller (wst_worker_destroy). */
wst_status_t wst_worker_create(const struct wst_worker_params *params,
                               wst_worker_t **worker_p);

/* Whether the worker offers RMA (the params' rule applied to this
 * process's transports); why says so, naming them. Any thread, after
 * create. Borrowed: valid for the worker's lifetime. */
int wst_worker_has_rma(const wst_worker_t *worker, const char **why_p);

/* Stops the thread after force-closing every connection and listener. Must
 * not be called from the progress thread. */
void wst_worker_destroy(wst_worker_t *worker);

/* Runs fn(arg) on the progress thread, later. Any thread. */
wst_status_t wst_worker_post(wst_worker_t *worker, wst_worker_fn fn, void *arg);

/* Runs fn(arg) on the progress thread and returns after it ran. Not from the
 * progress thread. */
wst_status_t wst_worker_call(wst_worker_t *worker, wst_worker_fn fn, void *arg);

/* wst_worker_call on the progress thread, then on each data lane's thread
 * in turn: for state of the calling thread that UCX relies on (a
 * CUDA-aware UCX 1.13 needs a current CUDA context on every thread that
 * calls it: gpu_worker.h). Not from any of the worker's threads. Stops at
 * the first failure. */
wst_status_t wst_worker_call_each_thread(wst_worker_t *worker, wst_worker_fn fn,
                                         void *arg);

/* Progress thread: listen on host:port (port 0 picks one); the bound port
 * goes to *port_p. Peers are handed to ops.accepted once their handshake
 * is done; others are dropped with a log line naming them. */
wst_status_t wst_worker_listen(wst_worker_t *worker, const char *host,
                               uint16_t port, uint16_t *port_p);

/* Progress thread: offers parked data messages (data_dest said
 * WST_ERR_BUSY) to data_dest again, in arrival order, until it is busy
 * again or none is left. */
void wst_worker_data_resume(wst_worker_t *worker);

/* Control messages a worker sent (queued on a connection) and delivered
 * to its owner, and their payload bytes (each frame adds WST_FRAME_HEAD and
 * a MAC on the wire), heartbeats included, over its whole life. Counted on
 * the progress thread; any thread may read them (relaxed atomics): the
 * scale test divides their growth over a refit by the peers. */
struct wst_control_counts {
    uint64_t msgs_out, bytes_out;
    uint64_t msgs_in, bytes_in;
};

/* Any thread: a snapshot of the counts (each field read atomically). */
void wst_worker_control_counts(const wst_worker_t *worker,
                               struct wst_control_counts *out);

/* Where the time of rendezvous data messages went, over the messages
 * reported since the last take (their receives ended): sums of each
 * stage's nanoseconds. A message that came on a data lane goes
 *   arrived (lane) -> placed (main: data_dest answered, parking
 *   included) -> receive posted (lane) -> received (lane) -> reported
 *   (main);
 * one on lane 0 is placed as it arrives and reported as it is received.
 * Progress thread; for a log line per refit. */
struct wst_rx_timing {
    uint64_t messages, bytes;
    uint64_t to_place_ns, to_post_ns, to_recv_ns, to_report_ns;
    uint64_t max_ns; /* the longest arrival-to-report */
};
void wst_worker_rx_timing_take(wst_worker_t *worker, struct wst_rx_timing *out);

/* Progress thread: how many data messages have been parked so far. */
uint64_t wst_worker_parked_total(const wst_worker_t *worker);

/* Progress thread: replaces the UCX worker that data arrives on with a
 * new one, which has a new address. UCX 1.13 cannot cancel a posted
 * rendezvous receive, and such a receive may still be writing its
 * destination long after the refit it belonged to failed (a stopped
 * sender resumes): the old worker is never progressed again, so none of
 * them writes another byte where our progress does the writing (tcp,
 * shared memory; not a NIC's put into memory whose registration the
 * context keeps: RDMA is not covered). Meant for a receiving worker: one
 * with data endpoints of its own fails their connections. It is kept, not
 * destroyed (UCX asserts on destroying a worker whose endpoints track
 * receives), until the process exits: at most 16 (wst_worker_data_reset_room
 * says how many more; at 0 this does nothing). Each receive is reported to
 * data_done as WST_ERR_CANCELED; parked messages are dropped; every connection
 * with a data endpoint of its own fails. Peers reach the new address only by
 * connecting again (the receiver's HELLO carries it). Called inside UCX's
 * progress (a data callback), it happens as soon as progress returns.
 * Returns 1 when this call made or scheduled a reset, 0 when one was
 * already due or none can be made. */
int wst_worker_data_reset(wst_worker_t *worker);
int wst_worker_data_reset_room(const wst_worker_t *worker);

/* Progress thread: data receives posted and not yet reported. */
size_t wst_worker_data_receiving(const wst_worker_t *worker);

/* Progress thread: this worker's address (owned by the worker; changed
 * by wst_worker_data_reset). When a reset could not make its new worker,
 * this tries again, and the address is empty if that fails too. */
wst_status_t wst_worker_address(wst_worker_t *worker, const void **addr_p,
                                size_t *len_p);

/* Any thread (context-level): register memory once. */
wst_status_t wst_worker_mem_map(wst_worker_t *worker, void *ptr, size_t len,
                                ucp_mem_h *memh_p);
void wst_worker_mem_unmap(wst_worker_t *worker, ucp_mem_h memh);

/* Any thread: pack a remote key into a new malloc'd buffer. */
wst_status_t wst_worker_rkey_pack(wst_worker_t *worker, ucp_mem_h memh,
                                  void **buf_p, size_t *len_p);

/* Any thread: nonzero when the context can register CUDA device memory
 * (UCP_ATTR_FIELD_MEMORY_TYPES has UCS_MEMORY_TYPE_CUDA, tested by
 * wst_ucx_mem_types_have_cuda). Queried once when the context is created. */
int wst_worker_supports_cuda(const wst_worker_t *worker);

/* 1 when this process's workers ask UCX for its old protocols
 * (UCX_PROTO_ENABLE=n) by wstream's rule, wst_ucx_old_protocols in
 * lanes.h: the variable unset, a UCX that would run its new ones, and no
 * device memory moved by it. Asks UCX with a context of its own when the
 * version and the variable leave it open: once per process, not per
 * message. A tool that compares wstream with ucx_perftest gives perftest
 * the same protocols. Any thread. */
int wst_worker_old_protocols(void);

/* Any thread: the size of UCX's tcp receive segments in this worker
 * (wst_ucx_tcp_rx_seg in lanes.h; 0: unknown). A hello carries it so that
 * a receiver can refuse a sender whose tcp fragments would not fit its
 * buffers (wst_ucx_tcp_seg_fits). */
uint64_t wst_worker_tcp_rx_seg(const wst_worker_t *worker);

/* The tcp receive segment this process's workers set in their UCX
 * configs, or 0 when they set none (UCX_TCP_RX_SEG_SIZE set, or a UCX
 * version whose key is not known: lanes.h). A tool that compares wstream
 * with ucx_perftest gives perftest the same. Any thread. */
uint64_t wst_worker_tcp_rx_seg_set(void);

/* Progress thread: count UCX requests in flight (delta +1 / -1). While
 * any are, the thread sleeps at most 1 ms between progress calls: some
 * completions (a flush over shared memory, a cma transfer) raise no event
 * on the worker's fd and would otherwise wait for the next tick. */
void wst_worker_busy(wst_worker_t *worker, int delta);

/* Progress thread: connect a control channel to host:port. The connection
 * is owned by the worker until wst_conn_close. Messages sent before its
 * handshake is done are queued; a failed handshake (another secret, an
 * insecure peer) reaches ops.conn_failed with the reason. */
wst_status_t wst_conn_connect(wst_worker_t *worker, const char *host,
                              uint16_t port, wst_conn_t **conn_p);

/* Progress thread: send one control message; takes ownership of the
 * malloc'd buf (freed when the send completes or fails). */
wst_status_t wst_conn_send(wst_conn_t *conn, void *buf, size_t len);

/* Progress thread: open the data endpoint to the peer's worker address.
 * peer_errors selects UCP_ERR_HANDLING_MODE_PEER (not available on shared
 * memory in UCX 1.13: asking for it moves traffic to TCP). The chosen lanes
 * are described in 'lanes' (e.g. "posix/memory[am,am_bw] cma/memory[rma_bw]")
 * and *rma_real_p says whether puts run on a real RMA lane (not emulated over
 * AM, as UCX 1.13 does on TCP and shared memory), decided from the
 * transports' UCT attributes (lanes.h); wst_conn_rma_why says why. */
wst_status_t wst_conn_open_data(wst_conn_t *conn, const void *addr,
                                size_t addr_len, int peer_errors, char *lanes,
                                size_t lanes_len, int *rma_real_p);

/* The data endpoint, or NULL before wst_conn_open_data. */
ucp_ep_h wst_conn_data_ep(wst_conn_t *conn);

/* Progress thread, also from inside callbacks: force-close both endpoints
 * once the current progress call has returned; the connection is freed once
 * UCX has released it. No callback fires for it after this returns. A data
 * endpoint without peer-failure mode stays open until the worker is
 * destroyed (conn_close.c says why). */
void wst_conn_close(wst_conn_t *conn);

/* Progress thread: like wst_conn_close, but the endpoints stay open for
 * 'linger_s' so that messages just sent (an ERROR explaining why we hang
 * up) reach the peer; a force close cancels them. No callback fires for
 * the connection after this returns, and nothing more can be sent. */
void wst_conn_close_later(wst_conn_t *conn, double linger_s);

/* Progress thread: nanoseconds since conn last received a message
 * (heartbeats included). */
uint64_t wst_conn_silent_ns(const wst_conn_t *conn);

/* Progress thread: bytes conn's control channel holds for receiving (its
 * buffer's size: grown for a large message, given back after it). */
size_t wst_conn_rx_held(const wst_conn_t *conn);

void wst_conn_set_user(wst_conn_t *conn, void *user);
void *wst_conn_user(const wst_conn_t *conn);

/* "10.0.0.7:40123" for accepted peers, "host:port" for connected ones. */
const char *wst_conn_name(const wst_conn_t *conn);

/* ---- Data lanes ----
 *
 * A refit's data messages striped over several UCX workers, each
 * progressed by a thread of its own (the bytes of one message are moved by
 * one thread: over tcp its socket copies, over shared memory its cma
 * reads). Lane 0 is the worker itself; lanes 1.. have their own context
 * and worker (so that each can be confined to a NIC of its own). Control
 * stays on the worker's own thread, and so does every callback: a data
 * message that arrives on a lane is offered to ops.data_dest and reported
 * to ops.data_done on the progress thread, as one on lane 0 is, and its
 * bytes are then received by the lane's thread. A lane's thread never
 * waits for the progress thread (it only posts to it), so the progress
 * thread may wait for a lane. A data reset (wst_worker_data_reset) resets
 * every lane; wst_worker_data_receiving counts their receives too.
 */

/* Data lanes for a worker asked for 0 ("auto"): one for every two CPUs
 * this process may run on, 1..WST_WORKER_LANES_MAX. Measured (NOTES.md,
 * issue 17): on a 16-core host, sender and agent on it, 1/2/4/8 lanes
 * refit at 3.3/5.5/7.3-8.1/10.0-10.7 GB/s over tcp and 4.0-4.6/6.6-7.0/
 * 7.6-8.6/10.1-10.5 over shared memory; on a 2-core VM 2 lanes were
 * slower than 1 (1.54-1.64 against 1.74-1.88 GB/s). */
unsigned wst_worker_lanes_auto(void);

/* Hashing threads for a side that streams over 'lanes' data lanes (a
 * sender's digest_threads, an agent's verify_threads, asked for 0):
 * three for every four lanes, at least 2. Measured (NOTES.md, issue 17)
 * on the 16-core host with 8 lanes: with 2 threads a side the hashing
 * held a refit to 6.8-10.2 GB/s over shared memory, with 6 it ran
 * 12.0-15.4; with 4 lanes 2 to 8 threads made no difference. */
unsigned wst_worker_hash_threads_auto(unsigned lanes);

/* A sender's bytes in flight per receiver over 'lanes' data lanes (its
 * window, asked for 0): 32 MiB a lane, at least 64 MiB, so that each lane
 * has several 8 MiB messages under way. Measured (NOTES.md, issue 17) on
 * the 16-core host with 8 lanes over shared memory: 64 MiB 14.4-14.5
 * GB/s, 256 MiB 15.2-15.9, 512 MiB 15.7-16.1; over tcp no difference.
 * The direct device path takes more (select.h, WST_DIRECT_WINDOW_MIN). */
uint64_t wst_worker_window_auto(unsigned lanes);

/* Checks a lane_devices list (wst_worker_params) and copies entry 'index'
 * mod its length into dev[WST_WORKER_DEVICE_MAX] ("" for NULL or "").
 * WST_ERR_INVALID, with why in err, for a list it would refuse. */
wst_status_t wst_worker_lane_device_pick(const char *list, unsigned index,
                                         char *dev, char *err, size_t errlen);

/* Checks a lane_devices list and copies it into dst[len] ("" for NULL);
 * WST_ERR_INVALID, logged on lg, for a list the worker would refuse or
 * one longer than dst. */
wst_status_t wst_worker_lane_devices_copy(const char *list, char *dst,
                                          size_t len,
                                          const struct wst_logger *lg);

/* Any thread: the network device lane 'lane' was confined to
 * (lane_devices), "" when none was (UCX's choice; also when
 * UCX_NET_DEVICES overrode it) or the lane does not exist. Owned by the
 * worker. */
const char *wst_worker_lane_device(const wst_worker_t *worker, unsigned lane);

/* Any thread: the worker's data lanes (1: lane 0 only). */
unsigned wst_worker_lanes(const wst_worker_t *worker);

/* Progress thread: copies the UCX address of lane 'lane' (1 <= lane <
 * wst_worker_lanes) into a new malloc'd buffer *addr_p of *len_p bytes,
 * owned by the caller. */
wst_status_t wst_worker_lane_address(wst_worker_t *worker, unsigned lane,
                                     void **addr_p, size_t *len_p);

/* Progress thread, after wst_conn_open_data: opens data endpoints from
 * lanes 1..n of this worker to the peer's lane addresses addrs[0..n) with
 * lengths lens[0..n) (lane i+1 to addrs[i]); n above this worker's lanes
 * minus one is cut to it. peer_errors as for wst_conn_open_data. A lane
 * endpoint's failure fails the connection (ops.conn_failed); closing the
 * connection closes them. */
wst_status_t wst_conn_open_lanes(wst_conn_t *conn, const void *const *addrs,
                                 const size_t *lens, unsigned n,
                                 int peer_errors);

/* Progress thread: the connection's data lanes: 1 + lanes opened by
 * wst_conn_open_lanes (1 when only lane 0, or none, is open). */
unsigned wst_conn_lanes(const wst_conn_t *conn);

/* Progress thread: wst_worker_busy for each data lane: a receiver polls
 * its lanes while a refit runs (a message arriving over shared memory
 * raises no event on a lane's fd either). */
void wst_worker_lanes_busy(wst_worker_t *worker, int delta);

/* Progress thread: the bytes of data messages that landed (status OK) on
 * each lane since the worker started, into bytes[0..n) (lanes beyond the
 * worker's read 0). */
void wst_worker_lane_rx_bytes(const wst_worker_t *worker, uint64_t *bytes,
                              unsigned n);

typedef void (*wst_lane_send_cb)(void *arg, wst_status_t status);

/* Progress thread: sends one data message (WST_AM_DATA, header 'hdr',
 * 'len' bytes at 'src') on lane 'lane' (1 <= lane < wst_conn_lanes) of
 * conn, with the ucp_am_send flags 'flags'; cb(arg, status) runs on the
 * progress thread once the send completed or failed (never inside this
 * call). hdr and src are borrowed until then. */
wst_status_t wst_conn_lane_send(wst_conn_t *conn, unsigned lane,
                                const struct wst_data_hdr *hdr, const void *src,
                                size_t len, uint32_t flags, wst_lane_send_cb cb,
                                void *arg);

/* Whether puts into the peer's device memory on the data endpoint run in
 * hardware (lanes.h, wst_lanes_device_put: cuda_ipc, or RDMA with
 * GPUDirect), on a worker that offers RMA; *why_p (borrowed from conn)
 * names the lanes or says why not. 0 before wst_conn_open_data. */
int wst_conn_device_put(const wst_conn_t *conn, const char **why_p);

/* Why puts on the data endpoint do or do not run in hardware, naming the
 * lanes ("no lane puts in hardware: tcp/lo: zero-copy put only"); "" before
 * wst_conn_open_data. Owned by the connection. */
const char *wst_conn_rma_why(const wst_conn_t *conn);

#endif
