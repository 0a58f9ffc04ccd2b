/* metrics.c - /metrics, /healthz and /readyz over libmicrohttpd (see
 * metrics.h). */
#include "metrics.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "array.h"

/* Upper bounds (seconds) of the duration histograms' buckets: a layer's
 * repack on a GPU takes ~0.1 ms, on a CPU tens of ms; an engine's finalize
 * anything up to seconds. */
static const double bucket_le[] = {0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05,
                                   0.1,    0.5,    1.0,   5.0,   10.0, 60.0};
#define N_BUCKETS (sizeof(bucket_le) / sizeof(bucket_le[0]))
#define N_STATUS 64 /* errors counted by -status below this */

struct histogram {
    uint64_t counts[N_BUCKETS]; /* not cumulative; summed when printed */
    uint64_t count;
    double sum;
};

struct wst_metrics {
    const struct wst_logger *log;
    wst_receiver_t *receiver;
    int insecure; /* no auth secret: any peer that reaches the port */
    struct MHD_Daemon *daemon;
    pthread_mutex_t lock;
    uint64_t refits_committed, refits_failed;
    uint64_t rx_put, rx_am, rx_nccl;          /* committed bytes by mover */
    uint64_t rx_lane[WST_RECEIVER_LANES_MAX]; /* committed bytes by lane */
    uint64_t errors[N_STATUS];
    struct histogram repack, finalize;
};

/* A growing text buffer; on allocation failure it stops growing and the
 * scrape answers 500. */
struct text {
    char *buf;
    size_t len, cap;
    int failed;
};

static void text_add(struct text *t, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void text_add(struct text *t, const char *fmt, ...)
{
    va_list ap;

    for (int pass = 0; pass < 2 && !t->failed; pass++) {
        va_start(ap, fmt);
        int n = vsnprintf(t->buf + t->len, t->cap - t->len, fmt, ap);
        va_end(ap);
        if (n < 0) {
            t->failed = 1;
            return;
        }
        if ((size_t)n < t->cap - t->len) {
            t->len += (size_t)n;
            return;
        }
        if (wst_array_grow(&t->buf, &t->cap, t->len + (size_t)n + 1, 1) !=
            WST_OK) {
            t->failed = 1;
            return;
        }
    }
}

static void observe(struct histogram *h, double seconds)
{
    size_t i = 0;

    while (i < N_BUCKETS && seconds > bucket_le[i])
        i++;
    if (i < N_BUCKETS)
        h->counts[i]++;
    h->count++;
    h->sum += seconds;
}

static void print_histogram(struct text *t, const char *name, const char *help,
                            const struct histogram *h)
{
    uint64_t below = 0;

    text_add(t, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    for (size_t i = 0; i < N_BUCKETS; i++) {
        below += h->counts[i];
        text_add(t, "%s_bucket{le=\"%g\"} %llu\n", name, bucket_le[i],
                 (unsigned long long)below);
    }
    text_add(t, "%s_bucket{le=\"+Inf\"} %llu\n%s_sum %.9f\n%s_count %llu\n",
             name, (unsigned long long)h->count, name, h->sum, name,
             (unsigned long long)h->count);
}

static void print_metric(struct text *t, const char *name, const char *type,
                         const char *help, double value)
{
    text_add(t, "# HELP %s %s\n# TYPE %s %s\n%s %.17g\n", name, help, name,
             type, name, value);
}

/* A label value in Prometheus' text format: backslash, double quote and
 * newline escaped (a version's label may hold the first two). */
static void escape_label(const char *in, char *out, size_t len)
{
    size_t j = 0;

    for (; *in != '\0' && j + 3 < len; in++) {
        if (*in == '\\' || *in == '"' || *in == '\n')
            out[j++] = '\\';
        out[j++] = *in == '\n' ? 'n' : *in;
    }
    out[j] = '\0';
}

static void scrape(struct wst_metrics *m, struct text *t)
{
    struct wst_receiver_state st;
    char label[2 * WST_LABEL_MAX];

    wst_receiver_get_state(m->receiver, &st);
    pthread_mutex_lock(&m->lock);
    print_metric(t, "wstream_committed_version", "gauge",
                 "Version the engine serves (0: none yet).",
                 (double)st.committed_version);
    escape_label(st.committed_label, label, sizeof(label));
    text_add(t,
             "# HELP wstream_committed_version_info The label the served "
             "version came with (\"\": none).\n"
             "# TYPE wstream_committed_version_info gauge\n"
             "wstream_committed_version_info{label=\"%s\"} 1\n",
             label);
    print_metric(t, "wstream_usable", "gauge",
                 "1 while the receiver may serve; 0 after a failed refit.",
                 st.usable ? 1 : 0);
    print_metric(t, "wstream_insecure", "gauge",
                 "1 when the agent runs --insecure: control connections are "
                 "not authenticated.",
                 m->insecure ? 1 : 0);
    print_metric(t, "wstream_refit_in_progress", "gauge",
                 "1 while a refit is under way.", st.refit_in_progress ? 1 : 0);
    text_add(t,
             "# HELP wstream_refits_total Refits by outcome.\n"
             "# TYPE wstream_refits_total counter\n"
             "wstream_refits_total{outcome=\"committed\"} %llu\n"
             "wstream_refits_total{outcome=\"failed\"} %llu\n",
             (unsigned long long)m->refits_committed,
             (unsigned long long)m->refits_failed);
    /* NIXL's name for the same count (agent_rx_bytes), under our prefix,
     * one series per mover: sum() over mover gives every byte. */
    text_add(t,
             "# HELP wstream_rx_bytes_total Bytes of committed refits by the "
             "mover that brought them.\n"
             "# TYPE wstream_rx_bytes_total counter\n"
             "wstream_rx_bytes_total{mover=\"put\"} %llu\n"
             "wstream_rx_bytes_total{mover=\"am\"} %llu\n"
             "wstream_rx_bytes_total{mover=\"nccl\"} %llu\n",
             (unsigned long long)m->rx_put, (unsigned long long)m->rx_am,
             (unsigned long long)m->rx_nccl);
    text_add(t, "# HELP wstream_rx_lane_bytes_total Bytes of committed "
                "refits' data messages by the data lane they landed on, "
                "and the network device the lane was given (\"\": UCX's "
                "choice): per NIC, summed over its lanes.\n"
                "# TYPE wstream_rx_lane_bytes_total counter\n");
    for (uint32_t i = 0; i < st.lanes && i < WST_RECEIVER_LANES_MAX; i++)
        text_add(t,
                 "wstream_rx_lane_bytes_total{lane=\"%u\",device=\"%s\"} "
                 "%llu\n",
                 i, st.lane_device[i], (unsigned long long)m->rx_lane[i]);
    print_metric(t, "wstream_forged_data_total", "counter",
                 "Data messages dropped unwritten: they did not carry the "
                 "data token of the sender rank they claimed.",
                 (double)st.forged_data);
    print_metric(t, "wstream_data_resets_total", "counter",
                 "Data workers replaced because a failed refit left UCX "
                 "receives in flight (their bytes never land).",
                 (double)st.data_resets);
    print_metric(t, "wstream_last_refit_seconds", "gauge",
                 "Last committed refit, begin acknowledged to commit.",
                 st.last_refit_seconds);
    text_add(t, "# HELP wstream_errors_total Failed refits by status.\n"
                "# TYPE wstream_errors_total counter\n");
    for (int i = 1; i < N_STATUS; i++)
        if (m->errors[i] != 0)
            text_add(t, "wstream_errors_total{status=\"%s\"} %llu\n",
                     wst_status_string((wst_status_t)-i),
                     (unsigned long long)m->errors[i]);
    print_histogram(t, "wstream_layer_repack_seconds",
                    "Repack of one MoE layer into live memory.", &m->repack);
    print_histogram(t, "wstream_layer_finalize_seconds",
                    "The engine's finalize hook for one layer.", &m->finalize);
    pthread_mutex_unlock(&m->lock);
}

static enum MHD_Result reply(struct MHD_Connection *c, unsigned code,
                             char *body, size_t len, const char *type)
{
    struct MHD_Response *r =
        MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);

    if (r == NULL) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    enum MHD_Result ret = MHD_queue_response(c, code, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result reply_text(struct MHD_Connection *c, unsigned code,
                                  const char *msg)
{
    char *body = strdup(msg);

    return body != NULL ? reply(c, code, body, strlen(body), "text/plain")
                        : MHD_NO;
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *c,
                              const char *url, const char *method,
                              const char *version, const char *upload,
                              size_t *upload_size, void **con_cls)
{
    struct wst_metrics *m = cls;

    (void)version;
    (void)upload;
    (void)upload_size;
    (void)con_cls;
    if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0)
        return reply_text(c, MHD_HTTP_METHOD_NOT_ALLOWED, "GET only\n");
    if (strcmp(url, "/healthz") == 0)
        return reply_text(c, MHD_HTTP_OK, "ok\n");
    if (strcmp(url, "/readyz") == 0) {
        struct wst_receiver_state st;
        char msg[600];
        const char *mode =
            m->insecure ? " (insecure: peers are not authenticated)" : "";
        wst_receiver_get_state(m->receiver, &st);
        if (st.usable && st.committed_version > 0) {
            snprintf(msg, sizeof(msg), "ready: serving version %llu%s\n",
                     (unsigned long long)st.committed_version, mode);
            return reply_text(c, MHD_HTTP_OK, msg);
        }
        snprintf(msg, sizeof(msg), "not ready: %s%s\n",
                 !st.usable ? st.reason : "no committed version yet", mode);
        return reply_text(c, MHD_HTTP_SERVICE_UNAVAILABLE, msg);
    }
    if (strcmp(url, "/metrics") == 0) {
        struct text t = {0};
        scrape(m, &t);
        if (t.failed || t.buf == NULL) {
            free(t.buf);
            return reply_text(c, MHD_HTTP_INTERNAL_SERVER_ERROR,
                              "out of memory\n");
        }
        return reply(c, MHD_HTTP_OK, t.buf, t.len,
                     "text/plain; version=0.0.4; charset=utf-8");
    }
    return reply_text(c, MHD_HTTP_NOT_FOUND,
                      "not found: /metrics, /healthz, /readyz\n");
}

wst_status_t wst_metrics_start(const struct wst_logger *log,
                               wst_receiver_t *receiver, int insecure,
                               const char *host, uint16_t port,
                               uint16_t *port_p, struct wst_metrics **m_p)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
    struct wst_metrics *m;

    *m_p = NULL;
    if (inet_pton(AF_INET, host, &sa.sin_addr) != 1) {
        WST_ERROR(log, "metrics: '%s' is not an IPv4 address", host);
        return WST_ERR_INVALID;
    }
    m = calloc(1, sizeof(*m));
    if (m == NULL)
        return WST_ERR_NO_MEMORY;
    m->log = log;
    m->receiver = receiver;
    m->insecure = insecure;
    pthread_mutex_init(&m->lock, NULL);
    m->daemon = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD, port, NULL,
                                 NULL, handle, m, MHD_OPTION_SOCK_ADDR,
                                 (struct sockaddr *)&sa, MHD_OPTION_END);
    if (m->daemon == NULL) {
        WST_ERROR(log, "metrics: cannot serve on %s:%u", host, port);
        pthread_mutex_destroy(&m->lock);
        free(m);
        return WST_ERR_IO;
    }
    const union MHD_DaemonInfo *info =
        MHD_get_daemon_info(m->daemon, MHD_DAEMON_INFO_BIND_PORT);
    *port_p = info != NULL ? info->port : port;
    WST_INFO(log, "metrics on http://%s:%u/metrics (and /healthz, /readyz)",
             host, *port_p);
    *m_p = m;
    return WST_OK;
}

void wst_metrics_refit_committed(struct wst_metrics *m)
{
    struct wst_receiver_state st;
    struct wst_layer_times times[512];

    if (m == NULL)
        return;
    wst_receiver_get_state(m->receiver, &st);
    uint32_t n = wst_receiver_get_timeline(m->receiver, times, 512);
    if (n > 512)
        n = 512;
    pthread_mutex_lock(&m->lock);
    m->refits_committed++;
    m->rx_put += st.last_refit_put_bytes;
    m->rx_am += st.last_refit_am_bytes;
    m->rx_nccl += st.last_refit_nccl_bytes;
    for (unsigned i = 0; i < WST_RECEIVER_LANES_MAX; i++)
        m->rx_lane[i] += st.last_refit_lane_bytes[i];
    for (uint32_t i = 0; i < n; i++) {
        /* Only MoE layers are repacked; every layer is finalized. */
        if (times[i].repack_seconds > 0)
            observe(&m->repack, times[i].repack_seconds);
        observe(&m->finalize, times[i].finalize_seconds);
    }
    pthread_mutex_unlock(&m->lock);
}

void wst_metrics_refit_failed(struct wst_metrics *m, wst_status_t status)
{
    if (m == NULL)
        return;
    pthread_mutex_lock(&m->lock);
    m->refits_failed++;
    if (status < 0 && -status < N_STATUS)
        m->errors[-status]++;
    pthread_mutex_unlock(&m->lock);
}

void wst_metrics_destroy(struct wst_metrics *m)
{
    if (m == NULL)
        return;
    MHD_stop_daemon(m->daemon);
    pthread_mutex_destroy(&m->lock);
    free(m);
}
