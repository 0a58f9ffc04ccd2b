/* check_digest.c - the GPU digest (digest_gpu.h) against the CPU digest
 * (digest.h) bit for bit, and its speed.
 *
 * The checks hash random bytes (never zeros) that live both in host memory
 * and, copied, in device memory: single runs at every XXH3 length class
 * boundary and at unaligned starts, a sequence of runs (in order and
 * shuffled, since positions are explicit), a digest made of host and device
 * runs, and single flipped bits. The benchmark reports GB/s read.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "digest.h"
#include "digest_gpu.h"
#include "gpu.h"
#include "gpu_check.h"

#define CHUNK ((size_t)WST_DIGEST_CHUNK)
#define BIG_RUN ((size_t)300 * 1000 * 1000 + 7)
#define SLACK 16 /* room for unaligned starts past the biggest run */
#define MAX_RUNS 16

#define BENCH_BYTES ((size_t)2 << 30)
#define BENCH_PATTERN ((size_t)256 << 20) /* a multiple of CHUNK */
#define BENCH_SMALL_RUN (((size_t)256 << 10) + 13)
#define BENCH_MAX_RUNS 8192

/* The same random bytes on the host and on the device. */
struct dfix {
    struct gcheck *g;
    struct wst_gpu_digest *dg;
    unsigned char *host;
    unsigned char *dev;
    size_t bytes;
};

/* A run as an offset into the fixture's buffers. */
struct dspan {
    size_t off;
    size_t len;
};

static uint64_t gpu_digest_of(struct dfix *f, const struct wst_digest_run *runs,
                              uint32_t n, uint64_t total, wst_status_t *st_p)
{
    struct wst_digest d;

    wst_digest_init(&d);
    *st_p = wst_gpu_digest_runs(f->dg, runs, n, f->g->stream, &d);
    d.pos = total;
    return wst_digest_final(&d);
}

static void check_one_run(struct dfix *f, size_t len, size_t misalign)
{
    struct wst_digest_run run = {f->dev + misalign, len, 0};
    uint64_t want = wst_digest_buffer(f->host + misalign, len);
    wst_status_t st;
    uint64_t got = gpu_digest_of(f, &run, 1, len, &st);

    gcheck_result(f->g, st == WST_OK && got == want, "digest.one_run",
                  "len %zu at +%zu: gpu %016llx cpu %016llx (status %d)", len,
                  misalign, (unsigned long long)got, (unsigned long long)want,
                  (int)st);
}

static void check_single_runs(struct dfix *f)
{
    static const size_t lens[] = {
        0,       1,     3,     4,     8,           9,           16,
        17,      128,   129,   240,   241,         1000,        1024,
        1025,    65535, 65536, 65537, 65536 + 240, 65536 + 241, (1u << 20) + 13,
        BIG_RUN,
    };
    static const size_t misalign[] = {0, 1, 3, 8};
    size_t i, m;

    for (i = 0; i < sizeof(lens) / sizeof(lens[0]); i++)
        for (m = 0; m < sizeof(misalign) / sizeof(misalign[0]); m++)
            check_one_run(f, lens[i], misalign[m]);
}

/* Runs scattered over the buffer, odd lengths and starts, an empty one. */
static const struct dspan seq[] = {
    {5, 1000},           {4099, 3 * CHUNK + 7}, {300000, 0},
    {300001, 129},       {400003, CHUNK + 241}, {600000, 5},
    {700000, 2 * CHUNK}, {900017, 240},
};
#define NSEQ (sizeof(seq) / sizeof(seq[0]))

/* The CPU digest of seq[first..NSEQ) added into d, in sequence order. */
static void cpu_update_seq(struct dfix *f, struct wst_digest *d, size_t first)
{
    size_t i;

    for (i = first; i < NSEQ; i++)
        wst_digest_update(d, f->host + seq[i].off, seq[i].len);
}

/* seq[first..NSEQ) as device runs with their stream positions from 'pos';
 * 'reverse' hands them to the GPU last first. Returns the byte count. */
static uint64_t dev_runs_seq(struct dfix *f, size_t first, uint64_t pos,
                             int reverse, struct wst_digest_run *runs)
{
    size_t i;

    for (i = first; i < NSEQ; i++) {
        struct wst_digest_run *r = &runs[reverse ? NSEQ - 1 - i : i - first];

        r->data = f->dev + seq[i].off;
        r->length = seq[i].len;
        r->pos = pos;
        pos += seq[i].len;
    }
    return pos;
}

static void check_sequence(struct dfix *f, int reverse)
{
    struct wst_digest_run runs[NSEQ];
    struct wst_digest cpu;
    wst_status_t st;
    uint64_t total, got, want;

    wst_digest_init(&cpu);
    cpu_update_seq(f, &cpu, 0);
    want = wst_digest_final(&cpu);
    total = dev_runs_seq(f, 0, 0, reverse, runs);
    got = gpu_digest_of(f, runs, NSEQ, total, &st);
    gcheck_result(f->g, st == WST_OK && got == want && total == cpu.pos,
                  reverse ? "digest.sequence_shuffled" : "digest.sequence",
                  "%zu runs, %llu bytes: gpu %016llx cpu %016llx", NSEQ,
                  (unsigned long long)total, (unsigned long long)got,
                  (unsigned long long)want);
}

/* The first two runs hashed on the host, the rest on the device, summed
 * into one digest: equal to the all-CPU digest. */
static void check_host_plus_device(struct dfix *f)
{
    struct wst_digest_run runs[NSEQ];
    struct wst_digest cpu, mixed;
    wst_status_t st;
    uint64_t total;
    size_t i;

    wst_digest_init(&cpu);
    cpu_update_seq(f, &cpu, 0);
    wst_digest_init(&mixed);
    for (i = 0; i < 2; i++)
        wst_digest_update(&mixed, f->host + seq[i].off, seq[i].len);
    total = dev_runs_seq(f, 2, mixed.pos, 0, runs);
    st = wst_gpu_digest_runs(f->dg, runs, (uint32_t)(NSEQ - 2), f->g->stream,
                             &mixed);
    mixed.pos = total;
    gcheck_result(f->g,
                  st == WST_OK &&
                      wst_digest_final(&mixed) == wst_digest_final(&cpu),
                  "digest.host_plus_device",
                  "2 host runs + %zu device runs: gpu %016llx cpu %016llx",
                  NSEQ - 2, (unsigned long long)wst_digest_final(&mixed),
                  (unsigned long long)wst_digest_final(&cpu));
}

/* Flips one bit of byte 'at' on both sides. */
static wst_status_t flip_bit(struct dfix *f, size_t at, int bit)
{
    f->host[at] ^= (unsigned char)(1u << bit);
    return wst_gpu_copy(f->g->log, f->dev + at, f->host + at, 1);
}

/* One flipped bit (in a full chunk, in a short tail chunk) changes the GPU
 * digest, which still equals the CPU digest of the flipped bytes. */
static void check_bit_flip(struct dfix *f, size_t at)
{
    const size_t off = 3, len = CHUNK + 100;
    struct wst_digest_run run = {f->dev + off, len, 0};
    wst_status_t st[4];
    uint64_t before, after, cpu_after;
    int ok;

    before = gpu_digest_of(f, &run, 1, len, &st[0]);
    st[1] = flip_bit(f, off + at, 5);
    after = gpu_digest_of(f, &run, 1, len, &st[2]);
    cpu_after = wst_digest_buffer(f->host + off, len);
    st[3] = flip_bit(f, off + at, 5); /* restore both sides */
    ok = st[0] == WST_OK && st[1] == WST_OK && st[2] == WST_OK &&
         st[3] == WST_OK;
    gcheck_result(f->g, ok && before != after && after == cpu_after,
                  "digest.bit_flip",
                  "bit 5 of byte %zu of %zu: %016llx -> %016llx (cpu %016llx)",
                  at, len, (unsigned long long)before,
                  (unsigned long long)after, (unsigned long long)cpu_after);
}

static void check_api_edges(struct dfix *f)
{
    struct wst_digest_run runs[MAX_RUNS + 1];
    struct wst_digest d;
    wst_status_t st;

    memset(runs, 0, sizeof(runs));
    st = wst_gpu_digest_enqueue(f->dg, runs, MAX_RUNS + 1, f->g->stream);
    gcheck_result(f->g, st == WST_ERR_INVALID, "digest.too_many_runs",
                  "%d runs into a context of %d: status %d", MAX_RUNS + 1,
                  MAX_RUNS, (int)st);
    wst_digest_init(&d);
    d.sum = 42;
    st = wst_gpu_digest_runs(f->dg, runs, 0, f->g->stream, &d);
    gcheck_result(f->g, st == WST_OK && d.sum == 42, "digest.no_runs",
                  "adds %llu (status %d)", (unsigned long long)(d.sum - 42),
                  (int)st);
}

static int dfix_setup(struct dfix *f, struct gcheck *g)
{
    wst_status_t st;

    memset(f, 0, sizeof(*f));
    f->g = g;
    f->bytes = BIG_RUN + SLACK;
    f->host = malloc(f->bytes);
    if (f->host == NULL)
        return -1;
    gcheck_fill_random(g, f->host, f->bytes);
    st = wst_gpu_digest_create(g->log, MAX_RUNS, &f->dg);
    if (st == WST_OK)
        st = wst_gpu_malloc(g->log, f->bytes, (void **)&f->dev);
    if (st == WST_OK)
        st = wst_gpu_copy(g->log, f->dev, f->host, f->bytes);
    return st == WST_OK ? 0 : -1;
}

static void dfix_teardown(struct dfix *f)
{
    wst_gpu_free(f->dev);
    wst_gpu_digest_destroy(f->dg);
    free(f->host);
}

void check_digest(struct gcheck *g)
{
    struct dfix f;

    if (dfix_setup(&f, g) != 0) {
        gcheck_result(g, 0, "digest.setup", "%zu bytes on host and device",
                      (size_t)(BIG_RUN + SLACK));
        dfix_teardown(&f);
        return;
    }
    check_single_runs(&f);
    check_sequence(&f, 0);
    check_sequence(&f, 1);
    check_host_plus_device(&f);
    check_bit_flip(&f, 12345);
    check_bit_flip(&f, CHUNK + 50);
    check_api_edges(&f);
    dfix_teardown(&f);
}

/* ---- benchmark -------------------------------------------------------- */

struct dbench {
    struct wst_gpu_digest *dg;
    struct wst_digest_run *runs;
    uint32_t n;
};

static int run_digest(void *arg, wst_gpu_stream_t stream)
{
    struct dbench *b = arg;

    return wst_gpu_digest_enqueue(b->dg, b->runs, b->n, stream) != WST_OK;
}

/* Times the digest of runs[0..n) and checks its value once. */
static void bench_one(struct gcheck *g, struct dbench *b, const char *name,
                      uint64_t bytes, uint64_t want, double copy_gbs)
{
    struct wst_digest d;
    wst_status_t st;
    double ms = gbench_median_ms(g, run_digest, b, 2, 10);

    if (ms > 0)
        gbench_row(name, (double)bytes, ms, copy_gbs);
    wst_digest_init(&d);
    st = wst_gpu_digest_runs(b->dg, b->runs, b->n, g->stream, &d);
    d.pos = bytes;
    gcheck_result(g, ms > 0 && st == WST_OK && wst_digest_final(&d) == want,
                  "digest.bench_value", "%s: gpu %016llx cpu %016llx", name,
                  (unsigned long long)wst_digest_final(&d),
                  (unsigned long long)want);
}

/* The CPU digest of the device buffer as one run: the pattern's chunks,
 * repeated (its size is a multiple of the chunk). The first copy is timed:
 * one thread, libxxhash. */
static uint64_t cpu_reference(const unsigned char *pat)
{
    struct wst_digest d;
    double t0 = wst_now_s();
    size_t at;

    wst_digest_init(&d);
    wst_digest_update(&d, pat, BENCH_PATTERN);
    gbench_row("digest cpu 256 MiB (1 thread, libxxhash)",
               (double)BENCH_PATTERN, (wst_now_s() - t0) * 1e3, 0);
    for (at = BENCH_PATTERN; at < BENCH_BYTES; at += BENCH_PATTERN)
        wst_digest_update(&d, pat, BENCH_PATTERN);
    return wst_digest_final(&d);
}

/* Tensor-like runs with short tails (one-thread chunks) and a large table
 * to search. Runs never cross a copy of the pattern, so the CPU reference
 * hashes the pattern's bytes. */
static void bench_small_runs(struct gcheck *g, struct dbench *b,
                             const unsigned char *pat, unsigned char *dev,
                             double copy_gbs)
{
    uint32_t per = (uint32_t)(BENCH_PATTERN / BENCH_SMALL_RUN);
    uint32_t copies = (uint32_t)(BENCH_BYTES / BENCH_PATTERN), c, i;
    struct wst_digest cpu;
    uint64_t pos = 0;

    wst_digest_init(&cpu);
    b->n = per * copies;
    for (c = 0; c < copies; c++)
        for (i = 0; i < per; i++) {
            struct wst_digest_run *r = &b->runs[c * per + i];

            r->data = dev + c * BENCH_PATTERN + (size_t)i * BENCH_SMALL_RUN;
            r->length = BENCH_SMALL_RUN;
            r->pos = pos;
            pos += BENCH_SMALL_RUN;
            wst_digest_update(&cpu, pat + (size_t)i * BENCH_SMALL_RUN,
                              BENCH_SMALL_RUN);
        }
    bench_one(g, b, "digest gpu 2 GiB as 8k runs of 256 KiB+13", pos,
              wst_digest_final(&cpu), copy_gbs);
}

void bench_digest(struct gcheck *g, double copy_gbs)
{
    struct dbench b = {NULL, NULL, 0};
    unsigned char *pat = malloc(BENCH_PATTERN), *dev = NULL;
    wst_status_t st = pat != NULL ? WST_OK : WST_ERR_NO_MEMORY;
    size_t at;

    b.runs = calloc(BENCH_MAX_RUNS, sizeof(*b.runs));
    if (st == WST_OK && b.runs == NULL)
        st = WST_ERR_NO_MEMORY;
    if (st == WST_OK)
        st = wst_gpu_digest_create(g->log, BENCH_MAX_RUNS, &b.dg);
    if (st == WST_OK)
        st = wst_gpu_malloc(g->log, BENCH_BYTES, (void **)&dev);
    if (st == WST_OK)
        gcheck_fill_random(g, pat, BENCH_PATTERN);
    for (at = 0; st == WST_OK && at < BENCH_BYTES; at += BENCH_PATTERN)
        st = wst_gpu_copy(g->log, dev + at, pat, BENCH_PATTERN);
    if (st != WST_OK) {
        gcheck_result(g, 0, "digest.bench_setup", "status %d", (int)st);
        goto out;
    }
    b.n = 1;
    b.runs[0].data = dev;
    b.runs[0].length = BENCH_BYTES;
    b.runs[0].pos = 0;
    bench_one(g, &b, "digest gpu 2 GiB, one run (bytes read)", BENCH_BYTES,
              cpu_reference(pat), copy_gbs);
    bench_small_runs(g, &b, pat, dev, copy_gbs);
out:
    wst_gpu_free(dev);
    wst_gpu_digest_destroy(b.dg);
    free(b.runs);
    free(pat);
}
