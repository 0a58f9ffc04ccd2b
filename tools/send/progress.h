/* progress.h - what wstream-send shows while a version streams.
 *
 * The sender calls wst_progress_layer on its progress thread each time it
 * starts posting a layer to a receiver. That call only records the layer
 * (one atomic maximum per receiver): it never blocks, allocates or writes.
 * A display thread of this module reads those records a few times a
 * second and draws them:
 *   bar    one line redrawn in place with '\r' (for a terminal): the mean
 *          of the receivers' progress, the slowest receiver's layer, time;
 *   lines  one line per layer started per receiver (for logs and pipes),
 *          and one per receiver when the version is committed.
 * Progress is measured in the checkpoint's bytes by layer: a receiver that
 * has started layer L has been sent, or is being sent, everything before
 * it. Layers follow the planner (planner.h): "model.layers.{l}.*" is layer
 * l; every other tensor is in the last layer, after the highest one.
 */
#ifndef WST_SEND_PROGRESS_H
#define WST_SEND_PROGRESS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "log.h"
#include <wstream/status.h>

enum wst_progress_mode {
    WST_PROGRESS_NONE = 0,
    WST_PROGRESS_BAR = 1,
    WST_PROGRESS_LINES = 2,
};

struct wst_progress_params {
    enum wst_progress_mode mode;
    FILE *out; /* borrowed until wst_progress_stop */
    /* lines mode: JSON writes each line as a log record (log.h) */
    enum wst_log_format format;
    const char *const *receivers; /* names; borrowed until stop */
    size_t n_receivers;
    uint32_t n_layers;           /* >= 1 */
    const uint64_t *layer_bytes; /* [n_layers]; copied at start */
    uint64_t version;
};

typedef struct wst_progress wst_progress_t;

/* Allocates a display (nothing is drawn yet). On success *progress_p is
 * owned by the caller: wst_progress_destroy it after the sender it was
 * given to is destroyed, as the sender may call wst_progress_layer until
 * then. */
wst_status_t wst_progress_create(const struct wst_progress_params *params,
                                 wst_progress_t **progress_p);

/* Starts drawing, on a thread of its own (none for WST_PROGRESS_NONE),
 * and starts the clock the bar shows. */
wst_status_t wst_progress_start(wst_progress_t *progress);

/* A wst_layer_progress_fn (sender.h); 'arg' is the wst_progress_t. Safe
 * from any thread; records for other versions or receivers are ignored. */
void wst_progress_layer(void *arg, size_t receiver, uint32_t layer,
                        uint64_t version);

/* Stops the drawing thread and draws the end: 100% and one line per
 * receiver when 'committed'; where it stopped otherwise. */
void wst_progress_stop(wst_progress_t *progress, int committed);

/* Frees 'progress' (stopped or never started). NULL is fine. */
void wst_progress_destroy(wst_progress_t *progress);

#endif
