/* plan_bench_main.c - wstream-plan-bench: plan time and plan memory for
 * full-size DeepSeek-V3 / Kimi-K2 manifests at real trainer and engine
 * layouts (issue 21 item 2).
 *
 * Builds every trainer rank's have manifest (plan_deploy.h), encodes it as
 * a sender would and decodes it as the receiver's planner thread does
 * (have_decode.c), then, for a sample of engine ranks, plans with
 * wst_plan_build as plan_cache.c does and prints per receiver: median plan
 * time over repeats, the planner's peak heap (working set and plan), items,
 * the bytes of the PLAN messages to every sender and the time to encode
 * them (progress thread, send_plan), and the time of the cache key that a
 * re-sent manifest costs (wst_plan_input_key). --check verifies each plan
 * exactly (plan_check.h) and exits non-zero if one is wrong. --csv appends
 * one row per receiver.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "alloc_count.h"
#include "codec.h"
#include "median.h"
#include "plan_check.h"
#include "plan_deploy.h"
#include "planner.h"

#define MAX_REPEATS 64

struct opts {
    const char *model, *csv;
    uint32_t layers, sample, repeats;
    int check;
    struct pd_trainer trainer;
    struct pd_engine engine;
};

/* Every sender's manifest as the receiver holds it after decoding. */
struct manifests {
    uint32_t n;
    struct wst_msg *msgs; /* [n] decoded HAVE messages, owned */
    const struct wst_have **haves;
    size_t *n_haves;
    uint64_t total, max_per_sender, wire_bytes, wire_max, decoded_bytes;
    double peek_ms, decode_ms;
};

struct result {
    uint32_t rank;
    size_t wants, regions, items;
    double plan_ms, plan_min_ms, cpu_ms, first_ms, key_ms, encode_ms;
    long faults; /* minor page faults of the median-time plan's thread */
    int64_t peak_bytes, plan_bytes;
    uint64_t msg_bytes, total_bytes, hash, key;
};

static double now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* This thread's CPU time: on a shared host the planner's wall time
 * includes waiting for a core. */
static double cpu_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static long minor_faults(void)
{
    struct rusage ru;

    getrusage(RUSAGE_THREAD, &ru);
    return ru.ru_minflt;
}

static void usage(FILE *f)
{
    fprintf(
        f, "usage: wstream-plan-bench [options]\n"
           "  --model NAME        deepseek-v3 (default) or kimi-k2\n"
           "  --layers N          first N layers only (default: all)\n"
           "  --trainer KIND      megatron (default) or fsdp\n"
           "  --senders N         trainer ranks (default 256)\n"
           "  --train-tp/--train-pp/--train-ep N  (default 1, 8, 32)\n"
           "  --receivers N       engine ranks (default 128)\n"
           "  --engine-tp N       (default 8)\n"
           "  --engine-ep N       (default: receivers)\n"
           "  --sample K          engine ranks planned (default 8)\n"
           "  --repeats R         plans per rank, median reported (default 5)\n"
           "  --check             verify every plan exactly\n"
           "  --csv FILE          append one row per planned rank\n");
}

static int parse_u32(const char *s, uint32_t *v)
{
    char *end;
    unsigned long x = strtoul(s, &end, 10);

    if (*s == '\0' || *end != '\0' || x > UINT32_MAX)
        return -1;
    *v = (uint32_t)x;
    return 0;
}

static int parse_opts(int argc, char **argv, struct opts *o)
{
    static const struct option lo[] = {
        {"model", 1, 0, 'm'},     {"layers", 1, 0, 'l'},
        {"trainer", 1, 0, 't'},   {"senders", 1, 0, 's'},
        {"train-tp", 1, 0, 'T'},  {"train-pp", 1, 0, 'P'},
        {"train-ep", 1, 0, 'E'},  {"receivers", 1, 0, 'r'},
        {"engine-tp", 1, 0, 'U'}, {"engine-ep", 1, 0, 'F'},
        {"sample", 1, 0, 'k'},    {"repeats", 1, 0, 'n'},
        {"check", 0, 0, 'c'},     {"csv", 1, 0, 'v'},
        {"help", 0, 0, 'h'},      {0, 0, 0, 0}};
    int c, bad = 0;

    *o = (struct opts){.model = "deepseek-v3",
                       .sample = 8,
                       .repeats = 5,
                       .trainer = {PD_MEGATRON, 256, 1, 8, 32},
                       .engine = {128, 8, 0}};
    while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
        switch (c) {
        case 'm':
            o->model = optarg;
            break;
        case 'v':
            o->csv = optarg;
            break;
        case 'c':
            o->check = 1;
            break;
        case 't':
            if (strcmp(optarg, "megatron") == 0)
                o->trainer.kind = PD_MEGATRON;
            else if (strcmp(optarg, "fsdp") == 0)
                o->trainer.kind = PD_FSDP;
            else
                bad = 1;
            break;
        case 'l':
            bad |= parse_u32(optarg, &o->layers);
            break;
        case 's':
            bad |= parse_u32(optarg, &o->trainer.n);
            break;
        case 'T':
            bad |= parse_u32(optarg, &o->trainer.tp);
            break;
        case 'P':
            bad |= parse_u32(optarg, &o->trainer.pp);
            break;
        case 'E':
            bad |= parse_u32(optarg, &o->trainer.ep);
            break;
        case 'r':
            bad |= parse_u32(optarg, &o->engine.n);
            break;
        case 'U':
            bad |= parse_u32(optarg, &o->engine.tp);
            break;
        case 'F':
            bad |= parse_u32(optarg, &o->engine.ep);
            break;
        case 'k':
            bad |= parse_u32(optarg, &o->sample);
            break;
        case 'n':
            bad |= parse_u32(optarg, &o->repeats);
            break;
        case 'h':
            usage(stdout);
            exit(0);
        default:
            bad = 1;
        }
    }
    if (o->engine.ep == 0)
        o->engine.ep = o->engine.n;
    if (bad || optind != argc || o->trainer.n == 0 || o->engine.n == 0 ||
        o->sample == 0 || o->repeats == 0 || o->repeats > MAX_REPEATS) {
        usage(stderr);
        return -1;
    }
    if (o->sample > o->engine.n)
        o->sample = o->engine.n;
    return 0;
}

/* One sender's manifest: built, encoded as the sender does, peeked at and
 * decoded as the receiver does. */
static wst_status_t load_sender(const struct pm_model *m,
                                const struct pd_trainer *t, uint32_t rank,
                                struct manifests *mf)
{
    struct wst_msg msg = {.type = WST_MSG_HAVE};
    uint8_t *buf = NULL;
    size_t len = 0, peeked = 0;
    char err[256] = "";
    wst_status_t st;
    double t0;

    st =
        pd_sender_haves(m, t, rank, &msg.u.have.entries, &msg.u.have.n_entries);
    if (st != WST_OK)
        return st;
    msg.u.have.rank = rank;
    st = wst_msg_encode(&msg, &buf, &len);
    free(msg.u.have.entries);
    if (st != WST_OK) {
        fprintf(stderr, "sender %u: manifest does not encode\n", rank);
        return st;
    }
    t0 = now_ms();
    if (msg.u.have.n_entries > 0 && !wst_msg_peek_have(buf, len, &peeked))
        st = WST_ERR_PROTOCOL;
    mf->peek_ms += now_ms() - t0;
    t0 = now_ms();
    if (st == WST_OK)
        st = wst_msg_decode(buf, len, WST_MSG_MAX_DEFAULT, &mf->msgs[rank], err,
                            sizeof(err));
    mf->decode_ms += now_ms() - t0;
    free(buf);
    if (st != WST_OK) {
        fprintf(stderr, "sender %u: manifest of %zu bytes: %s\n", rank, len,
                err);
        return st;
    }
    mf->haves[rank] = mf->msgs[rank].u.have.entries;
    mf->n_haves[rank] = mf->msgs[rank].u.have.n_entries;
    mf->total += mf->n_haves[rank];
    if (mf->n_haves[rank] > mf->max_per_sender)
        mf->max_per_sender = mf->n_haves[rank];
    mf->wire_bytes += len;
    if (len > mf->wire_max)
        mf->wire_max = len;
    mf->decoded_bytes += mf->n_haves[rank] * sizeof(struct wst_have);
    return WST_OK;
}

static void manifests_free(struct manifests *mf)
{
    for (uint32_t i = 0; mf->msgs != NULL && i < mf->n; i++)
        wst_msg_release(&mf->msgs[i]);
    free(mf->msgs);
    free(mf->haves);
    free(mf->n_haves);
}

static wst_status_t load_senders(const struct pm_model *m,
                                 const struct pd_trainer *t,
                                 struct manifests *mf)
{
    wst_status_t st = WST_OK;

    memset(mf, 0, sizeof(*mf));
    mf->n = t->n;
    mf->msgs = calloc(t->n, sizeof(*mf->msgs));
    mf->haves = calloc(t->n, sizeof(*mf->haves));
    mf->n_haves = calloc(t->n, sizeof(*mf->n_haves));
    if (mf->msgs == NULL || mf->haves == NULL || mf->n_haves == NULL)
        st = WST_ERR_NO_MEMORY;
    for (uint32_t r = 0; r < t->n && st == WST_OK; r++)
        st = load_sender(m, t, r, mf);
    return st;
}

/* The PLAN message of each sender, encoded as send_plan does (regions the
 * slice writes get base and length; no rkeys: the AM mover's size). */
static wst_status_t encode_plans(const struct wst_plan_input *in,
                                 const struct wst_plan *pl, struct result *res)
{
    struct wst_wire_region *regs = calloc(in->n_regions + 1, sizeof(*regs));
    wst_status_t st = WST_OK;
    double t0 = now_ms();

    if (regs == NULL)
        return WST_ERR_NO_MEMORY;
    for (uint32_t s = 0; s < pl->n_senders && st == WST_OK; s++) {
        size_t first = pl->sender_first[s];
        size_t n = pl->sender_first[s + 1] - first;
        struct wst_msg m = {.type = WST_MSG_PLAN};
        uint8_t *buf = NULL;
        size_t len = 0;

        memset(regs, 0, in->n_regions * sizeof(*regs));
        for (size_t k = first; k < first + n; k++) {
            uint32_t i = pl->items[k].region;

            regs[i].base = 4096 + i * 4096ull; /* any nonzero address */
            regs[i].length = in->regions[i].length;
        }
        m.u.plan = (struct wst_plan_msg){
            .plan_hash = wst_plan_hash_items(pl->n_senders, pl->n_layers,
                                             &pl->items[first], n),
            .sender = s,
            .n_senders = pl->n_senders,
            .n_layers = pl->n_layers,
            .mover = WST_MOVER_AM,
            .caps = WST_CAP_ROWS,
            .data_token = 1,
            .n_items = n,
            .items = &pl->items[first],
            .n_regions = in->n_regions,
            .regions = regs};
        st = wst_msg_encode(&m, &buf, &len);
        res->msg_bytes += len;
        free(buf);
    }
    res->encode_ms = now_ms() - t0;
    free(regs);
    return st;
}

/* Plans engine rank 'rank' opts->repeats times; fills res. */
static wst_status_t plan_rank(const struct opts *o, const struct pm_model *m,
                              const struct manifests *mf, uint32_t rank,
                              struct result *res)
{
    struct pd_wants pw;
    struct wst_plan *plan = NULL;
    struct wst_plan_input in;
    double ms[MAX_REPEATS], cpu[MAX_REPEATS], keys[MAX_REPEATS], t0, c0;
    double faults[MAX_REPEATS];
    long f0;
    char err[1024] = "";
    wst_status_t st;
    int64_t base;

    memset(res, 0, sizeof(*res));
    res->rank = rank;
    st = pd_receiver_wants(m, &o->engine, rank, &pw);
    if (st != WST_OK)
        return st;
    in = (struct wst_plan_input){.wants = pw.wants,
                                 .n_wants = pw.n_wants,
                                 .regions = pw.regions,
                                 .n_regions = pw.n_regions,
                                 .haves = mf->haves,
                                 .n_haves = mf->n_haves,
                                 .n_senders = mf->n,
                                 .receiver_rank = rank};
    res->wants = pw.n_wants;
    res->regions = pw.n_regions;
    for (uint32_t i = 0; i < o->repeats && st == WST_OK; i++) {
        wst_plan_destroy(plan);
        plan = NULL;
        base = ac_in_use();
        ac_peak_reset();
        f0 = minor_faults();
        c0 = cpu_ms();
        t0 = now_ms();
        st = wst_plan_build(&in, NULL, &plan, err, sizeof(err));
        ms[i] = now_ms() - t0;
        cpu[i] = cpu_ms() - c0;
        faults[i] = (double)(minor_faults() - f0);
        res->peak_bytes = ac_peak() - base;
        res->plan_bytes = ac_in_use() - base;
        t0 = now_ms();
        (void)wst_plan_input_key(&in);
        keys[i] = now_ms() - t0;
    }
    if (st != WST_OK) {
        fprintf(stderr, "engine rank %u: plan failed: %s\n", rank, err);
        goto out_free;
    }
    res->plan_ms = wst_bench_median(ms, o->repeats);
    res->cpu_ms = wst_bench_median(cpu, o->repeats);
    res->faults = (long)wst_bench_median(faults, o->repeats);
    res->first_ms = ms[0];
    res->plan_min_ms = ms[0];
    for (uint32_t i = 1; i < o->repeats; i++)
        if (ms[i] < res->plan_min_ms)
            res->plan_min_ms = ms[i];
    res->key_ms = wst_bench_median(keys, o->repeats);
    res->items = plan->n_items;
    res->hash = plan->hash;
    res->key = wst_plan_input_key(&in);
    res->total_bytes = plan->total_bytes;
    st = encode_plans(&in, plan, res);
    if (st != WST_OK) {
        fprintf(stderr, "engine rank %u: a plan message does not encode\n",
                rank);
        goto out_free;
    }
    if (o->check) {
        st = pc_plan_check(&in, plan, err, sizeof(err));
        if (st != WST_OK)
            fprintf(stderr, "engine rank %u: plan is wrong: %s\n", rank, err);
    }
out_free:
    wst_plan_destroy(plan);
    pd_wants_free(&pw);
    return st;
}

static const char *trainer_name(const struct pd_trainer *t)
{
    return t->kind == PD_MEGATRON ? "megatron" : "fsdp";
}

static void print_layout(const struct opts *o, const struct pm_model *m,
                         const struct manifests *mf)
{
    const struct pd_trainer *t = &o->trainer;

    printf("model %s: %u layers, %zu tensors\n", m->shape->name, m->layers,
           m->n);
    if (t->kind == PD_MEGATRON)
        printf("trainer: megatron, %u ranks = tp %u x pp %u x dp %u, ep %u "
               "(expert per buffer)\n",
               t->n, t->tp, t->pp, t->n / (t->tp * t->pp), t->ep);
    else
        printf("trainer: fsdp over %u ranks, experts ep %u x fsdp %u (dim 1)\n",
               t->n, t->ep, t->n / t->ep);
    printf("engine: %u ranks, tp %u, ep %u\n", o->engine.n, o->engine.tp,
           o->engine.ep);
    printf("manifests: %llu haves (at most %llu per sender), %.1f MiB on the "
           "wire (at most %.1f KiB per sender), %.1f MiB decoded\n",
           (unsigned long long)mf->total,
           (unsigned long long)mf->max_per_sender, mf->wire_bytes / 1048576.0,
           mf->wire_max / 1024.0, mf->decoded_bytes / 1048576.0);
    printf("receiver, all %u manifests: peek %.1f ms, decode %.1f ms (one "
           "thread)\n",
           mf->n, mf->peek_ms, mf->decode_ms);
}

static void print_result(const struct result *r)
{
    printf("rank %4u: %zu wants, plan %.1f ms (min %.1f, first %.1f, cpu "
           "%.1f, %ld faults), key %.1f ms, %zu items, %.2f GiB, peak %.1f "
           "MiB (plan %.1f MiB), plan messages %.1f KiB encoded in %.1f ms, "
           "hash %016llx, key %016llx\n",
           r->rank, r->wants, r->plan_ms, r->plan_min_ms, r->first_ms,
           r->cpu_ms, r->faults, r->key_ms, r->items,
           r->total_bytes / 1073741824.0, r->peak_bytes / 1048576.0,
           r->plan_bytes / 1048576.0, r->msg_bytes / 1024.0, r->encode_ms,
           (unsigned long long)r->hash, (unsigned long long)r->key);
    fflush(stdout);
}

static void csv_row(FILE *f, const struct opts *o, const struct pm_model *m,
                    const struct manifests *mf, const struct result *r)
{
    const struct pd_trainer *t = &o->trainer;

    fprintf(f,
            "%s,%u,%s,%u,%u,%u,%u,%u,%u,%u,%u,%llu,%llu,%.3f,%.3f,%u,%zu,"
            "%.3f,%.3f,%.3f,%.3f,%ld,%.3f,%zu,%llu,%lld,%lld,%llu,%.3f,%d\n",
            m->shape->name, m->layers, trainer_name(t), t->n, t->tp, t->pp,
            t->ep, o->engine.n, o->engine.tp, o->engine.ep, mf->n,
            (unsigned long long)mf->total, (unsigned long long)mf->wire_bytes,
            mf->peek_ms, mf->decode_ms, r->rank, r->wants, r->plan_ms,
            r->plan_min_ms, r->first_ms, r->cpu_ms, r->faults, r->key_ms,
            r->items, (unsigned long long)r->total_bytes,
            (long long)r->peak_bytes, (long long)r->plan_bytes,
            (unsigned long long)r->msg_bytes, r->encode_ms, o->check);
}

static FILE *csv_open(const char *path)
{
    FILE *f = fopen(path, "a");

    if (f != NULL && ftell(f) == 0)
        fprintf(f,
                "model,layers,trainer,senders,train_tp,train_pp,train_ep,"
                "receivers,engine_tp,engine_ep,manifests,haves,"
                "manifest_wire_bytes,peek_ms_all,decode_ms_all,rank,wants,"
                "plan_ms_median,plan_ms_min,plan_ms_first,plan_cpu_ms_median,"
                "plan_faults,key_ms,items,wanted_bytes,"
                "peak_heap_bytes,plan_heap_bytes,plan_msg_bytes,"
                "plan_msg_encode_ms,checked\n");
    return f;
}

int main(int argc, char **argv)
{
    struct opts o;
    struct pm_model m;
    struct manifests mf;
    const struct pm_shape *shape;
    struct result *res = NULL;
    double *ms = NULL;
    struct rusage ru;
    char err[256] = "";
    FILE *csv = NULL;
    int rc = 1;

    if (parse_opts(argc, argv, &o) != 0)
        return 2;
    shape = pm_shape_find(o.model);
    if (shape == NULL) {
        fprintf(stderr, "unknown model %s\n", o.model);
        return 2;
    }
    if (pm_model_build(&m, shape, o.layers) != WST_OK)
        return 1;
    if (pd_check(&m, &o.trainer, &o.engine, err, sizeof(err)) != WST_OK) {
        fprintf(stderr, "%s\n", err);
        goto out_free_model;
    }
    if (load_senders(&m, &o.trainer, &mf) != WST_OK)
        goto out_free_manifests;
    print_layout(&o, &m, &mf);
    res = calloc(o.sample, sizeof(*res));
    ms = calloc(o.sample, sizeof(*ms));
    if (o.csv != NULL && (csv = csv_open(o.csv)) == NULL)
        fprintf(stderr, "cannot open %s\n", o.csv);
    if (res == NULL || ms == NULL || (o.csv != NULL && csv == NULL))
        goto out_free_results;
    for (uint32_t i = 0; i < o.sample; i++) {
        /* spread over the ranks: first and last always */
        uint32_t rank =
            o.sample == 1
                ? 0
                : (uint32_t)((uint64_t)i * (o.engine.n - 1) / (o.sample - 1));

        if (plan_rank(&o, &m, &mf, rank, &res[i]) != WST_OK)
            goto out_free_results;
        print_result(&res[i]);
        ms[i] = res[i].plan_ms;
        if (csv != NULL)
            csv_row(csv, &o, &m, &mf, &res[i]);
    }
    getrusage(RUSAGE_SELF, &ru);
    printf("median over %u receivers: plan %.1f ms; max rss %.0f MiB%s\n",
           o.sample, wst_bench_median(ms, o.sample), ru.ru_maxrss / 1024.0,
           o.check ? "; every plan checked exact" : "");
    rc = 0;
out_free_results:
    if (csv != NULL)
        fclose(csv);
    free(res);
    free(ms);
out_free_manifests:
    manifests_free(&mf);
out_free_model:
    pm_model_free(&m);
    return rc;
}
