/* transports.c - the UCX transports this process may use, from UCT's
 * component, memory-domain and interface queries (see transports.h).
 *
 * UCX_TLS is read as UCP 1.13 reads it (ucp_context.c): a transport is
 * enabled by its name, by "\name", or by an alias whose family holds it;
 * a family member marked ":aux" serves wireup only, never data; "^"
 * negates the list; "all" first means every transport. The device lists
 * (UCX_NET_DEVICES, ...) hold device names or "all". Only the
 * environment is read: a ucx.conf file setting UCX_TLS is not seen.
 */
#include "array.h"
#include "transports.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ucs/async/async_fwd.h>

/* The transport families UCX_TLS accepts by one name, as UCX 1.13
 * defines them. */
static const struct {
    const char *alias;
    const char *tls; /* comma list; ":aux": wireup only */
} aliases[] = {
    {"mm", "posix,sysv,xpmem"},
    {"sm", "posix,sysv,xpmem,knem,cma"},
    {"shm", "posix,sysv,xpmem,knem,cma"},
    {"ib", "rc_verbs,ud_verbs,rc_mlx5,ud_mlx5,dc_mlx5"},
    {"ud_v", "ud_verbs"},
    {"ud_x", "ud_mlx5"},
    {"ud", "ud_mlx5,ud_verbs"},
    {"rc_v", "rc_verbs,ud_verbs:aux"},
    {"rc_x", "rc_mlx5,ud_mlx5:aux"},
    {"rc", "rc_mlx5,ud_mlx5:aux,rc_verbs,ud_verbs:aux"},
    {"dc", "dc_mlx5,ud_mlx5:aux"},
    {"dc_x", "dc_mlx5,ud_mlx5:aux"},
    {"ugni", "ugni_smsg,ugni_udt:aux,ugni_rdma"},
    {"cuda", "cuda_copy,cuda_ipc,gdr_copy"},
    {"rocm", "rocm_copy,rocm_ipc,rocm_gdr"},
};

/* Whether the comma list 'list' holds the item 'name', followed by
 * ":suffix" when suffix is not NULL. */
static int list_has(const char *list, const char *name, const char *suffix)
{
    size_t n = strlen(name);
    size_t s = suffix != NULL ? strlen(suffix) + 1 : 0;

    for (const char *p = list; *p != '\0';) {
        size_t len = strcspn(p, ",");

        if (len == n + s && strncmp(p, name, n) == 0 &&
            (suffix == NULL ||
             (p[n] == ':' && strncmp(p + n + 1, suffix, s - 1) == 0)))
            return 1;
        p += len;
        if (*p == ',')
            p++;
    }
    return 0;
}

/* 1: 'tl' is in 'list' for data; 2: for wireup only (":aux"); 0: not
 * there. */
static int list_lookup(const char *list, const char *tl)
{
    if (list_has(list, tl, NULL))
        return 1;
    return list_has(list, tl, "aux") ? 2 : 0;
}

int wst_transports_tl_enabled(const char *tls, const char *tl)
{
    char strict[UCT_TL_NAME_MAX + 2];
    int negate, found;

    if (tls == NULL || *tls == '\0')
        return 1;
    negate = tls[0] == '^';
    tls += negate;
    if (strncmp(tls, "all", 3) == 0 && (tls[3] == ',' || tls[3] == '\0'))
        return 1;
    snprintf(strict, sizeof(strict), "\\%s", tl);
    found = list_lookup(tls, strict);
    if (found == 0)
        found = list_lookup(tls, tl);
    if (found != 0)
        return negate ? 0 : found == 1;
    for (size_t i = 0; i < sizeof(aliases) / sizeof(aliases[0]); i++) {
        int member = list_lookup(aliases[i].tls, tl);
        int named = member != 0 ? list_lookup(tls, aliases[i].alias) : 0;

        if (named != 0)
            return negate ? 0 : member == 1 && named == 1;
    }
    return negate;
}

int wst_transports_dev_enabled(const char *devices, const char *dev)
{
    if (devices == NULL || *devices == '\0')
        return 1;
    return list_has(devices, dev, NULL) || list_has(devices, "all", NULL);
}

static const char *devices_env(uct_device_type_t type)
{
    switch (type) {
    case UCT_DEVICE_TYPE_NET:
        return getenv("UCX_NET_DEVICES");
    case UCT_DEVICE_TYPE_SHM:
        return getenv("UCX_SHM_DEVICES");
    case UCT_DEVICE_TYPE_ACC:
        return getenv("UCX_ACC_DEVICES");
    case UCT_DEVICE_TYPE_SELF:
        return getenv("UCX_SELF_DEVICES");
    default:
        return NULL;
    }
}

/* The state of one probe: UCT needs a worker to open interfaces on. */
struct probe {
    const struct wst_logger *log;
    uct_worker_h worker;
    struct wst_transport *list;
    size_t n, cap;
};

/* Opens t's interface just long enough to read its capabilities. */
static void query_iface(struct probe *p, uct_md_h md,
                        const uct_tl_resource_desc_t *rsc,
                        struct wst_transport *t)
{
    uct_iface_params_t params = {
        .field_mask =
            UCT_IFACE_PARAM_FIELD_OPEN_MODE | UCT_IFACE_PARAM_FIELD_DEVICE,
        .open_mode = UCT_IFACE_OPEN_MODE_DEVICE,
        .mode.device = {.tl_name = rsc->tl_name, .dev_name = rsc->dev_name},
    };
    uct_iface_config_t *config = NULL;
    uct_iface_h iface = NULL;
    uct_iface_attr_t attr;
    ucs_status_t st;

    st = uct_md_iface_config_read(md, rsc->tl_name, NULL, NULL, &config);
    if (st != UCS_OK)
        goto err;
    st = uct_iface_open(md, p->worker, &params, config, &iface);
    uct_config_release(config);
    if (st != UCS_OK)
        goto err;
    st = uct_iface_query(iface, &attr);
    if (st == UCS_OK) {
        t->iface_flags = attr.cap.flags;
        t->queried = 1;
    }
    uct_iface_close(iface);
    if (st != UCS_OK)
        goto err;
    return;

err:
    WST_DEBUG(p->log, "transport %s: interface not queried: %s", t->name,
              ucs_status_string(st));
}

static wst_status_t add_transport(struct probe *p, uct_md_h md, int reg_host,
                                  int reg_cuda,
                                  const uct_tl_resource_desc_t *rsc)
{
    if (wst_array_grow(&p->list, &p->cap, p->n + 1, sizeof(*p->list)) != WST_OK)
        return WST_ERR_NO_MEMORY;
    struct wst_transport *t = &p->list[p->n++];

    memset(t, 0, sizeof(*t));
    snprintf(t->name, sizeof(t->name), "%s/%s", rsc->tl_name, rsc->dev_name);
    t->type = rsc->dev_type;
    t->reg_host = reg_host;
    t->reg_cuda = reg_cuda;
    /* The interface only matters where the domain can register the
     * memory a put lands in. */
    if (reg_host || reg_cuda)
        query_iface(p, md, rsc, t);
    return WST_OK;
}

/* Adds the enabled transports of one memory domain. */
static wst_status_t probe_md(struct probe *p, uct_component_h component,
                             const char *md_name)
{
    const char *tls = getenv("UCX_TLS");
    uct_md_config_t *config = NULL;
    uct_tl_resource_desc_t *rscs = NULL;
    unsigned n_rscs = 0;
    uct_md_attr_t attr;
    uct_md_h md = NULL;
    int reg_host, reg_cuda;
    wst_status_t status = WST_OK;
    ucs_status_t st;

    st = uct_md_config_read(component, NULL, NULL, &config);
    if (st != UCS_OK)
        goto out;
    st = uct_md_open(component, md_name, config, &md);
    uct_config_release(config);
    if (st != UCS_OK)
        goto out;
    st = uct_md_query(md, &attr);
    if (st != UCS_OK)
        goto out_close_md;
    st = uct_md_query_tl_resources(md, &rscs, &n_rscs);
    if (st != UCS_OK)
        goto out_close_md;
    reg_host = (attr.cap.flags & UCT_MD_FLAG_REG) &&
               (attr.cap.reg_mem_types & UCS_BIT(UCS_MEMORY_TYPE_HOST));
    /* cuda_copy registers CUDA memory too, for copies inside this
     * process: it packs no remote key, so no peer can put through it. */
    reg_cuda = (attr.cap.flags & UCT_MD_FLAG_REG) &&
               (attr.cap.reg_mem_types & UCS_BIT(UCS_MEMORY_TYPE_CUDA)) &&
               attr.rkey_packed_size > 0;
    for (unsigned i = 0; i < n_rscs && status == WST_OK; i++)
        if (wst_transports_tl_enabled(tls, rscs[i].tl_name) &&
            wst_transports_dev_enabled(devices_env(rscs[i].dev_type),
                                       rscs[i].dev_name))
            status = add_transport(p, md, reg_host, reg_cuda, &rscs[i]);
    uct_release_tl_resource_list(rscs);

out_close_md:
    uct_md_close(md);
out:
    if (st != UCS_OK)
        WST_DEBUG(p->log, "memory domain %s not queried: %s", md_name,
                  ucs_status_string(st));
    return status;
}

static wst_status_t probe_component(struct probe *p, uct_component_h component)
{
    uct_component_attr_t attr = {
        .field_mask = UCT_COMPONENT_ATTR_FIELD_NAME |
                      UCT_COMPONENT_ATTR_FIELD_MD_RESOURCE_COUNT,
    };
    wst_status_t status = WST_OK;

    if (uct_component_query(component, &attr) != UCS_OK ||
        attr.md_resource_count == 0)
        return WST_OK;
    uct_md_resource_desc_t *mds = calloc(attr.md_resource_count, sizeof(*mds));
    if (mds == NULL)
        return WST_ERR_NO_MEMORY;
    attr.field_mask = UCT_COMPONENT_ATTR_FIELD_MD_RESOURCES;
    attr.md_resources = mds;
    if (uct_component_query(component, &attr) == UCS_OK)
        for (unsigned i = 0; i < attr.md_resource_count && status == WST_OK;
             i++)
            status = probe_md(p, component, mds[i].md_name);
    free(mds);
    return status;
}

wst_status_t wst_transports_probe(const struct wst_logger *log,
                                  struct wst_transport **list_p, size_t *n_p)
{
    struct probe p = {.log = log};
    ucs_async_context_t *async = NULL;
    uct_component_h *components = NULL;
    unsigned n_components = 0;
    wst_status_t status = WST_ERR_TRANSPORT;
    ucs_status_t st;

    st = ucs_async_context_create(UCS_ASYNC_MODE_THREAD_MUTEX, &async);
    if (st != UCS_OK)
        goto err;
    st = uct_worker_create(async, UCS_THREAD_MODE_SINGLE, &p.worker);
    if (st != UCS_OK)
        goto err_destroy_async;
    st = uct_query_components(&components, &n_components);
    if (st != UCS_OK)
        goto err_destroy_worker;
    status = WST_OK;
    for (unsigned i = 0; i < n_components && status == WST_OK; i++)
        status = probe_component(&p, components[i]);
    uct_release_component_list(components);
    if (status != WST_OK)
        goto err_destroy_worker;
    uct_worker_destroy(p.worker);
    ucs_async_context_destroy(async);
    *list_p = p.list;
    *n_p = p.n;
    return WST_OK;

err_destroy_worker:
    uct_worker_destroy(p.worker);
err_destroy_async:
    ucs_async_context_destroy(async);
err:
    free(p.list);
    if (st != UCS_OK) {
        WST_ERROR(log, "probing the uct transports: %s", ucs_status_string(st));
        status = WST_ERR_TRANSPORT;
    }
    return status;
}
