/* worker_internal.h - the worker's and connections' state, shared by the
 * files that make up the worker module (worker.c, conn.c, conn_close.c,
 * listener.c, channel.c, data_am.c, heartbeat.c, memory.c). Private to
 * common/: callers use worker.h.
 *
 * Everything here runs on the progress thread unless its comment says
 * otherwise.
 */
#ifndef WST_WORKER_INTERNAL_H
#define WST_WORKER_INTERNAL_H

#include <pthread.h>
#include <sys/socket.h>

#include "auth.h"
#include "handshake.h"
#include "transports.h"
#include "worker.h"

/* Unauthenticated connections accepted at once; more wait in the listen
 * backlog (channel.c, listener_arm). */
#define WST_CHANNEL_UNAUTH_MAX 16
/* Data workers replaced by wst_worker_data_reset and kept, never
 * progressed, until the process exits. */
#define WST_DATA_RETIRED_MAX 16
/* Seconds an accepted connection has to complete its handshake. */
#define WST_CHANNEL_HS_TIMEOUT_S 5.0
/* The same for a connecting one, which may first wait in its peer's
 * listen backlog while WST_CHANNEL_UNAUTH_MAX others authenticate (64
 * senders starting at once on a loaded host waited over 5 s). */
#define WST_CHANNEL_HS_CLIENT_TIMEOUT_S 30.0

struct wst_post;
struct wst_pending_data;
struct wst_parked_data;
struct wst_out;

struct wst_conn {
    struct wst_conn *next;
    wst_worker_t *worker;
    uint64_t id;      /* unique in its worker: lanes name it by this */
    ucp_ep_h data_ep; /* NULL until opened */
    void *user;
    int failed;
    int close_refs;       /* c is freed when this drops to 0 after close */
    uint64_t last_rx;     /* ns of the last control message received */
    uint64_t last_tx;     /* ns of the last heartbeat sent */
    uint64_t hb_seq;      /* number of the last heartbeat sent */
    uint64_t close_at;    /* ns; nonzero: force-close then (lingering) */
    int data_peer_errors; /* data_ep has UCP_ERR_HANDLING_MODE_PEER */
    char name[96];
    char rma_why[256];    /* why puts on data_ep do or do not run in hardware */
    int device_put;       /* data_ep puts into device memory in hardware */
    char device_why[256]; /* why, or why not */
    /* Data lanes (lane.c): [1..n_lanes) are connections of the lane
     * workers, touched only on their threads; n_lanes is 1 + those
     * opened. On a lane's connection, main_id is the id of the
     * connection it belongs to. */
    struct wst_conn *lane_conns[WST_WORKER_LANES_MAX];
    unsigned n_lanes;
    uint64_t main_id;

    /* The control channel (channel.c): our socket, its handshake, frames */
    int fd;          /* -1 once closed */
    uint32_t events; /* epoll events registered */
    int server_side; /* accepted by our listener */
    int unlisted;    /* accepted, not authenticated: in w->unauth */
    int connecting;  /* connect() in progress */
    int authed;      /* handshake done: frames flow */
    int io_dead;     /* failed: no more reads or writes */
    uint64_t hs_deadline;
    size_t hs_got; /* handshake bytes received */
    struct wst_hs hs;
    uint8_t hs_out[2 * WST_HS_OUT_MAX];
    size_t hs_out_len, hs_out_off;
    uint8_t *rx; /* received bytes not yet delivered */
    size_t rx_len, rx_cap;
    struct wst_out *out_head, *out_tail; /* frames to send, in order */
    size_t out_off;                      /* bytes of out_head sent */
    uint64_t tx_seq, rx_seq;             /* frame numbers, per direction */
};

struct wst_worker {
    const struct wst_logger *log;
    struct wst_worker_ops ops;
    unsigned tick_ms;
    size_t max_control_msg;
    uint64_t hb_interval_ns; /* 0: no heartbeats */
    uint64_t hb_timeout_ns;
    wst_heartbeat_encode_fn hb_encode;

    struct wst_auth_secret secret; /* empty: insecure */
    char confine_ip[64];           /* UCX's interfaces: that one's only */
    /* The one network device this worker's UCX context may use (its
     * entry of wst_worker_params.lane_devices); "": none named. */
    char net_device[WST_WORKER_DEVICE_MAX];

    ucp_context_h context;
    ucp_worker_h worker;
    int listen_fd;           /* our listening socket, -1: none */
    struct wst_conn *unauth; /* accepted, authenticating */
    int n_unauth;
    /* The listener is out of epoll while WST_CHANNEL_UNAUTH_MAX peers
     * authenticate: later ones wait in the kernel's backlog, not refused. */
    int accept_paused;
    ucp_address_t *address;
    size_t address_len;
    int supports_cuda;
    /* UCX's old protocols asked for (UCX_PROTO_ENABLE=n): decided by the
     * main worker (wst_worker_old_protocols), followed by its lanes. */
    int old_protocols;
    /* UCX's tcp receive segment in this process (wst_ucx_tcp_rx_seg): set
     * to WST_UCX_TCP_RX_SEG in every worker's config when the environment
     * leaves it unset and the version's key is known; 0: the
     * environment's value did not parse here. */
    uint64_t tcp_rx_seg;
    struct wst_transport *transports; /* probed when the context is made */
    size_t n_transports;
    enum wst_worker_rma rma_rule;
    int rma;           /* UCP_FEATURE_RMA was asked for */
    char rma_why[256]; /* why, or why not */
    struct wst_conn *conns;
    int closing;               /* closed connections not yet freed */
    struct wst_conn *to_close; /* closed, endpoints not yet closed */
    ucp_ep_h *graveyard;       /* see conn_close.c */
    size_t n_graveyard, graveyard_cap;
    int busy; /* UCX requests in flight (wst_worker_busy) */
    struct wst_pending_data *receiving; /* data receives UCX holds */
    size_t n_receiving;
    int in_progress;    /* inside ucp_worker_progress: no reset now */
    int data_reset_due; /* a reset asked for inside progress */
    ucp_worker_h retired[WST_DATA_RETIRED_MAX]; /* see data_reset */
    int n_retired;
    struct wst_parked_data *parked, *parked_tail;
    uint64_t parked_total;          /* messages ever parked */
    struct wst_rx_timing rx_timing; /* since the last take (data_am.c) */
    uint64_t next_conn_id;
    struct wst_control_counts control; /* relaxed atomics */

    /* Data lanes (lane.c). On a worker with lanes: */
    wst_worker_t *lanes[WST_WORKER_LANES_MAX]; /* [1..n_lanes) */
    unsigned n_lanes;                          /* 1: lane 0 only */
    int lanes_gone;   /* being destroyed: nothing more is posted to them */
    size_t n_relayed; /* lanes' messages placed, not yet reported */
    int relays_held;  /* relayed, not yet freed (atomic: any thread) */
    uint64_t lane_rx_bytes[WST_WORKER_LANES_MAX]; /* landed, per lane */
    /* On a lane: the worker it carries data for, its index, and the
     * number of its data resets (messages of an older one are void). */
    wst_worker_t *main;
    unsigned lane_index;
    uint64_t lane_gen;
    unsigned relay_warned; /* messages refused, after the first logged */
    uint64_t failed_sends; /* a lane's sends that failed (see ucx_fini) */
    int lanes_held;        /* a lane left its context to the exit (ucx_fini) */

    pthread_t thread;
    int epfd;
    int evfd;
    int ucp_fd;
    pthread_mutex_t lock;
    struct wst_post *head, *tail;
    int stop;
    wst_status_t start_status; /* result of the thread's UCX set-up */
    pthread_cond_t started;
    int start_done;
};

/* conn.c */
/* Marks c failed and tells the owner, once. */
void wst_conn_fail(struct wst_conn *c, wst_status_t status, const char *why);
/* The error handler of every endpoint with peer-failure mode; arg is c. */
void wst_conn_ep_error(void *arg, ucp_ep_h ep, ucs_status_t status);
/* A new connection named 'name', linked into w->conns; NULL without
 * memory. */
struct wst_conn *wst_conn_new(wst_worker_t *w, const char *name);
/* Takes c out of its worker's list, or out of w->unauth (not freed). */
void wst_conn_unlink(struct wst_conn *c);
/* host:port (IPv4) into *ss; logs and returns WST_ERR_UNREACHABLE when it
 * does not resolve. */
wst_status_t wst_worker_resolve(const wst_worker_t *w, const char *host,
                                uint16_t port, struct sockaddr_storage *ss,
                                socklen_t *len_p);

/* conn_close.c */
/* Outside UCX callbacks: closes the endpoints of connections closed since
 * the last call. */
void wst_conn_close_pending(wst_worker_t *w);
/* At shutdown: force-closes the parked data endpoints. */
void wst_conn_close_graveyard(wst_worker_t *w);

/* channel.c: control connections over our sockets */
/* Listens on ss (port 0: any); the bound port goes to *port_p. */
wst_status_t wst_channel_listen(wst_worker_t *w,
                                const struct sockaddr_storage *ss,
                                socklen_t len, uint16_t *port_p);
/* Connects c's socket to ss and starts its handshake. */
wst_status_t wst_channel_connect(struct wst_conn *c,
                                 const struct sockaddr_storage *ss,
                                 socklen_t len);
/* Queues one control message (takes the malloc'd buf); sent once the
 * handshake is done. */
wst_status_t wst_channel_send(struct wst_conn *c, void *buf, size_t len);
/* An epoll event on the listener (ptr == &w->listen_fd) or a connection. */
void wst_channel_event(wst_worker_t *w, void *ptr, uint32_t events);
/* Drops or fails connections whose handshake is overdue. */
void wst_channel_tick(wst_worker_t *w, uint64_t now);
/* A peer left w->unauth (authenticated or dropped): accepting resumes if
 * it was paused. */
void wst_channel_unauth_left(wst_worker_t *w);
/* Closes c's socket and frees its buffers (when c is closed). */
void wst_channel_release(struct wst_conn *c);

/* data_am.c: the WST_AM_DATA handler (arg is the worker). */
ucs_status_t wst_data_am_recv(void *arg, const void *header,
                              size_t header_length, void *data, size_t length,
                              const ucp_am_recv_param_t *param);
/* Drops every parked data message; 'release' hands rendezvous descriptors
 * back to UCX (not when their worker is about to be destroyed). */
void wst_data_am_drop_parked(wst_worker_t *w, int release);
/* After the worker the receives were posted on was destroyed: reports each
 * receive still held as WST_ERR_CANCELED and frees it. */
void wst_data_am_cancel_receiving(wst_worker_t *w);

/* lane.c */
/* Starts lanes 1..params->lanes-1 of a new worker w (progress thread not
 * yet running anything else). */
wst_status_t wst_lanes_start(wst_worker_t *w,
                             const struct wst_worker_params *params);
/* Before w's own thread stops: stops and frees its lanes. Not on any
 * progress thread. */
void wst_lanes_stop(wst_worker_t *w);
/* Progress thread of w, after its own data reset: resets every lane. */
void wst_lanes_data_reset(wst_worker_t *w);
/* Lanes' retired-worker room, the smallest. */
int wst_lanes_reset_room(const wst_worker_t *w);
/* Progress thread: closes the lane connections of c (being closed). */
void wst_lanes_conn_close(struct wst_conn *c);
/* A lane's connection failed (its ops.conn_failed; lane thread). */
void wst_lanes_conn_failed(void *arg, wst_conn_t *conn, wst_status_t status,
                           const char *why);
/* Creates a worker; main non-NULL makes it lane 'index' of main. */
wst_status_t wst_worker_start(const struct wst_worker_params *params,
                              wst_worker_t *main, unsigned index,
                              wst_worker_t **worker_p);

/* data_am.c, relaying: a lane's data message handed to its main worker
 * (lane thread). Returns the AM callback's status. */
ucs_status_t wst_data_relay_in(wst_worker_t *lane, const void *header,
                               void *data, size_t length, int rndv);

/* heartbeat.c: closes lingering connections that are due, sends the
 * heartbeats that are due and fails connections gone silent. */
void wst_heartbeat_tick(wst_worker_t *w, uint64_t now);

#endif
