/* plan_hash.c - the hashes of plans and of their inputs (planner.h): a
 * plan's hash, which sender and receiver compare, and the key under which a
 * receiver caches the plan it built for the same inputs.
 */
#include "planner.h"

#include <string.h>

#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack */
#include <xxhash.h>

/* Feeds fields to XXH3 in a fixed little-endian encoding, so the hash is
 * the same on every machine and never sees struct padding. */
struct hasher {
    XXH3_state_t st;
    unsigned char buf[512];
    size_t n;
};

static void hasher_init(struct hasher *h)
{
    XXH3_64bits_reset(&h->st);
    h->n = 0;
}

static void hasher_flush(struct hasher *h)
{
    XXH3_64bits_update(&h->st, h->buf, h->n);
    h->n = 0;
}

/* Little-endian hosts copy the bytes as they are (a million plan items
 * are hashed per plan, and again per sender slice); others spell them
 * out. The bytes fed are the same either way. */
static void put_u64(struct hasher *h, uint64_t v)
{
    int i;

    if (h->n + 8 > sizeof(h->buf))
        hasher_flush(h);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    memcpy(&h->buf[h->n], &v, 8);
    h->n += 8;
    (void)i;
#else
    for (i = 0; i < 8; i++)
        h->buf[h->n++] = (unsigned char)(v >> (8 * i));
#endif
}

static void put_u32(struct hasher *h, uint32_t v)
{
    int i;

    if (h->n + 4 > sizeof(h->buf))
        hasher_flush(h);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    memcpy(&h->buf[h->n], &v, 4);
    h->n += 4;
    (void)i;
#else
    for (i = 0; i < 4; i++)
        h->buf[h->n++] = (unsigned char)(v >> (8 * i));
#endif
}

/* Length-prefixed, so ("ab","c") and ("a","bc") differ. Copied into the
 * buffer (a name fits: WST_NAME_MAX < its size) rather than fed on its
 * own: one small XXH3 update per have cost more than the hashing. */
_Static_assert(WST_NAME_MAX <= sizeof(((struct hasher *)0)->buf),
               "a name fits the hasher's buffer");

static void put_name(struct hasher *h, const char *name)
{
    size_t len = strnlen(name, WST_NAME_MAX);

    put_u32(h, (uint32_t)len);
    if (h->n + len > sizeof(h->buf))
        hasher_flush(h);
    memcpy(&h->buf[h->n], name, len);
    h->n += len;
}

static uint64_t hasher_digest(struct hasher *h)
{
    hasher_flush(h);
    return XXH3_64bits_digest(&h->st);
}

uint64_t wst_plan_hash_items(uint32_t n_senders, uint32_t n_layers,
                             const struct wst_plan_item *items, size_t n)
{
    struct hasher h;
    size_t i;

    hasher_init(&h);
    put_u32(&h, n_senders);
    put_u32(&h, n_layers);
    put_u64(&h, n);
    for (i = 0; i < n; i++) {
        put_u32(&h, items[i].sender);
        put_u32(&h, items[i].have);
        put_u64(&h, items[i].src_offset);
        put_u32(&h, items[i].region);
        put_u64(&h, items[i].dst_offset);
        put_u64(&h, items[i].length);
        put_u32(&h, items[i].layer);
        /* Bit 1 says two more fields follow: a plan of plain items
         * hashes as it did before items had rows. */
        if (items[i].more_rows == 0) {
            put_u32(&h, items[i].staged != 0);
        } else {
            put_u32(&h, (uint32_t)(items[i].staged != 0) | 2u);
            put_u32(&h, items[i].more_rows);
            put_u64(&h, items[i].src_stride);
        }
    }
    return hasher_digest(&h);
}

static void put_tensor(struct hasher *h, const struct wst_tensor_desc *t)
{
    uint32_t d;

    put_name(h, t->name);
    put_u32(h, (uint32_t)t->dtype);
    put_u32(h, t->ndim);
    for (d = 0; d < t->ndim && d < WST_MAX_DIMS; d++)
        put_u64(h, t->shape[d]);
}

static void put_box(struct hasher *h, const struct wst_box *b)
{
    uint32_t d;

    put_u32(h, b->ndim);
    for (d = 0; d < b->ndim && d < WST_MAX_DIMS; d++) {
        put_u64(h, b->start[d]);
        put_u64(h, b->stop[d]);
    }
}

uint64_t wst_plan_input_key(const struct wst_plan_input *in)
{
    struct hasher h;
    size_t i;
    uint32_t s;

    hasher_init(&h);
    put_u32(&h, in->receiver_rank);
    put_u64(&h, in->n_wants);
    for (i = 0; i < in->n_wants; i++) {
        put_tensor(&h, &in->wants[i].tensor);
        put_box(&h, &in->wants[i].box);
        put_u32(&h, in->wants[i].region);
        put_u64(&h, in->wants[i].offset);
        put_u64(&h, in->wants[i].row_pitch);
        /* only grouped wants add bytes, so dense keys stay as they were */
        if (in->wants[i].expert.grouped) {
            put_u32(&h, in->wants[i].expert.ep_rank);
            put_u32(&h, in->wants[i].expert.ep_size);
        }
        if (in->wants[i].staged)
            put_u32(&h, 1);
    }
    put_u64(&h, in->n_regions);
    for (i = 0; i < in->n_regions; i++) {
        put_name(&h, in->regions[i].name);
        put_u64(&h, in->regions[i].length);
        put_u32(&h, (uint32_t)in->regions[i].mem);
    }
    put_u32(&h, in->n_senders);
    for (s = 0; s < in->n_senders; s++) {
        put_u64(&h, in->n_haves[s]);
        for (i = 0; i < in->n_haves[s]; i++) {
            put_tensor(&h, &in->haves[s][i].tensor);
            put_box(&h, &in->haves[s][i].box);
            put_u32(&h, in->haves[s][i].flat != 0);
            put_u32(&h, (uint32_t)in->haves[s][i].mem);
        }
    }
    return hasher_digest(&h);
}
