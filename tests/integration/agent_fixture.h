/* agent_fixture.h - a real wstream-agent process and in-process senders for
 * the integration tests.
 *
 * it_agent_start builds the tiny model with one layer, writes its TP-1
 * engine layout to a fresh temporary folder, creates and poisons the POSIX
 * shm the layout names (as wstream-demo does), fork+execs the agent with
 * --listen 127.0.0.1:0 --port-file --status-file --timeout 5 (its output goes
 * to a log file), --auth-secret-file (a fresh random secret in the folder)
 * and waits for the port; it_agent_start_engine adds
 * --engine-socket. it_agent_stop sends SIGTERM, reaps
 * it, prints its log, unlinks the shm and removes the folder.
 */
#ifndef WST_IT_AGENT_FIXTURE_H
#define WST_IT_AGENT_FIXTURE_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <wstream/sender.h>

#include "layout_file.h"
#include "model.h"
#include "shm.h"

#define IT_SEED 7
#define IT_POISON WST_SHM_POISON

struct it_agent {
    char dir[256];
    char layout_path[PATH_MAX];
    char port_path[PATH_MAX];
    char status_path[PATH_MAX];
    char log_path[PATH_MAX];
    char engine_socket[PATH_MAX]; /* "" unless started with an engine */
    /* The deployment's secret (<dir>/secret, mode 0600, random), passed
     * to the agent and to it_sender_setup's senders; "" when insecure. */
    char secret_path[PATH_MAX];
    /* Flags after the fixture's own (NULL-terminated; borrowed for the
     * fixture's life, restarts included); NULL: none. */
    const char *const *extra_args;
    char shm_name[64];
    void *shm;
    struct wst_model model;
    struct wst_layout layout;
    pid_t pid;
    uint16_t port;
    char addr[64]; /* "127.0.0.1:<port>" */
};

/* A sender of rank 0 of 1 and the shards it registers. */
struct it_sender {
    wst_sender_t *sender;
    struct wst_have *haves; /* the model's full shards; tests may edit them */
    size_t n_haves;
    void **bufs;
};

/* 0 on success; on failure prints why on stderr, cleans up, returns -1. */
int it_agent_start(struct it_agent *a, const char *agent_bin);

/* As it_agent_start, with 'edit' (may be NULL) applied to the layout
 * before it is written and served. An edit that gives the layout
 * "allocations" (n_allocations > 0) makes it the test's: the fixture
 * creates no shm object then, and a->shm stays NULL. */
int it_agent_start_edited(struct it_agent *a, const char *agent_bin,
                          void (*edit)(struct wst_layout *l));

/* As it_agent_start, and the agent listens for an engine process on
 * a->engine_socket ("<dir>/engine.sock", --engine-socket). */
int it_agent_start_engine(struct it_agent *a, const char *agent_bin);

/* As it_agent_start, with 'extra' flags after the fixture's own (a flag
 * given twice: the later one wins). */
int it_agent_start_args(struct it_agent *a, const char *agent_bin,
                        const char *const *extra);

/* As it_agent_start, without a secret: the agent runs --insecure and
 * it_sender_setup's senders have none. */
int it_agent_start_insecure(struct it_agent *a, const char *agent_bin);
/* Kills (SIGTERM, then SIGKILL after 10 s) and reaps the agent, prints its
 * log, unlinks the shm, removes the folder. Safe on a zeroed or
 * half-started fixture. */
void it_agent_stop(struct it_agent *a);

/* cmocka set-up and tear-down of one agent per test: *state gets a new
 * started fixture (owned by the tear-down, which stops and frees it).
 * A test wraps the set-up to give it its agent_bin. */
int it_agent_setup(void **state, const char *agent_bin);
int it_agent_teardown(void **state);

/* Sends 'sig' to the agent and reaps it (SIGKILL after 10 s), keeping its
 * folder, files and shm for it_agent_restart. Its wait status, or -1 when
 * there was no agent. */
int it_agent_kill(struct it_agent *a, int sig);

/* Starts the agent again after it_agent_kill, with the same arguments,
 * files and shm (its log starts over; the old one is printed first); 0
 * once it listens. -1 otherwise, and when it exited, its wait status in
 * *wstatus_p (may be NULL; -1 when it is still running). */
int it_agent_restart(struct it_agent *a, const char *agent_bin, int *wstatus_p);

/* Nonzero while the agent process is alive (waitpid WNOHANG == 0). */
int it_agent_alive(struct it_agent *a);

/* The whole status file (its first len - 1 bytes), NUL-terminated: 0, or
 * -1 when it cannot be read. */
int it_agent_status_text(const struct it_agent *a, char *text, size_t len);

/* Reads the status file: 0 and the two fields, or -1. */
int it_agent_status(const struct it_agent *a, uint64_t *committed_p,
                    int *usable_p);

/* Polls the status file until it reports committed_version >= version,
 * up to timeout_s. 0 when it did. */
int it_agent_wait_status(const struct it_agent *a, uint64_t version,
                         double timeout_s);

/* Nonzero when every byte of the shm is still the poison byte. */
int it_agent_shm_untouched(const struct it_agent *a);

/* Nonzero when a line of the file at 'path' (at most 2 KiB each, the '\n'
 * included) contains 'needle'. */
int it_file_has(const char *path, const char *needle);

/* Nonzero when the agent's log contains 'needle'. */
int it_agent_log_has(const struct it_agent *a, const char *needle);

/* Waits until the agent's log contains 'needle' (looked at every 10 ms),
 * at most timeout_s: nonzero when it does. */
int it_agent_wait_log(const struct it_agent *a, const char *needle,
                      double timeout_s);

/* As it_agent_wait_log, until at least n lines contain 'needle'. */
int it_agent_wait_log_lines(const struct it_agent *a, const char *needle, int n,
                            double timeout_s);

/* Loads the model's shards for rank 0 of 1 into s->haves (nothing else). */
int it_sender_load(struct it_sender *s, const struct it_agent *a);

/* Creates the sender for a's agent, allocates a buffer for every have (its
 * size from the have as edited), fills it for 'version' and registers it,
 * except have 'skip' (SIZE_MAX: none). Returns the first failing status. */
wst_status_t it_sender_setup(struct it_sender *s, const struct it_agent *a,
                             size_t skip, uint64_t version);

/* As it_sender_setup, as rank 'rank' of 'world' senders. */
wst_status_t it_sender_setup_rank(struct it_sender *s, const struct it_agent *a,
                                  uint32_t rank, uint32_t world, size_t skip,
                                  uint64_t version);

/* Refills every buffer for 'version' (no register). */
void it_sender_fill(struct it_sender *s, uint64_t version);

/* Frees everything, destroys the sender. Safe on a zeroed struct. */
void it_sender_destroy(struct it_sender *s);

/* One refit of 'version' from a fresh sender (rank 0 of 1, a's secret)
 * of the whole model: 0 once the agent's status shows it committed, else
 * -1 after printing why. */
int it_refit(const struct it_agent *a, uint64_t version);
/* Index of the first 2-D (non-flat) tensor of the model's shards. */
size_t it_first_matrix(const struct it_sender *s);

/* GET 'path' from 127.0.0.1:port over plain HTTP/1.0: the status code (-1
 * when there is no answer), and the body into body[len]. */
int it_http_get(uint16_t port, const char *path, char *body, size_t len);

#endif
