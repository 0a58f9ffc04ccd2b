/* transports.h - the UCX transports this process may use, and what each
 * can do, from UCT's own attributes.
 *
 * UCP 1.13 has no query for an endpoint's lanes (ucp_ep_query learned
 * UCP_EP_ATTR_FIELD_TRANSPORTS in 1.14), but UCT answers for every
 * transport resource: its component, its memory domain (uct_md_query:
 * can it register host memory?) and its interface (uct_iface_query: put
 * short/bcopy/zcopy, get, pending queue, peer-failure handling). The
 * resources are filtered by UCX_TLS and UCX_<TYPE>_DEVICES from the
 * environment with UCP's rules, so the list is what UCP may build lanes
 * from. lanes.c decides from it.
 */
#ifndef WST_TRANSPORTS_H
#define WST_TRANSPORTS_H

#include <stddef.h>
#include <stdint.h>
#include <uct/api/uct.h>
#include <wstream/status.h>

#include "log.h"

/* One transport resource UCP may use. */
struct wst_transport {
    char name[UCT_TL_NAME_MAX + UCT_DEVICE_NAME_MAX + 2]; /* "tl/device" */
    uct_device_type_t type; /* UCT_DEVICE_TYPE_NET, _SHM, _ACC, _SELF */
    int reg_host;           /* its memory domain registers host memory */
    int queried; /* its interface opened and answered: iface_flags valid */
    uint64_t iface_flags; /* UCT_IFACE_FLAG_* */
    int reg_cuda;         /* its memory domain registers CUDA memory and packs a
                             remote key for it (cuda_ipc; an RDMA domain with
                             GPUDirect): a peer may put into that memory */
};

/* Lists the transports UCX_TLS and UCX_<TYPE>_DEVICES enable in this
 * process, auxiliary ones (wireup only) left out. On success *list_p is a
 * malloc'd array of *n_p entries, owned by the caller (free). Opens and
 * closes UCT memory domains and interfaces of its own: call it once, not
 * per endpoint. A resource whose interface does not open is listed with
 * queried 0. */
wst_status_t wst_transports_probe(const struct wst_logger *log,
                                  struct wst_transport **list_p, size_t *n_p);

/* Whether the UCX_TLS value 'tls' (NULL or "": unset, which means "all")
 * enables transport 'tl' for data lanes, as UCP reads it: a comma list of
 * names and aliases ("sm", "ib", "rc", ...), "\name" for a name alone,
 * "name:aux" for wireup use only (not a data lane), "^" in front to
 * negate the list. */
int wst_transports_tl_enabled(const char *tls, const char *tl);

/* Whether the UCX_<TYPE>_DEVICES value 'devices' (NULL or "": "all")
 * enables device 'dev'. */
int wst_transports_dev_enabled(const char *devices, const char *dev);

#endif
