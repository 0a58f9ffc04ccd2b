/* refill.c - the synthetic model's refill cost per GiB (see refill.h). */
#include "refill.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "model.h"

static double thread_cpu_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

wst_status_t wst_bench_refill_cost(uint64_t mib, uint64_t seed,
                                   double *s_per_gib_p)
{
    struct wst_model m = {0};
    struct wst_have *haves = NULL;
    void **bufs = NULL;
    size_t n = 0, i;
    uint64_t bytes = 0;
    char preset[32], err[256];
    double t0;
    wst_status_t st;

    snprintf(preset, sizeof(preset), "dense:%llu", (unsigned long long)mib);
    st = wst_model_preset(preset, 4, &m, err, sizeof(err));
    if (st != WST_OK)
        goto out;
    st = wst_model_trainer_shards(&m, 0, 1, &haves, &n);
    if (st != WST_OK)
        goto err_release_model;
    bufs = calloc(n ? n : 1, sizeof(*bufs));
    st = WST_ERR_NO_MEMORY;
    if (bufs == NULL)
        goto err_free_haves;
    for (i = 0; i < n; i++) {
        uint64_t b = wst_model_shard_bytes(&haves[i]);
        bufs[i] = malloc(b ? b : 1);
        if (bufs[i] == NULL)
            goto err_free_bufs;
        /* Version 0 touches the pages, as the sender's set-up does. */
        wst_model_fill_shard(&haves[i], seed, 0, bufs[i]);
        bytes += b;
    }
    t0 = thread_cpu_s();
    for (i = 0; i < n; i++)
        wst_model_fill_shard(&haves[i], seed, 1, bufs[i]);
    *s_per_gib_p = (thread_cpu_s() - t0) / ((double)bytes / (1ull << 30));
    st = WST_OK;
err_free_bufs:
    for (i = 0; i < n; i++)
        free(bufs[i]);
    free(bufs);
err_free_haves:
    free(haves);
err_release_model:
    wst_model_release(&m);
out:
    return st;
}
