/* progress.c - the progress display of wstream-send (see progress.h). */
#include "progress.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "clock.h"
#include "timed_wait.h"

#define BAR_WIDTH 30
#define TICK_MS 100

struct wst_progress {
    struct wst_progress_params p;
    uint64_t *before; /* [n_layers]: checkpoint bytes of the layers before */
    uint64_t total;
    /* Written by the sender's progress thread: layers started + 1 per
     * receiver (0: none yet). */
    _Atomic uint32_t *started;
    uint32_t *shown; /* display thread only: what lines mode printed */
    double t0;
    int last_len; /* bar: characters drawn last time, to clear them */
    pthread_t thread;
    int has_thread;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int stopping; /* under lock */
};

static void emit_line(wst_progress_t *pr, const char *line)
{
    if (pr->p.format == WST_LOG_FORMAT_JSON)
        wst_log_emit(pr->p.out, WST_LOG_FORMAT_JSON, "send", WST_LOG_INFO,
                     line);
    else
        fprintf(pr->p.out, "wstream-send: %s\n", line);
    fflush(pr->p.out);
}

/* Share of the checkpoint's bytes in the layers before the last started
 * one, when 'started' layers have started. */
static double fraction(const wst_progress_t *pr, uint32_t started)
{
    if (started == 0 || pr->total == 0)
        return 0;
    return (double)pr->before[started - 1] / (double)pr->total;
}

/* Whole percent, rounded down: 100 only once everything is done. */
static int percent(double f)
{
    int p = (int)(f * 100);

    return p > 100 ? 100 : p;
}

static void draw_lines(wst_progress_t *pr)
{
    uint32_t n = pr->p.n_layers;
    char line[512];

    for (size_t r = 0; r < pr->p.n_receivers; r++) {
        uint32_t now =
            atomic_load_explicit(&pr->started[r], memory_order_relaxed);
        for (uint32_t s = pr->shown[r] + 1; s <= now; s++) {
            uint32_t layer = s - 1;
            char what[48];
            if (layer + 1 == n && n > 1)
                snprintf(what, sizeof(what), "global tensors");
            else
                snprintf(what, sizeof(what), "layer %u", layer);
            snprintf(line, sizeof(line),
                     "version %llu: %s: %s (%u/%u) started at %d%%",
                     (unsigned long long)pr->p.version, pr->p.receivers[r],
                     what, s, n, percent(fraction(pr, s)));
            emit_line(pr, line);
        }
        pr->shown[r] = now > pr->shown[r] ? now : pr->shown[r];
    }
}

static void draw_bar(wst_progress_t *pr, int done)
{
    uint32_t slowest = UINT32_MAX;
    double sum = 0, f;
    char bar[BAR_WIDTH + 1], line[256];
    int len;

    for (size_t r = 0; r < pr->p.n_receivers; r++) {
        uint32_t now =
            atomic_load_explicit(&pr->started[r], memory_order_relaxed);
        sum += fraction(pr, now);
        slowest = now < slowest ? now : slowest;
    }
    f = done ? 1.0 : sum / (double)pr->p.n_receivers;
    if (done)
        slowest = pr->p.n_layers;
    int fill = (int)(f * BAR_WIDTH);
    for (int i = 0; i < BAR_WIDTH; i++)
        bar[i] = i < fill ? '#' : '.';
    bar[BAR_WIDTH] = '\0';
    len = snprintf(line, sizeof(line),
                   "version %llu [%s] %3d%%  layer %u/%u  %zu receiver%s  "
                   "%.1f s",
                   (unsigned long long)pr->p.version, bar, percent(f), slowest,
                   pr->p.n_layers, pr->p.n_receivers,
                   pr->p.n_receivers == 1 ? "" : "s", wst_now_s() - pr->t0);
    /* Pad over a longer previous line: '\r' only moves the cursor. */
    fprintf(pr->p.out, "\r%s%*s", line,
            pr->last_len > len ? pr->last_len - len : 0, "");
    fflush(pr->p.out);
    pr->last_len = len;
}

static void *display_main(void *arg)
{
    wst_progress_t *pr = arg;

    pthread_mutex_lock(&pr->lock);
    while (!pr->stopping) {
        pthread_mutex_unlock(&pr->lock);
        if (pr->p.mode == WST_PROGRESS_BAR)
            draw_bar(pr, 0);
        else
            draw_lines(pr);
        pthread_mutex_lock(&pr->lock);
        if (!pr->stopping)
            wst_cond_wait_s(&pr->cond, &pr->lock, TICK_MS / 1000.0);
    }
    pthread_mutex_unlock(&pr->lock);
    return NULL;
}

wst_status_t wst_progress_create(const struct wst_progress_params *params,
                                 wst_progress_t **progress_p)
{
    wst_progress_t *pr;
    uint32_t n = params->n_layers;

    if (params->n_receivers == 0 || n == 0 ||
        (params->mode != WST_PROGRESS_NONE && params->out == NULL))
        return WST_ERR_INVALID;
    pr = calloc(1, sizeof(*pr));
    if (pr == NULL)
        return WST_ERR_NO_MEMORY;
    pr->p = *params;
    pr->p.layer_bytes = NULL; /* borrowed for this call only */
    pthread_mutex_init(&pr->lock, NULL);
    pthread_cond_init(&pr->cond, NULL);
    pr->before = calloc(n, sizeof(*pr->before));
    pr->started = calloc(params->n_receivers, sizeof(*pr->started));
    pr->shown = calloc(params->n_receivers, sizeof(*pr->shown));
    if (pr->before == NULL || pr->started == NULL || pr->shown == NULL) {
        wst_progress_destroy(pr);
        return WST_ERR_NO_MEMORY;
    }
    for (uint32_t l = 0; l < n; l++) {
        pr->before[l] = pr->total;
        pr->total += params->layer_bytes[l];
    }
    for (size_t r = 0; r < params->n_receivers; r++)
        atomic_init(&pr->started[r], 0);
    *progress_p = pr;
    return WST_OK;
}

wst_status_t wst_progress_start(wst_progress_t *pr)
{
    pr->t0 = wst_now_s();
    if (pr->p.mode == WST_PROGRESS_NONE || pr->has_thread)
        return WST_OK;
    if (pthread_create(&pr->thread, NULL, display_main, pr) != 0)
        return WST_ERR_NO_MEMORY;
    pr->has_thread = 1;
    return WST_OK;
}

void wst_progress_layer(void *arg, size_t receiver, uint32_t layer,
                        uint64_t version)
{
    wst_progress_t *pr = arg;

    if (pr == NULL || receiver >= pr->p.n_receivers || version != pr->p.version)
        return;
    /* A receiver whose plan has fewer layers (it wants part of the
     * checkpoint) numbers its global layer lower; never past the end. */
    uint32_t want = layer < pr->p.n_layers ? layer + 1 : pr->p.n_layers;
    uint32_t cur =
        atomic_load_explicit(&pr->started[receiver], memory_order_relaxed);
    while (cur < want && !atomic_compare_exchange_weak_explicit(
                             &pr->started[receiver], &cur, want,
                             memory_order_relaxed, memory_order_relaxed))
        ;
}

void wst_progress_stop(wst_progress_t *pr, int committed)
{
    char line[512];

    if (pr == NULL || !pr->has_thread)
        return;
    pthread_mutex_lock(&pr->lock);
    pr->stopping = 1;
    pthread_cond_signal(&pr->cond);
    pthread_mutex_unlock(&pr->lock);
    pthread_join(pr->thread, NULL);
    pr->has_thread = 0;
    if (pr->p.mode == WST_PROGRESS_BAR) {
        draw_bar(pr, committed);
        fputc('\n', pr->p.out);
        fflush(pr->p.out);
        return;
    }
    draw_lines(pr);
    for (size_t r = 0; committed && r < pr->p.n_receivers; r++) {
        snprintf(line, sizeof(line), "version %llu: %s: committed (100%%)",
                 (unsigned long long)pr->p.version, pr->p.receivers[r]);
        emit_line(pr, line);
    }
}

void wst_progress_destroy(wst_progress_t *pr)
{
    if (pr == NULL)
        return;
    pthread_cond_destroy(&pr->cond);
    pthread_mutex_destroy(&pr->lock);
    free(pr->before);
    free(pr->started);
    free(pr->shown);
    free(pr);
}
