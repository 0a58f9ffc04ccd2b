/* lanes.c - the lanes of a data endpoint, and whether puts on it run in
 * hardware (see lanes.h for the rule and where each fact comes from).
 */
#include "lanes.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* Appends to out[0..len) at *used, never past the end. */
static void append(char *out, size_t len, size_t *used, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static void append(char *out, size_t len, size_t *used, const char *fmt, ...)
{
    va_list ap;
    int n;

    if (*used >= len)
        return;
    va_start(ap, fmt);
    n = vsnprintf(out + *used, len - *used, fmt, ap);
    va_end(ap);
    if (n > 0)
        *used += (size_t)n < len - *used ? (size_t)n : len - *used - 1;
}

/* Parses one line of ucp_ep_print_info. Lane lines look like
 *   "#   lane[2]:  4:cma/memory.0 md[3]  -> md[3]/cma/sysdev[255] rma_bw#0"
 * and become {"cma/memory", "rma_bw"} (roles without their '#n'). */
static int parse_lane(char *line, struct wst_lane *lane)
{
    char *start = strstr(line, "lane[");
    char *arrow = start != NULL ? strstr(start, "->") : NULL;
    char tl[64] = "";
    size_t used = 0;

    if (arrow == NULL || sscanf(strchr(start, ':') + 1, " %*d:%63s", tl) != 1)
        return 0;
    char *dot = strrchr(tl, '.');
    if (dot != NULL)
        *dot = '\0';
    /* A longer name than "tl/device" can hold is cut, knowingly (gcc's
     * Debug build warns of snprintf's truncation). */
    size_t len = strnlen(tl, sizeof(lane->name) - 1);
    memcpy(lane->name, tl, len);
    lane->name[len] = '\0';
    lane->roles[0] = '\0';
    /* Roles follow the remote md/tl/sysdev token. */
    for (char *tok = strchr(arrow + 3, ' '); tok != NULL;
         tok = strchr(tok, ' ')) {
        while (*tok == ' ')
            tok++;
        size_t n = strcspn(tok, " #");
        if (n > 0)
            append(lane->roles, sizeof(lane->roles), &used, "%s%.*s",
                   used ? "," : "", (int)n, tok);
    }
    return 1;
}

size_t wst_lanes_read(ucp_ep_h ep, struct wst_lane *lanes, size_t max)
{
    char *text = NULL, *save = NULL;
    size_t textlen = 0, n = 0;
    FILE *f = open_memstream(&text, &textlen);

    if (f == NULL)
        return 0;
    ucp_ep_print_info(ep, f);
    fclose(f);
    for (char *line = strtok_r(text, "\n", &save); line != NULL && n < max;
         line = strtok_r(NULL, "\n", &save))
        n += (size_t)parse_lane(line, &lanes[n]);
    free(text);
    return n;
}

void wst_lanes_format(const struct wst_lane *lanes, size_t n, char *out,
                      size_t outlen)
{
    size_t used = 0;

    if (outlen > 0)
        out[0] = '\0';
    for (size_t i = 0; i < n; i++)
        append(out, outlen, &used, "%s%s[%s]", used ? " " : "", lanes[i].name,
               lanes[i].roles);
}

/* Why a lane does or does not put in hardware, in the order checked. */
enum lane_put {
    PUT_NOT_PROBED,
    PUT_NOT_PEER_TYPE,
    PUT_NO_REGISTRATION,
    PUT_NOT_QUERIED,
    PUT_NO_PEER_FAILURE,
    PUT_ZCOPY_ONLY,
    PUT_NONE,
    PUT_NO_PENDING,
    PUT_HARDWARE,
    PUT_KINDS,
};

static const char *const lane_put_text[PUT_KINDS] = {
    [PUT_NOT_PROBED] = "not among the probed transports",
    [PUT_NOT_PEER_TYPE] = "neither network nor shared memory",
    [PUT_NO_REGISTRATION] = "registers no host memory",
    [PUT_NOT_QUERIED] = "interface not queried",
    [PUT_NO_PEER_FAILURE] = "no peer-failure handling",
    [PUT_ZCOPY_ONLY] = "zero-copy put only",
    [PUT_NONE] = "no put",
    [PUT_NO_PENDING] = "no pending queue",
    [PUT_HARDWARE] = "puts in hardware",
};

/* The probed transport a lane runs on, or NULL. */
static const struct wst_transport *
lane_transport(const struct wst_lane *lane,
               const struct wst_transport *transports, size_t n_transports)
{
    for (size_t i = 0; i < n_transports; i++)
        if (strcmp(transports[i].name, lane->name) == 0)
            return &transports[i];
    return NULL;
}

/* Each transport as a lane would be judged (no roles): into lanes[], at
 * most WST_LANES_MAX; returns how many. */
static size_t transports_as_lanes(const struct wst_transport *transports,
                                  size_t n_transports, struct wst_lane *lanes)
{
    size_t n = n_transports < WST_LANES_MAX ? n_transports : WST_LANES_MAX;

    for (size_t i = 0; i < n; i++) {
        snprintf(lanes[i].name, sizeof(lanes[i].name), "%s",
                 transports[i].name);
        lanes[i].roles[0] = '\0';
    }
    return n;
}

static enum lane_put lane_put(const struct wst_lane *lane,
                              const struct wst_transport *transports,
                              size_t n_transports, int peer_errors)
{
    const uint64_t put = UCT_IFACE_FLAG_PUT_SHORT | UCT_IFACE_FLAG_PUT_BCOPY |
                         UCT_IFACE_FLAG_GET_BCOPY;
    const struct wst_transport *t =
        lane_transport(lane, transports, n_transports);

    if (t == NULL)
        return PUT_NOT_PROBED;
    if (t->type != UCT_DEVICE_TYPE_NET && t->type != UCT_DEVICE_TYPE_SHM)
        return PUT_NOT_PEER_TYPE;
    if (!t->reg_host)
        return PUT_NO_REGISTRATION;
    if (!t->queried)
        return PUT_NOT_QUERIED;
    if (peer_errors &&
        !(t->iface_flags & UCT_IFACE_FLAG_ERRHANDLE_PEER_FAILURE))
        return PUT_NO_PEER_FAILURE;
    if ((t->iface_flags & put) != put)
        return (t->iface_flags & UCT_IFACE_FLAG_PUT_ZCOPY) ? PUT_ZCOPY_ONLY
                                                           : PUT_NONE;
    if (!(t->iface_flags & UCT_IFACE_FLAG_PENDING))
        return PUT_NO_PENDING;
    return PUT_HARDWARE;
}

int wst_lanes_rma_real(const struct wst_lane *lanes, size_t n_lanes,
                       const struct wst_transport *transports,
                       size_t n_transports, int peer_errors, char *why,
                       size_t why_len)
{
    enum lane_put kind[WST_LANES_MAX];
    size_t n = n_lanes < WST_LANES_MAX ? n_lanes : WST_LANES_MAX;
    size_t used = 0;
    int real = 0;

    if (why_len > 0)
        why[0] = '\0';
    for (size_t i = 0; i < n; i++) {
        kind[i] = lane_put(&lanes[i], transports, n_transports, peer_errors);
        real |= kind[i] == PUT_HARDWARE;
    }
    if (n == 0) {
        append(why, why_len, &used, "no lane read from ucx");
        return 0;
    }
    if (!real)
        append(why, why_len, &used, "no lane puts in hardware: ");
    /* One group per reason: "tcp/eth0, tcp/lo: zero-copy put only". */
    for (int k = real ? PUT_HARDWARE : 0; k < PUT_KINDS; k++) {
        size_t in_group = 0;

        for (size_t i = 0; i < n; i++)
            if (kind[i] == (enum lane_put)k)
                append(why, why_len, &used, "%s%s", in_group++ ? ", " : "",
                       lanes[i].name);
        if (in_group > 0 && k != PUT_HARDWARE)
            append(why, why_len, &used, ": %s; ", lane_put_text[k]);
        else if (in_group > 0)
            append(why, why_len, &used, " %s", lane_put_text[k]);
    }
    /* Drop the last group's "; ". */
    if (used >= 2 && strcmp(why + used - 2, "; ") == 0)
        why[used - 2] = '\0';
    return real;
}

int wst_transports_rma_real(const struct wst_transport *transports,
                            size_t n_transports, char *why, size_t why_len)
{
    struct wst_lane lanes[WST_LANES_MAX];
    size_t n = transports_as_lanes(transports, n_transports, lanes);

    if (n == 0) {
        snprintf(why, why_len, "no transport probed");
        return 0;
    }
    return wst_lanes_rma_real(lanes, n, transports, n_transports, 0, why,
                              why_len);
}

/* Whether 'lane' puts into a peer's device memory (lanes.h). */
static int lane_device_put(const struct wst_lane *lane,
                           const struct wst_transport *transports,
                           size_t n_transports, int peer_errors)
{
    const struct wst_transport *t =
        lane_transport(lane, transports, n_transports);

    return t != NULL &&
           (t->type == UCT_DEVICE_TYPE_NET || t->type == UCT_DEVICE_TYPE_SHM) &&
           t->reg_cuda && t->queried &&
           (t->iface_flags & UCT_IFACE_FLAG_PUT_ZCOPY) &&
           (!peer_errors ||
            (t->iface_flags & UCT_IFACE_FLAG_ERRHANDLE_PEER_FAILURE));
}

int wst_lanes_device_put(const struct wst_lane *lanes, size_t n_lanes,
                         const struct wst_transport *transports,
                         size_t n_transports, int peer_errors, char *why,
                         size_t why_len)
{
    size_t n = n_lanes < WST_LANES_MAX ? n_lanes : WST_LANES_MAX;
    size_t used = 0;
    int real = 0;

    if (why_len > 0)
        why[0] = '\0';
    for (size_t i = 0; i < n; i++) {
        if (!lane_device_put(&lanes[i], transports, n_transports, peer_errors))
            continue;
        append(why, why_len, &used, "%s%s", real ? ", " : "", lanes[i].name);
        real = 1;
    }
    append(why, why_len, &used, "%s",
           real ? " put into device memory in hardware"
                : "no lane puts into device memory in hardware");
    return real;
}

int wst_transports_device_put(const struct wst_transport *transports,
                              size_t n_transports, char *why, size_t why_len)
{
    struct wst_lane lanes[WST_LANES_MAX];
    size_t n = transports_as_lanes(transports, n_transports, lanes);

    return wst_lanes_device_put(lanes, n, transports, n_transports, 0, why,
                                why_len);
}

int wst_ucx_mem_types_have_cuda(uint64_t memory_types)
{
    return (memory_types & UCS_BIT(UCS_MEMORY_TYPE_CUDA)) != 0;
}

int wst_ucx_proto_v2(unsigned major, unsigned minor, const char *env)
{
    static const char *const yes[] = {"y", "yes", "on", "1", "true", NULL};
    static const char *const no[] = {"n", "no", "off", "0", "false", NULL};

    for (int i = 0; env != NULL && yes[i] != NULL; i++)
        if (strcasecmp(env, yes[i]) == 0)
            return 1;
    for (int i = 0; env != NULL && no[i] != NULL; i++)
        if (strcasecmp(env, no[i]) == 0)
            return 0;
    /* Unset, or a spelling UCX itself refuses: its default. */
    return major > 1 || (major == 1 && minor >= 16);
}

int wst_ucx_old_protocols(unsigned major, unsigned minor, const char *env,
                          int cuda)
{
    return env == NULL && !cuda && wst_ucx_proto_v2(major, minor, NULL);
}

int wst_ucx_memunits_parse(const char *s, uint64_t *bytes_p)
{
    static const char prefixes[] = "bkmgt";
    uint64_t value = 0, unit = 1;
    const char *p = s;

    if (s == NULL || *s < '0' || *s > '9')
        return -1;
    for (; *p >= '0' && *p <= '9'; p++) {
        if (value > (UINT64_MAX - 9) / 10)
            return -1;
        value = value * 10 + (uint64_t)(*p - '0');
    }
    if (*p != '\0') {
        const char *at = strchr(prefixes, tolower((unsigned char)*p));
        if (at == NULL)
            return -1;
        unit = 1ull << (10 * (at - prefixes));
        p++;
        if (*p != '\0' && tolower((unsigned char)*p) == 'b')
            p++;
        if (*p != '\0')
            return -1;
    }
    if (value > UINT64_MAX / unit)
        return -1;
    *bytes_p = value * unit;
    return 0;
}

const char *wst_ucx_tcp_seg_key(unsigned major, unsigned minor)
{
    if (major == 1 && minor == 13)
        return "RX_SEG_SIZE";
    if (major == 1 && minor == 18)
        return "TCP_RX_SEG_SIZE";
    return NULL;
}

uint64_t wst_ucx_tcp_rx_seg(const char *env, int settable)
{
    uint64_t bytes;

    if (env == NULL)
        return settable ? WST_UCX_TCP_RX_SEG : WST_UCX_TCP_RX_SEG_UCX;
    return wst_ucx_memunits_parse(env, &bytes) == 0 ? bytes : 0;
}

int wst_ucx_tcp_seg_fits(uint64_t sender, uint64_t receiver)
{
    return sender == 0 || receiver == 0 || sender <= receiver;
}
