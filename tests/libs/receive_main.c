/* receive_main.c - an engine that hosts the receiver in its own process:
 * a program linked against libwstream_receiver.so alone (no archive, no
 * private header). It receives the tensor of one_tensor.h from
 * send_main.c, another process over libwstream_sender.so, and checks
 * every byte against the file the sender read, the hooks the receiver
 * ran on its engine thread, and the state it reports.
 *
 *     wst-so-receive SENDER_PROGRAM
 */
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>
#include <wstream/receiver.h>

#include "one_tensor.h"

#define POISON 0xA5
#define GUARD 64 /* poisoned bytes after the tensor, inside the region */

extern char **environ;
static const char *sender_program;

/* What the hooks saw, in order ("begin 1;layer 0 1;committed 1;"). */
struct seen {
    pthread_mutex_t lock;
    char order[512];
};

static void note(struct seen *s, const char *fmt, ...)
{
    size_t used;
    va_list ap;

    pthread_mutex_lock(&s->lock);
    used = strlen(s->order);
    va_start(ap, fmt);
    vsnprintf(s->order + used, sizeof(s->order) - used, fmt, ap);
    va_end(ap);
    pthread_mutex_unlock(&s->lock);
}

static wst_status_t on_begin(void *arg, uint64_t version, char *reason,
                             size_t reason_len)
{
    (void)reason;
    (void)reason_len;
    note(arg, "begin %llu;", (unsigned long long)version);
    return WST_OK;
}

static wst_status_t on_layer(void *arg, uint32_t layer, uint64_t version,
                             char *reason, size_t reason_len)
{
    (void)reason;
    (void)reason_len;
    note(arg, "layer %u %llu;", layer, (unsigned long long)version);
    return WST_OK;
}

static void on_committed(void *arg, uint64_t version)
{
    note(arg, "committed %llu;", (unsigned long long)version);
}

static void on_unusable(void *arg, wst_status_t status, const char *reason)
{
    note(arg, "unusable %s %s;", wst_status_name(status), reason);
}

/* n random bytes into 'path' (mode 0600), and into buf when not NULL. */
static void write_random(const char *path, size_t n, unsigned char *buf)
{
    unsigned char *bytes = buf != NULL ? buf : malloc(n);
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0600);

    assert_non_null(bytes);
    assert_true(fd >= 0);
    for (size_t got = 0; got < n;) {
        ssize_t k = getrandom(bytes + got, n - got, 0);
        assert_true(k > 0);
        got += (size_t)k;
    }
    assert_int_equal(write(fd, bytes, n), (ssize_t)n);
    close(fd);
    if (buf == NULL)
        free(bytes);
}

static wst_receiver_t *receiver_new(struct seen *seen, const char *secret)
{
    struct wst_receiver_params p = {
        .field_mask = WST_RECEIVER_PARAM_LISTEN | WST_RECEIVER_PARAM_HOOKS |
                      WST_RECEIVER_PARAM_AUTH | WST_RECEIVER_PARAM_LOG,
        .listen_host = "127.0.0.1",
        .log_level = 2,
        .log_name = "so-receiver",
        .hooks = {.arg = seen,
                  .begin = on_begin,
                  .layer_finalized = on_layer,
                  .committed = on_committed,
                  .unusable = on_unusable},
        .auth_secret_file = secret,
    };
    wst_receiver_t *r = NULL;

    assert_int_equal(wst_receiver_create(&p, &r), WST_OK);
    return r;
}

static void add_tensor(wst_receiver_t *r, unsigned char *live)
{
    struct wst_region region = {.name = "down_proj",
                                .data = live,
                                .length = ONE_BYTES + GUARD,
                                .mem_type = WST_MEM_HOST};
    uint64_t shape[2] = {ONE_ROWS, ONE_COLS}, start[2] = {0, 0};
    struct wst_want_entry want = {.name = ONE_NAME,
                                  .dtype = ONE_DTYPE,
                                  .ndim = 2,
                                  .shape = shape,
                                  .box_start = start,
                                  .box_stop = shape,
                                  .region = 0,
                                  .offset = 0};
    uint32_t id = 99;

    assert_int_equal(wst_receiver_add_region(r, &region, &id), WST_OK);
    assert_int_equal(id, 0);
    want.region = id;
    assert_int_equal(wst_receiver_add_want(r, &want), WST_OK);
}

/* Waits for version 1 while the sender runs; its exit status to *rc_p. */
static wst_status_t wait_commit(wst_receiver_t *r, pid_t sender, int *rc_p)
{
    int ws = 0;

    *rc_p = -1;
    for (int i = 0; i < 300; i++) {
        wst_status_t st = wst_receiver_wait_committed(r, 1, 0.2);
        if (st != WST_ERR_TIMED_OUT) {
            assert_int_equal(waitpid(sender, &ws, 0), sender);
            *rc_p = WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws);
            return st;
        }
        if (waitpid(sender, &ws, WNOHANG) == sender) {
            *rc_p = WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws);
            return WST_ERR_PEER_FAILED; /* it gave up before the commit */
        }
    }
    kill(sender, SIGKILL);
    waitpid(sender, &ws, 0);
    return WST_ERR_TIMED_OUT;
}

static void check_bytes(const unsigned char *live, const unsigned char *ref)
{
    for (size_t i = 0; i < ONE_BYTES; i++) {
        if (live[i] != ref[i])
            fail_msg("byte %zu of %zu differs: received %02x, sent %02x", i,
                     (size_t)ONE_BYTES, live[i], ref[i]);
    }
    for (size_t i = 0; i < GUARD; i++) {
        if (live[ONE_BYTES + i] != POISON)
            fail_msg("guard byte %zu after the tensor was written", i);
    }
}

/* The program's receiver calls go to the shared library, not to a copy of
 * the receiver linked into it. */
static void test_receive_so_calls_the_shared_library(void **state)
{
    Dl_info info;

    (void)state;
    assert_true(dladdr((void *)(uintptr_t)&wst_receiver_create, &info) != 0);
    assert_non_null(info.dli_fname);
    assert_non_null(strstr(info.dli_fname, "libwstream_receiver.so"));
}

static void test_receive_so_one_tensor_bit_exact(void **state)
{
    char dir[] = "/tmp/wst-so-XXXXXX", tensor[64], secret[64], addr[32];
    unsigned char *ref = malloc(ONE_BYTES), *live = malloc(ONE_BYTES + GUARD);
    struct seen seen = {.lock = PTHREAD_MUTEX_INITIALIZER, .order = ""};
    struct wst_receiver_state st;
    wst_receiver_t *r;
    uint16_t port = 0;
    pid_t sender;
    int rc;

    (void)state;
    assert_non_null(ref);
    assert_non_null(live);
    assert_non_null(mkdtemp(dir));
    snprintf(tensor, sizeof(tensor), "%s/tensor", dir);
    snprintf(secret, sizeof(secret), "%s/secret", dir);
    write_random(tensor, ONE_BYTES, ref);
    write_random(secret, 32, NULL);
    memset(live, POISON, ONE_BYTES + GUARD);

    r = receiver_new(&seen, secret);
    add_tensor(r, live);
    assert_int_equal(wst_receiver_start(r, &port), WST_OK);
    assert_true(port != 0);
    snprintf(addr, sizeof(addr), "127.0.0.1:%u", port);
    char *argv[] = {(char *)sender_program, addr, tensor, secret, NULL};
    assert_int_equal(
        posix_spawn(&sender, sender_program, NULL, NULL, argv, environ), 0);

    assert_int_equal(wait_commit(r, sender, &rc), WST_OK);
    assert_int_equal(rc, 0);
    check_bytes(live, ref);
    /* Layer 0, and the layer of global tensors after the last (empty
     * here), in either order. */
    if (strcmp(seen.order, "begin 1;layer 1 1;layer 0 1;committed 1;") != 0)
        assert_string_equal(seen.order,
                            "begin 1;layer 0 1;layer 1 1;committed 1;");
    wst_receiver_get_state(r, &st);
    assert_int_equal(st.committed_version, 1);
    assert_int_equal(st.usable, 1);
    assert_int_equal(st.refit_in_progress, 0);
    assert_int_equal(st.refits_ok, 1);
    assert_int_equal(st.refits_failed, 0);
    assert_int_equal(st.last_refit_bytes, ONE_BYTES);
    assert_string_equal(st.reason, "");

    wst_receiver_destroy(r);
    unlink(tensor);
    unlink(secret);
    rmdir(dir);
    free(live);
    free(ref);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_receive_so_calls_the_shared_library),
        cmocka_unit_test(test_receive_so_one_tensor_bit_exact),
    };

    if (argc != 2) {
        fprintf(stderr, "usage: wst-so-receive SENDER_PROGRAM\n");
        return 2;
    }
    sender_program = argv[1];
    return cmocka_run_group_tests(tests, NULL, NULL);
}
