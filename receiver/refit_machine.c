/* refit_machine.c - the receiver's refit state machine: every decision of
 * a refit, as steps from events to actions (see refit_machine.h). */
#include "refit_machine.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DENSE WST_RM_DENSE

static void emit(struct wst_rm_actions *out, struct wst_rm_action a)
{
    wst_rm_actions_add(out, a);
}

static void say(struct wst_refit_machine *m, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void say(struct wst_refit_machine *m, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(m->text, sizeof(m->text), fmt, ap);
    va_end(ap);
}

static struct wst_rm_sender *sender(struct wst_refit_machine *m, uint32_t rank)
{
    return rank < m->world ? &m->senders[rank] : NULL;
}

static size_t cell(const struct wst_refit_machine *m, uint32_t rank,
                   uint32_t layer)
{
    return (size_t)rank * m->lay.n_layers + layer;
}

/* Bytes of rank's layer in the plan. */
static uint64_t expected(const struct wst_refit_machine *m, uint32_t rank,
                         uint32_t layer)
{
    return rank < m->lay.n_senders && layer < m->lay.n_layers
               ? m->lay.bytes[cell(m, rank, layer)]
               : 0;
}

static int staged(const struct wst_refit_machine *m, uint32_t rank,
                  uint32_t layer)
{
    return rank < m->lay.n_senders && layer < m->lay.n_layers &&
           m->lay.staged[cell(m, rank, layer)];
}

/* Staged layers below it have their credit. */
static uint32_t credit_bound(const struct wst_refit_machine *m)
{
    return m->credit_next < m->lay.n_moe ? m->lay.moe_layers[m->credit_next]
                                         : UINT32_MAX;
}

static double since(uint64_t then_ns, uint64_t now_ns)
{
    return (double)(now_ns - then_ns) / 1e9;
}

/* A sender present and in the refit of the current version. */
static int in_version(const struct wst_refit_machine *m,
                      const struct wst_rm_sender *s)
{
    return s->present && s->version == m->version;
}

static void reset_sender(struct wst_refit_machine *m, uint32_t rank)
{
    struct wst_rm_sender *s = &m->senders[rank];

    s->version = 0;
    s->opened = 0;
    s->ready_sent = 0;
    s->go = 0;
    s->acked = 0;
    s->counts_bytes = 0;
    if (m->lay.n_layers == 0)
        return;
    memset(&m->cells.marks[cell(m, rank, 0)], 0, m->lay.n_layers);
    memset(&m->cells.landed[cell(m, rank, 0)], 0,
           m->lay.n_layers * sizeof(*m->cells.landed));
    memset(&m->cells.digests[cell(m, rank, 0)], 0,
           m->lay.n_layers * sizeof(*m->cells.digests));
    memset(&m->cells.hashed[cell(m, rank, 0)], 0,
           m->lay.n_layers * sizeof(*m->cells.hashed));
    memset(&m->cells.sums[cell(m, rank, 0)], 0,
           m->lay.n_layers * sizeof(*m->cells.sums));
}

/* ---- the refit's end ---- */

static void end(struct wst_refit_machine *m, struct wst_rm_actions *out)
{
    m->state = WST_RM_IDLE;
    m->generation++;
    emit(out,
         (struct wst_rm_action){.kind = WST_RM_ACT_END, .version = m->version});
}

/* The engine paused for a refit that wrote nothing: it may serve again
 * only if its live memory is the committed version; an unusable
 * receiver's is not, so the engine hears why instead. */
static void resume(struct wst_refit_machine *m, struct wst_rm_actions *out)
{
    if (!m->unusable)
        emit(out, (struct wst_rm_action){.kind = WST_RM_ACT_RESUME,
                                         .version = m->committed_version});
    else
        emit(out, (struct wst_rm_action){.kind = WST_RM_ACT_TELL_UNUSABLE,
                                         .version = m->committed_version,
                                         .status = WST_ERR_UNUSABLE,
                                         .text = m->reason});
}

/* Fails the refit for m->text. Before the first GO nothing was written:
 * refused, the receiver serves its committed version. After, unusable
 * (prepared included: the group may not have). Once committed, nothing is
 * lost. */
static void fail(struct wst_refit_machine *m, wst_status_t status,
                 struct wst_rm_actions *out)
{
    if (m->state == WST_RM_IDLE)
        return;
    if (m->state == WST_RM_COMMITTING) {
        emit(out, (struct wst_rm_action){.kind = WST_RM_ACT_LATE_FAILURE,
                                         .version = m->version,
                                         .text = m->text});
        return;
    }
    /* Every planned sender hears of it: those in the refit, and those
     * whose BEGIN is still to come (it will be answered with an error,
     * not taken for a new refit; a retry comes on a new connection). */
    for (uint32_t rank = 0; rank < m->world; rank++) {
        struct wst_rm_sender *s = &m->senders[rank];
        if (!s->present)
            continue;
        if (s->version != m->version) {
            if (!s->planned)
                continue;
            s->failed_version = m->version;
        }
        emit(out, (struct wst_rm_action){.kind = WST_RM_ACT_SEND_ERROR,
                                         .rank = rank,
                                         .version = m->version,
                                         .status = status,
                                         .text = m->text});
    }
    /* No receive may go on writing live memory once the refit failed. */
    for (uint32_t rank = 0; rank < m->world; rank++)
        if (m->senders[rank].present)
            emit(out, (struct wst_rm_action){.kind = WST_RM_ACT_ABORT_RX,
                                             .rank = rank});
    if (m->state == WST_RM_BEGINNING || m->state == WST_RM_READY) {
        int paused = m->state == WST_RM_READY;
        /* An unusable receiver keeps saying why it is unusable. */
        if (!m->unusable)
            snprintf(m->reason, sizeof(m->reason), "%s", m->text);
        emit(out, (struct wst_rm_action){.kind = WST_RM_ACT_REFUSED,
                                         .version = m->version,
                                         .text = m->text,
                                         .reason = m->reason});
        end(m, out);
        /* Nothing was written. A paused engine serves again (the begin
         * hook that is still to answer is resumed when it does). */
        if (paused)
            resume(m, out);
        return;
    }
    m->unusable = 1;
    snprintf(m->reason, sizeof(m->reason), "%s", m->text);
    emit(out, (struct wst_rm_action){.kind = WST_RM_ACT_UNUSABLE,
                                     .version = m->version,
                                     .text = m->text});
    end(m, out);
    emit(out, (struct wst_rm_action){.kind = WST_RM_ACT_TELL_UNUSABLE,
                                     .version = m->version,
                                     .status = status,
                                     .text = m->text});
}

/* Fails for an event's own reason. */
static void fail_for(struct wst_refit_machine *m, wst_status_t status,
                     const char *reason, struct wst_rm_actions *out)
{
    if (reason != m->text)
        say(m, "%s", reason != NULL ? reason : wst_status_string(status));
    fail(m, status, out);
}

/* ---- begin ---- */

static void start(struct wst_refit_machine *m, const struct wst_rm_event *ev,
                  struct wst_rm_actions *out)
{
    uint64_t version = ev->version, now_ns = ev->now_ns;

    m->state = WST_RM_BEGINNING;
    m->version = version;
    snprintf(m->label, sizeof(m->label), "%s",
             ev->label != NULL ? ev->label : "");
    m->generation++;
    m->start_ns = now_ns;
    m->progress_ns = now_ns;
    m->layers_final = 0;
    m->credit_next = 0;
    if (m->lay.n_layers != 0) {
        memset(m->lay.queued, 0, m->lay.n_layers * sizeof(*m->lay.queued));
        memset(m->lay.verified, 0, m->lay.n_layers * sizeof(*m->lay.verified));
    }
    if (m->lay.n_moe != 0)
        memset(m->lay.repacked, 0, m->lay.n_moe);
    for (uint32_t rank = 0; rank < m->world; rank++)
        if (m->senders[rank].present)
            reset_sender(m, rank);
    emit(out, (struct wst_rm_action){.kind = WST_RM_ACT_START,
                                     .version = version,
                                     .text = m->label});
    emit(out, (struct wst_rm_action){.kind = WST_RM_ACT_BEGIN_HOOK,
                                     .version = version,
                                     .generation = m->generation});
}

static void on_begin(struct wst_refit_machine *m, const struct wst_rm_event *ev,
                     struct wst_rm_actions *out)
{
    struct wst_rm_sender *s = sender(m, ev->rank);
    int idle = m->state == WST_RM_IDLE;
    wst_status_t status = idle ? WST_ERR_STATE : WST_ERR_BUSY;
    const char *label = ev->label != NULL ? ev->label : "";

    m->text[0] = '\0';
    if (s == NULL || !s->present || !s->planned)
        say(m, "begin without the current plan");
    else if (idle && ev->version == s->failed_version)
        say(m,
            "version %llu failed before this sender began it; retry on a "
            "new connection",
            (unsigned long long)ev->version);
    else if (!idle && ev->version != m->version)
        say(m, "busy with version %llu", (unsigned long long)m->version);
    else if (!idle && strcmp(label, m->label) != 0) {
        /* One version, one label: the senders disagree on what it is. */
        say(m, "version %llu is labeled \"%s\" by another sender, \"%s\" by %s",
            (unsigned long long)ev->version, m->label, label,
            ev->peer != NULL ? ev->peer : "this one");
        fail(m, WST_ERR_INVALID, out);
        return;
    } else if (idle && ev->version <= m->committed_version) {
        /* Its own status: a restarted trainer can tell it from the rest
         * and number its next version above the committed one. */
        status = WST_ERR_STALE_VERSION;
        say(m, "version %llu is not above %llu",
            (unsigned long long)ev->version,
            (unsigned long long)m->committed_version);
    }
    if (m->text[0] != '\0') {
        emit(out, (struct wst_rm_action){.kind = WST_RM_ACT_SEND_ERROR,
                                         .rank = ev->rank,
                                         .version = ev->version,
                                         .status = status,
                                         .text = m->text});
        return;
    }
    if (idle)
        start(m, ev, out);
    s->version = ev->version;
    s->mover = ev->mover;
    emit(out, (struct wst_rm_action){.kind = WST_RM_ACT_OPEN_RX,
                                     .rank = ev->rank,
                                     .version = ev->version,
                                     .mover = ev->mover});
}

/* Acknowledges rank's BEGIN with the credits granted so far, once its half
 * is open and it said GO; its half takes bytes from then on, as far as
 * credits go. */
static void ack(struct wst_refit_machine *m, uint32_t rank,
                struct wst_rm_actions *out)
{
    struct wst_rm_sender *s = &m->senders[rank];

    if (s->version != m->version || s->acked || !s->opened || !s->go)
        return;
    s->acked = 1;
    emit(out, (struct wst_rm_action){
                  .kind = WST_RM_ACT_ACK, .rank = rank, .version = m->version});
    for (uint32_t k = 0; k < m->credit_next; k++)
        if (staged(m, rank, m->lay.moe_layers[k]))
            emit(out, (struct wst_rm_action){.kind = WST_RM_ACT_SEND_CREDIT,
                                             .rank = rank,
                                             .layer = m->lay.moe_layers[k],
                                             .version = m->version});
    emit(out, (struct wst_rm_action){.kind = WST_RM_ACT_RX_BEGIN,
                                     .rank = rank,
                                     .version = m->version,
                                     .bound = credit_bound(m)});
}

/* Once the engine paused and every sender of the world began the version
 * (its half open), each hears READY: it may say GO once every receiver of
 * its group did so. Nothing is written before every sender began, so a
 * sender that begins a version alone (the others gave up on it) cannot
 * leave a half-written refit behind: it is refused at the deadline. */
static void send_ready(struct wst_refit_machine *m, struct wst_rm_actions *out)
{
    if (m->state != WST_RM_READY && m->state != WST_RM_RECEIVING)
        return;
    for (uint32_t rank = 0; rank < m->world; rank++)
        if (!in_version(m, &m->senders[rank]) || !m->senders[rank].opened)
            return;
    for (uint32_t rank = 0; rank < m->world; rank++) {
        struct wst_rm_sender *s = &m->senders[rank];
        if (s->ready_sent)
            continue;
        s->ready_sent = 1;
        emit(out, (struct wst_rm_action){.kind = WST_RM_ACT_SEND_READY,
                                         .rank = rank,
                                         .version = m->version});
    }
}

static void on_rx_opened(struct wst_refit_machine *m,
                         const struct wst_rm_event *ev,
                         struct wst_rm_actions *out)
{
    struct wst_rm_sender *s = sender(m, ev->rank);

    if (s == NULL || !s->present || s->version != m->version)
        return;
    s->opened = 1;
    s->counts_bytes = ev->counts_bytes != 0;
    send_ready(m, out);
}

/* Whether MoE ordinal k is done with its staging slot: repacked, and
 * every sender's check (which reads the slot too) is done. */
static int slot_done(const struct wst_refit_machine *m, uint32_t k)
{
    return m->lay.repacked[k] &&
           m->lay.verified[m->lay.moe_layers[k]] >= m->world;
}

/* Grants credits in MoE-layer order while slots are free: ordinal k needs
 * ordinal k - S done with the slot (its previous tenant). */
static void grant_credits(struct wst_refit_machine *m,
                          struct wst_rm_actions *out)
{
    while (m->credit_next < m->lay.n_moe &&
           (m->credit_next < m->lay.slots ||
            slot_done(m, m->credit_next - m->lay.slots))) {
        uint32_t layer = m->lay.moe_layers[m->credit_next++];
        emit(out, (struct wst_rm_action){.kind = WST_RM_ACT_GRANT,
                                         .layer = layer,
                                         .version = m->version});
        for (uint32_t rank = 0; rank < m->world; rank++) {
            const struct wst_rm_sender *s = &m->senders[rank];
            if (!s->acked || !in_version(m, s))
                continue;
            if (staged(m, rank, layer))
                emit(out, (struct wst_rm_action){.kind = WST_RM_ACT_SEND_CREDIT,
                                                 .rank = rank,
                                                 .layer = layer,
                                                 .version = m->version});
            emit(out, (struct wst_rm_action){.kind = WST_RM_ACT_RX_ALLOW,
                                             .rank = rank,
                                             .bound = credit_bound(m)});
        }
    }
}

static void on_begin_result(struct wst_refit_machine *m,
                            const struct wst_rm_event *ev,
                            struct wst_rm_actions *out)
{
    if (ev->generation != m->generation) {
        /* Refused meanwhile: the engine paused for nothing. */
        if (ev->status == WST_OK)
            resume(m, out);
        return;
    }
    if (ev->status != WST_OK) {
        say(m, "engine refused to begin version %llu: %s",
            (unsigned long long)m->version,
            ev->reason != NULL && ev->reason[0] != '\0'
                ? ev->reason
                : wst_status_string(ev->status));
        fail(m, ev->status, out);
        return;
    }
    m->state = WST_RM_READY;
    m->progress_ns = ev->now_ns;
    emit(out, (struct wst_rm_action){.kind = WST_RM_ACT_READY,
                                     .version = m->version});
    send_ready(m, out);
}

/* A GO or COMMIT out of turn (m->text says which): from a sender of the
 * refit under way it fails the refit (it may have written, or think the
 * group prepared); else it is answered and changes nothing. */
static void out_of_turn(struct wst_refit_machine *m,
                        const struct wst_rm_event *ev,
                        struct wst_rm_actions *out)
{
    if (m->state != WST_RM_IDLE && in_version(m, &m->senders[ev->rank])) {
        fail(m, WST_ERR_PROTOCOL, out);
        return;
    }
    emit(out, (struct wst_rm_action){.kind = WST_RM_ACT_SEND_ERROR,
                                     .rank = ev->rank,
                                     .version = ev->version,
                                     .status = WST_ERR_STATE,
                                     .text = m->text});
}

/* A sender heard READY from every receiver of the group: the first GO
 * starts the writing (nothing is written before it), and each sender's
 * own GO lets its bytes in. */
static void on_go(struct wst_refit_machine *m, const struct wst_rm_event *ev,
                  struct wst_rm_actions *out)
{
    struct wst_rm_sender *s = sender(m, ev->rank);
    int live = m->state == WST_RM_READY || m->state == WST_RM_RECEIVING;

    if (s == NULL || !s->present)
        return;
    if (!live || ev->version != m->version || !in_version(m, s) ||
        !s->ready_sent || s->go) {
        say(m, "go for version %llu, unexpected now",
            (unsigned long long)ev->version);
        out_of_turn(m, ev, out);
        return;
    }
    if (m->state == WST_RM_READY) {
        m->state = WST_RM_RECEIVING;
        m->progress_ns = ev->now_ns;
        m->ack_ns = ev->now_ns;
        emit(out, (struct wst_rm_action){.kind = WST_RM_ACT_RECEIVING,
                                         .version = m->version});
        /* Acks carry the credits granted so far: grant the first ones
         * first. */
        grant_credits(m, out);
    }
    s->go = 1;
    ack(m, ev->rank, out);
}

/* ---- layers ---- */

static void queue_verify(struct wst_refit_machine *m, uint32_t rank,
                         uint32_t layer, struct wst_rm_actions *out)
{
    size_t c = cell(m, rank, layer);

    m->cells.marks[c] = WST_RM_MARK_CHECKING;
    emit(out, (struct wst_rm_action){.kind = WST_RM_ACT_VERIFY,
                                     .rank = rank,
                                     .layer = layer,
                                     .version = m->version,
                                     .generation = m->generation,
                                     .digest = m->cells.digests[c],
                                     .bytes = expected(m, rank, layer),
                                     .hashed = m->cells.hashed[c],
                                     .sum = m->cells.sums[c]});
    /* Every byte of a MoE layer is in: its repack runs beside the checks
     * (refit_machine.h), so the slot's next credit waits for the longer of
     * the two, not their sum. */
    if (++m->lay.queued[layer] == m->world &&
        m->lay.moe_ordinal[layer] != DENSE)
        emit(out, (struct wst_rm_action){.kind = WST_RM_ACT_REPACK,
                                         .layer = layer,
                                         .version = m->version,
                                         .generation = m->generation});
}

/* A layer every sender verified, and repacked if it is a MoE layer: its
 * slot may take the next tenant, and the engine finalizes it. */
static void layer_complete(struct wst_refit_machine *m, uint32_t layer,
                           struct wst_rm_actions *out)
{
    if (m->lay.moe_ordinal[layer] != DENSE)
        grant_credits(m, out);
    emit(out, (struct wst_rm_action){.kind = WST_RM_ACT_FINALIZE,
                                     .layer = layer,
                                     .version = m->version,
                                     .generation = m->generation});
}

static void on_layer_done(struct wst_refit_machine *m,
                          const struct wst_rm_event *ev,
                          struct wst_rm_actions *out)
{
    const struct wst_rm_sender *s = sender(m, ev->rank);
    const char *peer = ev->peer != NULL ? ev->peer : "?";

    if (m->state != WST_RM_RECEIVING || s == NULL || !s->present || !s->acked ||
        ev->version != m->version || ev->layer >= m->lay.n_layers ||
        m->cells.marks[cell(m, ev->rank, ev->layer)] != WST_RM_MARK_NONE) {
        say(m, "sender %s: unexpected layer-done for layer %u of version %llu",
            peer, ev->layer, (unsigned long long)ev->version);
        fail(m, WST_ERR_PROTOCOL, out);
        return;
    }
    uint64_t want = expected(m, ev->rank, ev->layer);
    if (ev->bytes != want) {
        say(m, "sender %s: layer %u has %llu bytes, the plan %llu", peer,
            ev->layer, (unsigned long long)ev->bytes, (unsigned long long)want);
        fail(m, WST_ERR_INTEGRITY, out);
        return;
    }
    size_t c = cell(m, ev->rank, ev->layer);
    m->progress_ns = ev->now_ns;
    m->cells.digests[c] = ev->digest;
    if (s->counts_bytes && m->cells.landed[c] < want) {
        m->cells.marks[c] = WST_RM_MARK_WAITING;
        return;
    }
    queue_verify(m, ev->rank, ev->layer, out);
}

static void on_landed(struct wst_refit_machine *m,
                      const struct wst_rm_event *ev, struct wst_rm_actions *out)
{
    const struct wst_rm_sender *s = sender(m, ev->rank);

    if (m->state != WST_RM_RECEIVING || s == NULL || !in_version(m, s) ||
        !s->acked || ev->layer >= m->lay.n_layers)
        return;
    size_t c = cell(m, ev->rank, ev->layer);
    m->cells.landed[c] += ev->bytes;
    m->cells.hashed[c] += ev->hashed;
    m->cells.sums[c] += ev->sum;
    m->progress_ns = ev->now_ns;
    if (m->cells.marks[c] == WST_RM_MARK_WAITING &&
        m->cells.landed[c] == expected(m, ev->rank, ev->layer))
        queue_verify(m, ev->rank, ev->layer, out);
}

/* A job's result: nonzero when its refit is the current one and it
 * succeeded; a failure of the current refit fails it. */
static int job_current(struct wst_refit_machine *m,
                       const struct wst_rm_event *ev,
                       struct wst_rm_actions *out)
{
    if (ev->generation != m->generation)
        return 0;
    if (ev->status == WST_OK)
        return 1;
    fail_for(m, ev->status, ev->reason, out);
    return 0;
}

static void on_verify_result(struct wst_refit_machine *m,
                             const struct wst_rm_event *ev,
                             struct wst_rm_actions *out)
{
    const struct wst_rm_sender *s = sender(m, ev->rank);
    uint32_t layer = ev->layer;

    if (!job_current(m, ev, out) || layer >= m->lay.n_layers)
        return;
    if (s != NULL && s->present)
        m->cells.marks[cell(m, ev->rank, layer)] = WST_RM_MARK_VERIFIED;
    m->progress_ns = ev->now_ns;
    if (++m->lay.verified[layer] < m->world)
        return;
    emit(out, (struct wst_rm_action){.kind = WST_RM_ACT_RECEIVED,
                                     .layer = layer,
                                     .version = m->version,
                                     .at = since(m->ack_ns, ev->now_ns)});
    if (m->lay.moe_ordinal[layer] == DENSE ||
        m->lay.repacked[m->lay.moe_ordinal[layer]])
        layer_complete(m, layer, out);
}

static void on_repack_result(struct wst_refit_machine *m,
                             const struct wst_rm_event *ev,
                             struct wst_rm_actions *out)
{
    if (!job_current(m, ev, out) || ev->layer >= m->lay.n_layers ||
        m->lay.moe_ordinal[ev->layer] == DENSE)
        return;
    emit(out, (struct wst_rm_action){.kind = WST_RM_ACT_REPACKED,
                                     .layer = ev->layer,
                                     .version = m->version,
                                     .at = since(m->ack_ns, ev->now_ns),
                                     .seconds = ev->seconds});
    m->progress_ns = ev->now_ns;
    m->lay.repacked[m->lay.moe_ordinal[ev->layer]] = 1;
    if (m->lay.verified[ev->layer] >= m->world)
        layer_complete(m, ev->layer, out);
}

/* ---- commit ---- */

static void on_finalize_result(struct wst_refit_machine *m,
                               const struct wst_rm_event *ev,
                               struct wst_rm_actions *out)
{
    if (!job_current(m, ev, out))
        return;
    emit(out, (struct wst_rm_action){.kind = WST_RM_ACT_FINAL,
                                     .layer = ev->layer,
                                     .version = m->version,
                                     .at = since(m->ack_ns, ev->now_ns),
                                     .seconds = ev->seconds});
    if (++m->layers_final < m->lay.n_layers)
        return;
    /* Every byte is in place and verified; the version is committed once
     * every receiver of the group is too (a sender's COMMIT says so). */
    m->state = WST_RM_PREPARED;
    m->progress_ns = ev->now_ns;
    emit(out,
         (struct wst_rm_action){.kind = WST_RM_ACT_PREPARED,
                                .version = m->version,
                                .seconds = since(m->start_ns, ev->now_ns)});
    for (uint32_t rank = 0; rank < m->world; rank++)
        if (in_version(m, &m->senders[rank]))
            emit(out, (struct wst_rm_action){.kind = WST_RM_ACT_SEND_PREPARED,
                                             .rank = rank,
                                             .version = m->version});
}

/* The version is committed now, before the engine is told to serve it. */
static void commit(struct wst_refit_machine *m, uint64_t now_ns,
                   struct wst_rm_actions *out)
{
    struct wst_rm_action c = {.kind = WST_RM_ACT_COMMITTED,
                              .version = m->version,
                              .text = m->committed_label,
                              .bytes = m->lay.total_bytes,
                              /* as the layers' times: the engine's pause
                               * and the group's barrier are not in it */
                              .seconds = since(m->ack_ns, now_ns)};
    for (uint32_t rank = 0; rank < m->world; rank++) {
        const struct wst_rm_sender *s = &m->senders[rank];
        /* Senders gone since they prepared brought their bytes too. */
        if (s->version != m->version || s->mover >= WST_RM_MOVER_KINDS)
            continue;
        for (uint32_t layer = 0; layer < m->lay.n_layers; layer++)
            c.bytes_by_mover[s->mover] += expected(m, rank, layer);
    }
    m->state = WST_RM_COMMITTING;
    m->committed_version = m->version;
    memcpy(m->committed_label, m->label, sizeof(m->committed_label));
    m->unusable = 0;
    m->reason[0] = '\0';
    emit(out, c);
    emit(out, (struct wst_rm_action){.kind = WST_RM_ACT_COMMIT_HOOK,
                                     .version = m->version,
                                     .generation = m->generation});
}

/* A sender heard PREPARED from every receiver of the group. The first
 * COMMIT commits; the other senders' say it again. */
static void on_commit(struct wst_refit_machine *m,
                      const struct wst_rm_event *ev, struct wst_rm_actions *out)
{
    struct wst_rm_sender *s = sender(m, ev->rank);

    if (s == NULL || !s->present)
        return;
    if (m->state == WST_RM_PREPARED && ev->version == m->version &&
        in_version(m, s)) {
        commit(m, ev->now_ns, out);
        return;
    }
    if ((m->state == WST_RM_COMMITTING || m->state == WST_RM_IDLE) &&
        ev->version == m->committed_version && ev->version == m->version)
        return;
    say(m, "commit of version %llu, which this receiver has not prepared",
        (unsigned long long)ev->version);
    out_of_turn(m, ev, out);
}

static void on_commit_done(struct wst_refit_machine *m,
                           const struct wst_rm_event *ev,
                           struct wst_rm_actions *out)
{
    if (!job_current(m, ev, out))
        return;
    for (uint32_t rank = 0; rank < m->world; rank++)
        if (in_version(m, &m->senders[rank]))
            emit(out, (struct wst_rm_action){.kind = WST_RM_ACT_SEND_COMMIT,
                                             .rank = rank,
                                             .version = m->version});
    end(m, out);
}

/* ---- senders ---- */

/* Whether a sender of the refit other than rank is still there (one that
 * may yet say COMMIT). */
static int other_sender(const struct wst_refit_machine *m, uint32_t rank)
{
    for (uint32_t r = 0; r < m->world; r++)
        if (r != rank && in_version(m, &m->senders[r]))
            return 1;
    return 0;
}

static void on_peer(struct wst_refit_machine *m, const struct wst_rm_event *ev,
                    struct wst_rm_actions *out)
{
    struct wst_rm_sender *s = sender(m, ev->rank);

    if (s == NULL)
        return;
    switch (ev->kind) {
    case WST_RM_EV_PEER_JOINED:
        *s = (struct wst_rm_sender){.present = 1};
        reset_sender(m, ev->rank);
        break;
    case WST_RM_EV_PEER_PLANNED:
        reset_sender(m, ev->rank);
        s->planned = 1;
        break;
    case WST_RM_EV_PEER_LEFT:
        s->present = 0;
        break;
    case WST_RM_EV_PEER_LOST:
        if (wst_rm_in_refit(m, ev->rank) &&
            (m->state != WST_RM_PREPARED || !other_sender(m, ev->rank)))
            fail_for(m, ev->status, ev->reason, out);
        break;
    case WST_RM_EV_PEER_ERROR:
        if (wst_rm_in_refit(m, ev->rank) && s->version == m->version)
            fail_for(m, ev->status, ev->reason, out);
        break;
    default:
        break;
    }
}

static void on_fail(struct wst_refit_machine *m, const struct wst_rm_event *ev,
                    struct wst_rm_actions *out)
{
    fail_for(m, ev->status, ev->reason, out);
}

static void on_deadline(struct wst_refit_machine *m,
                        const struct wst_rm_event *ev,
                        struct wst_rm_actions *out)
{
    say(m, "version %llu: no progress for %.1f s",
        (unsigned long long)m->version, ev->seconds);
    fail(m, WST_ERR_TIMED_OUT, out);
}

static void on_plan_refused(struct wst_refit_machine *m,
                            const struct wst_rm_event *ev,
                            struct wst_rm_actions *out)
{
    snprintf(m->reason, sizeof(m->reason), "%s",
             ev->reason != NULL ? ev->reason : "");
    emit(out,
         (struct wst_rm_action){.kind = WST_RM_ACT_REASON, .text = m->reason});
}

static void on_shutdown(struct wst_refit_machine *m,
                        const struct wst_rm_event *ev,
                        struct wst_rm_actions *out)
{
    (void)ev;
    (void)out;
    m->state = WST_RM_IDLE;
    m->generation++;
}

static void (*const handlers[])(struct wst_refit_machine *,
                                const struct wst_rm_event *,
                                struct wst_rm_actions *) = {
    [WST_RM_EV_PEER_JOINED] = on_peer,
    [WST_RM_EV_PEER_PLANNED] = on_peer,
    [WST_RM_EV_PEER_LEFT] = on_peer,
    [WST_RM_EV_PEER_LOST] = on_peer,
    [WST_RM_EV_PEER_ERROR] = on_peer,
    [WST_RM_EV_BEGIN] = on_begin,
    [WST_RM_EV_RX_OPENED] = on_rx_opened,
    [WST_RM_EV_BEGIN_RESULT] = on_begin_result,
    [WST_RM_EV_GO] = on_go,
    [WST_RM_EV_LAYER_DONE] = on_layer_done,
    [WST_RM_EV_LANDED] = on_landed,
    [WST_RM_EV_VERIFY_RESULT] = on_verify_result,
    [WST_RM_EV_REPACK_RESULT] = on_repack_result,
    [WST_RM_EV_FINALIZE_RESULT] = on_finalize_result,
    [WST_RM_EV_COMMIT] = on_commit,
    [WST_RM_EV_COMMIT_DONE] = on_commit_done,
    [WST_RM_EV_FAIL] = on_fail,
    [WST_RM_EV_DEADLINE] = on_deadline,
    [WST_RM_EV_PLAN_REFUSED] = on_plan_refused,
    [WST_RM_EV_SHUTDOWN] = on_shutdown,
};

void wst_rm_step(struct wst_refit_machine *m, const struct wst_rm_event *ev,
                 struct wst_rm_actions *out)
{
    if ((size_t)ev->kind < sizeof(handlers) / sizeof(handlers[0]) &&
        handlers[ev->kind] != NULL)
        handlers[ev->kind](m, ev, out);
}

/* ---- questions ---- */

enum wst_rm_state wst_rm_state(const struct wst_refit_machine *m)
{
    return m->state;
}

uint64_t wst_rm_version(const struct wst_refit_machine *m)
{
    return m->version;
}

uint64_t wst_rm_committed(const struct wst_refit_machine *m)
{
    return m->committed_version;
}

int wst_rm_usable(const struct wst_refit_machine *m)
{
    return !m->unusable;
}

int wst_rm_in_refit(const struct wst_refit_machine *m, uint32_t rank)
{
    return m->state != WST_RM_IDLE && rank < m->world &&
           m->senders[rank].present && m->senders[rank].planned;
}

int wst_rm_takes_data(const struct wst_refit_machine *m, uint32_t rank,
                      uint64_t version)
{
    return m->state == WST_RM_RECEIVING && version == m->version &&
           rank < m->world && m->senders[rank].present &&
           m->senders[rank].acked;
}

int wst_rm_stalled(const struct wst_refit_machine *m, uint64_t now_ns,
                   uint64_t limit_ns)
{
    return m->state != WST_RM_IDLE && now_ns >= m->progress_ns &&
           now_ns - m->progress_ns > limit_ns;
}

enum wst_rm_mark wst_rm_mark(const struct wst_refit_machine *m, uint32_t rank,
                             uint32_t layer)
{
    return rank < m->world && layer < m->lay.n_layers
               ? (enum wst_rm_mark)m->cells.marks[cell(m, rank, layer)]
               : WST_RM_MARK_NONE;
}
