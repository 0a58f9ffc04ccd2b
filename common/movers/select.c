/* select.c - which mover a (sender, receiver) pair uses (select.h). */
#include "select.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <ucp/api/ucp.h>

static const char *const pref_names[] = {"auto", "direct", "bounce", "nccl"};

#define N_PREFS (sizeof(pref_names) / sizeof(pref_names[0]))

uint64_t wst_path_window(enum wst_path path, uint64_t window, int window_auto)
{
    if (!window_auto || path != WST_PATH_DIRECT ||
        window >= WST_DIRECT_WINDOW_MIN)
        return window;
    return WST_DIRECT_WINDOW_MIN;
}

const char *wst_path_name(enum wst_path p)
{
    switch (p) {
    case WST_PATH_HOST:
        return "host";
    case WST_PATH_DIRECT:
        return "direct";
    case WST_PATH_BOUNCE:
        return "bounce";
    case WST_PATH_NCCL:
        return "nccl";
    }
    return "invalid";
}

wst_status_t wst_path_pref_parse(const char *s, enum wst_path_pref *out)
{
    if (out == NULL)
        return WST_ERR_INVALID;
    if (s == NULL || s[0] == '\0') {
        *out = WST_PATH_PREF_AUTO;
        return WST_OK;
    }
    for (size_t i = 0; i < N_PREFS; i++) {
        if (strcmp(s, pref_names[i]) == 0) {
            *out = (enum wst_path_pref)i;
            return WST_OK;
        }
    }
    return WST_ERR_INVALID;
}

/* Which sides hold device memory their UCX cannot register. */
struct lacks {
    int src;
    int dst;
};

static struct lacks ucx_lacks(const struct wst_path_inputs *in)
{
    struct lacks l = {
        .src = in->src_device && !in->local_ucx_cuda,
        .dst = in->dst_device && !in->peer_ucx_cuda,
    };
    return l;
}

/* The reason direct is out, naming the side(s). The distro note is there
 * because it is the usual cause and the fix (a CUDA-aware UCX build) is not
 * obvious from "no CUDA support". */
static const char *lacks_phrase(struct lacks l)
{
    if (l.src && l.dst)
        return "neither this sender's UCX nor the receiver's UCX reports CUDA "
               "memory support (Debian's and Ubuntu's UCX builds have none)";
    if (l.src)
        return "this sender's UCX reports no CUDA memory support (Debian's "
               "and Ubuntu's UCX builds have none)";
    return "the receiver's UCX reports no CUDA memory support (Debian's and "
           "Ubuntu's UCX builds have none)";
}

/* The sides holding device memory (at least one does when this is asked). */
static const char *device_sides(const struct wst_path_inputs *in)
{
    if (in->src_device && in->dst_device)
        return "this sender and the receiver";
    return in->src_device ? "this sender" : "the receiver";
}

static int nccl_possible(const struct wst_path_inputs *in)
{
    return in->nccl_built && in->peer_nccl;
}

static const char *nccl_missing(const struct wst_path_inputs *in)
{
    if (!in->nccl_built && !in->peer_nccl)
        return "NCCL is not built into this sender and the receiver cannot "
               "run NCCL (no NCCL or no device)";
    if (!in->nccl_built)
        return "NCCL is not built into this sender";
    return "the receiver cannot run NCCL (no NCCL or no device)";
}

static void say(char *why, size_t why_len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void say(char *why, size_t why_len, const char *fmt, ...)
{
    va_list ap;

    if (why == NULL || why_len == 0)
        return;
    va_start(ap, fmt);
    vsnprintf(why, why_len, fmt, ap);
    va_end(ap);
}

/* Rule 1: no device memory on either side. */
static wst_status_t choose_host(const struct wst_path_inputs *in,
                                enum wst_path *path, char *why, size_t why_len)
{
    if (in->pref == WST_PATH_PREF_NCCL) {
        say(why, why_len,
            "nccl is configured but neither side holds device memory for "
            "this receiver, and NCCL here moves device memory only; "
            "configure auto");
        return WST_ERR_UNSUPPORTED;
    }
    if (in->pref == WST_PATH_PREF_AUTO)
        say(why, why_len, "neither side holds device memory for this receiver");
    else
        say(why, why_len,
            "neither side holds device memory for this receiver; the "
            "configured %s preference does not apply",
            pref_names[in->pref]);
    *path = WST_PATH_HOST;
    return WST_OK;
}

/* Rule 2. */
static wst_status_t choose_nccl(const struct wst_path_inputs *in,
                                enum wst_path *path, char *why, size_t why_len)
{
    if (!nccl_possible(in)) {
        say(why, why_len, "nccl is configured but %s", nccl_missing(in));
        return WST_ERR_UNSUPPORTED;
    }
    say(why, why_len,
        "configured; ncclSend/ncclRecv between this sender's and the "
        "receiver's GPUs");
    *path = WST_PATH_NCCL;
    return WST_OK;
}

/* Rules 3 and 5. */
static wst_status_t choose_direct(const struct wst_path_inputs *in,
                                  enum wst_path *path, char *why,
                                  size_t why_len)
{
    struct lacks l = ucx_lacks(in);
    int configured = in->pref == WST_PATH_PREF_DIRECT;

    if (!l.src && !l.dst) {
        say(why, why_len,
            "%sdevice memory on %s is registered with a CUDA-aware UCX and "
            "moved without host copies (CUDA IPC within a host, GPUDirect "
            "RDMA across hosts)",
            configured ? "configured; " : "", device_sides(in));
        *path = WST_PATH_DIRECT;
        return WST_OK;
    }
    if (!configured) {
        say(why, why_len, "%s; device bytes go through pinned host rings on %s",
            lacks_phrase(l), device_sides(in));
        *path = WST_PATH_BOUNCE;
        return WST_OK;
    }
    if (nccl_possible(in)) {
        say(why, why_len,
            "direct is configured but %s, so UCX cannot reach that device "
            "memory; ncclSend/ncclRecv move it instead",
            lacks_phrase(l));
        *path = WST_PATH_NCCL;
        return WST_OK;
    }
    say(why, why_len,
        "direct is configured but %s, and NCCL cannot stand in: %s; "
        "configure bounce or auto",
        lacks_phrase(l), nccl_missing(in));
    return WST_ERR_UNSUPPORTED;
}

wst_status_t wst_path_choose(const struct wst_path_inputs *in,
                             enum wst_path *path, char *why, size_t why_len)
{
    if (why != NULL && why_len > 0)
        why[0] = '\0';
    if (in == NULL || path == NULL || (unsigned)in->pref >= N_PREFS) {
        say(why, why_len, "invalid arguments to the device path choice");
        return WST_ERR_INVALID;
    }
    if (!in->src_device && !in->dst_device)
        return choose_host(in, path, why, why_len);
    switch (in->pref) {
    case WST_PATH_PREF_NCCL:
        return choose_nccl(in, path, why, why_len);
    case WST_PATH_PREF_BOUNCE:
        say(why, why_len,
            "configured; device bytes go through pinned host rings on %s",
            device_sides(in));
        *path = WST_PATH_BOUNCE;
        return WST_OK;
    case WST_PATH_PREF_AUTO:
    case WST_PATH_PREF_DIRECT:
        break;
    }
    return choose_direct(in, path, why, why_len);
}

void wst_path_log(const struct wst_logger *log, const char *peer_name,
                  enum wst_path p, const char *why)
{
    /* Within one host (CUDA IPC) the direct path runs in tests/gpu/run.sh;
     * across hosts (GPUDirect RDMA) it never ran: say so where an operator
     * looking at a failure on such a machine will read it. */
    WST_INFO(log, "receiver %s: device path %s: %s%s",
             peer_name != NULL ? peer_name : "?", wst_path_name(p),
             why != NULL ? why : "?",
             p == WST_PATH_DIRECT
                 ? " (GPUDirect RDMA across hosts is unverified on "
                   "hardware: no machine here has an RDMA NIC)"
                 : "");
}

enum wst_mover_kind wst_mover_choose(enum wst_mover_kind offered,
                                     enum wst_mover_kind pref, int rma_real,
                                     const char **why_p)
{
    if (offered == WST_MOVER_AM) {
        *why_p = "the receiver hands out no remote keys";
        return WST_MOVER_AM;
    }
    if (pref != 0) {
        *why_p = "configured";
        return pref;
    }
    *why_p = rma_real ? "a data lane does rma in hardware"
                      : "no data lane does rma in hardware (puts would be "
                        "emulated)";
    return rma_real ? WST_MOVER_PUT : WST_MOVER_AM;
}

int wst_rx_nccl_possible(const struct wst_rx_region *regions, size_t n,
                         int device, int nccl_built, const char **why_p)
{
    *why_p = "this receiver cannot run nccl (its memory is not all on one "
             "GPU, or it was built without NCCL)";
    if (device < 0 || !nccl_built)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (regions[i].mem != WST_MEM_CUDA)
            return 0;
    *why_p = NULL;
    return 1;
}
