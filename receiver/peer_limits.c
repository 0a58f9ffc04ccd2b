/* peer_limits.c - what one authenticated sender, and all of them together,
 * may make the receiver hold: connections without a rank, shards in a
 * have manifest, bytes of decoded manifests and of those still being
 * unpacked (progress thread).
 *
 * A sender proves it holds the deployment's secret, but a bug or a
 * compromised trainer must still not exhaust the agent. The natural bound
 * comes from what the receiver itself wants: a sender's manifest lists the
 * shards it holds, and any useful one overlaps a wanted box, so a
 * manifest far longer than the wants (WST_RECV_MANIFEST_WANT_MULTIPLE
 * times them, at least WST_RECV_MANIFEST_ENTRIES_MIN, unless configured)
 * is refused before the receiver keeps it. Ranks are bounded by the world
 * size (one peer a rank) and unranked peers by limits.unranked.
 */
#include <stdio.h>

#include "log.h"
#include "receiver_config.h"
#include "receiver_internal.h"

/* Shards one sender's manifest may list: limits.entries, or auto. */
static uint64_t manifest_limit(const struct wst_receiver *r)
{
    uint64_t n = r->limits.entries;

    if (n == 0) {
        n = (uint64_t)r->n_wants * WST_RECV_MANIFEST_WANT_MULTIPLE;
        if (n < WST_RECV_MANIFEST_ENTRIES_MIN)
            n = WST_RECV_MANIFEST_ENTRIES_MIN;
    }
    return n < WST_MAX_HAVES ? n : WST_MAX_HAVES;
}

wst_status_t wst_recv_limit_have(const struct wst_receiver *r, size_t n_entries,
                                 char *why, size_t len)
{
    uint64_t max = manifest_limit(r);
    uint64_t bytes = (uint64_t)n_entries * sizeof(struct wst_have);

    if (n_entries > max) {
        char how[96] = "";
        if (r->limits.entries == 0)
            snprintf(how, sizeof(how),
                     " (auto: %d times the %zu tensors wanted, at least %d)",
                     WST_RECV_MANIFEST_WANT_MULTIPLE, r->n_wants,
                     WST_RECV_MANIFEST_ENTRIES_MIN);
        snprintf(why, len,
                 "have manifest of %zu shards exceeds max-manifest-entries "
                 "%llu%s",
                 n_entries, (unsigned long long)max, how);
        return WST_ERR_TOO_LARGE;
    }
    if (bytes > r->limits.bytes ||
        r->manifest_bytes > r->limits.bytes - bytes) {
        char pending[96] = "";
        if (r->have_unpacking > 0)
            snprintf(pending, sizeof(pending),
                     " (%llu of them reserved by manifests being unpacked)",
                     (unsigned long long)r->have_unpacking);
        snprintf(why, len,
                 "have manifest of %zu shards (%llu bytes decoded) would "
                 "bring the manifests held to %llu bytes%s, over "
                 "max-manifest-bytes %llu",
                 n_entries, (unsigned long long)bytes,
                 (unsigned long long)(r->manifest_bytes + bytes), pending,
                 (unsigned long long)r->limits.bytes);
        return WST_ERR_TOO_LARGE;
    }
    return WST_OK;
}

wst_status_t wst_recv_reserve_have(struct wst_receiver *r, struct peer *p,
                                   size_t n_entries, size_t wire_len, char *why,
                                   size_t len)
{
    uint64_t bytes = (uint64_t)n_entries * sizeof(struct wst_have) + wire_len;

    if (bytes > r->limits.bytes ||
        r->manifest_bytes > r->limits.bytes - bytes) {
        snprintf(why, len,
                 "have manifest of %zu shards (%llu bytes to unpack it) "
                 "would bring the manifests held to %llu bytes (%llu of "
                 "them reserved by manifests being unpacked), over "
                 "max-manifest-bytes %llu",
                 n_entries, (unsigned long long)bytes,
                 (unsigned long long)(r->manifest_bytes + bytes),
                 (unsigned long long)r->have_unpacking,
                 (unsigned long long)r->limits.bytes);
        return WST_ERR_TOO_LARGE;
    }
    r->manifest_bytes += bytes;
    r->have_unpacking += bytes;
    p->have_reserved = bytes;
    return WST_OK;
}

void wst_recv_unreserve_have(struct wst_receiver *r, struct peer *p)
{
    wst_recv_release_have(r, p->have_reserved);
    r->have_unpacking -= p->have_reserved <= r->have_unpacking
                             ? p->have_reserved
                             : r->have_unpacking;
    p->have_reserved = 0;
}

void wst_recv_hold_have(struct wst_receiver *r, struct peer *p)
{
    p->have_bytes = (uint64_t)p->have.n_entries * sizeof(struct wst_have);
    r->manifest_bytes += p->have_bytes;
}

void wst_recv_release_have(struct wst_receiver *r, uint64_t bytes)
{
    r->manifest_bytes -= bytes <= r->manifest_bytes ? bytes : r->manifest_bytes;
}

wst_status_t wst_recv_limit_unranked(struct wst_receiver *r, char *why,
                                     size_t len)
{
    if (r->n_unranked < r->limits.unranked)
        return WST_OK;
    snprintf(why, len,
             "%u authenticated connections without a sender rank are "
             "open, max-unranked-peers %u",
             r->n_unranked, r->limits.unranked);
    return WST_ERR_BUSY;
}
