/* test_hostile_peer.c - a real wstream-agent against peers that do not hold
 * its secret, on its --listen port:
 *  (a) 64 zero bytes, then 200 connections of random garbage (some held
 *      open, past the cap of unauthenticated connections, one silent past
 *      the handshake deadline): the agent stays up, logs each refused peer
 *      by address and why, its live memory is untouched, and a refit from
 *      a real sender commits afterwards. On main before the agent had a
 *      port of its own, the 64 zero bytes aborted it inside UCX;
 *  (b) a sender with another secret, a sender without one, and a raw peer
 *      that sends a correct hello and a forged proof: each refused (the
 *      sender says why, the agent's log names the peer), nothing written;
 *  (c) an agent without a secret and without --insecure does not start,
 *      and says why; nor does one whose secret file others may read;
 *  (d) UCX's own listening sockets: every TCP socket the agent listens on
 *      is on 127.0.0.1, the address it was told (ss -ltnp).
 * --insecure's log, metrics and /readyz are test_metrics.c's.
 *
 * usage: test_hostile_peer PATH_TO_WSTREAM_AGENT
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "agent_fixture.h"
#include "auth.h"
#include "clock.h"
#include "handshake.h"

static const char *agent_bin;

static void sleep_s(double s)
{
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};

    nanosleep(&ts, NULL);
}

/* A blocking TCP connection to the agent's port, or -1. */
static int raw_connect(uint16_t port)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    if (fd < 0)
        return -1;
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static void send_all(int fd, const void *buf, size_t len)
{
    /* The agent may drop us mid-way: that is the point. */
    (void)send(fd, buf, len, MSG_NOSIGNAL);
}

/* A refit of version 'version' from a sender holding the agent's secret
 * commits. */
static void real_refit_commits(struct it_agent *a, uint64_t version)
{
    assert_int_equal(it_refit(a, version), 0);
}

/* (a) */
static void test_hostile_zeros_and_garbage(void **state)
{
    struct it_agent a;
    uint8_t zeros[64] = {0}, junk[512];
    int held[24], n_held = 0, quiet[20], n_quiet = 0;
    uint64_t x = 0x9e3779b97f4a7c15ull;
    (void)state;

    assert_int_equal(it_agent_start(&a, agent_bin), 0);
    double t0 = wst_now_s();
    int silent = raw_connect(a.port); /* says nothing, held open */
    assert_true(silent >= 0);

    int fd = raw_connect(a.port);
    assert_true(fd >= 0);
    send_all(fd, zeros, sizeof(zeros));
    sleep_s(0.3);
    close(fd);
    /* Waits are for the log line, not a fixed time: under load the
     * agent writes it later. */
    assert_true(it_agent_wait_log(&a, "bad handshake magic", 10.0));
    assert_true(it_agent_alive(&a));

    for (int i = 0; i < 200; i++) {
        fd = raw_connect(a.port);
        assert_true(fd >= 0);
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        size_t len = 1 + (size_t)(x >> 40) % sizeof(junk);
        for (size_t k = 0; k < len; k++) {
            x = x * 6364136223846793005ull + 1;
            junk[k] = (uint8_t)(x >> 56);
        }
        if (i % 4 == 0) /* a right magic, then garbage */
            memcpy(junk, WST_HS_MAGIC, 4);
        if (i % 10 == 9) {
            /* Held open saying nothing: with the first silent peer these
             * are 21, more than the 16 unauthenticated slots, so later
             * ones wait in the listen backlog however fast the agent
             * disposes of the garbage (junk held open may be refused at
             * once and hold no slot). */
            quiet[n_quiet++] = fd;
            continue;
        }
        send_all(fd, junk, len);
        if (i % 3 == 0 && n_held < 24)
            held[n_held++] = fd;
        else
            close(fd);
    }
    assert_true(it_agent_wait_log(&a,
                                  "peers authenticating, later "
                                  "ones wait in the backlog",
                                  10.0));
    assert_true(it_agent_alive(&a));
    for (int i = 0; i < n_held; i++)
        close(held[i]);
    for (int i = 0; i < n_quiet; i++)
        close(quiet[i]);
    assert_true(it_agent_wait_log(&a, "refused peer 127.0.0.1:", 10.0));
    assert_true(it_agent_shm_untouched(&a));

    real_refit_commits(&a, 1);
    /* The silent peer's 5 s deadline, and time for the agent to act. */
    double left = 5.0 - (wst_now_s() - t0);
    assert_true(it_agent_wait_log(&a, "no handshake within 5 s",
                                  (left > 0 ? left : 0) + 10.0));
    assert_true(wst_now_s() - t0 >= 4.9); /* not before its deadline */
    close(silent);
    assert_true(it_agent_alive(&a));
    it_agent_stop(&a);
}

/* A sender of a's model whose secret is the file 'secret' ("" none):
 * its push fails; the error goes to err. */
static void foreign_sender_refused(const struct it_agent *a, const char *secret,
                                   char *err, size_t errlen)
{
    struct it_agent fake = *a; /* a's address and model, another secret */
    struct it_sender s = {0};

    snprintf(fake.secret_path, sizeof(fake.secret_path), "%s", secret);
    assert_int_equal(it_sender_load(&s, &fake), 0);
    assert_int_equal(it_sender_setup(&s, &fake, SIZE_MAX, 1), WST_OK);
    /* The push itself may already see the failed connection. */
    wst_status_t st = wst_sender_push(s.sender, 1);
    if (st == WST_OK)
        st = wst_sender_wait(s.sender, 20.0);
    assert_int_not_equal(st, WST_OK);
    snprintf(err, errlen, "%s", wst_sender_last_error(s.sender));
    fprintf(stderr, "refused sender says: %s\n", err);
    it_sender_destroy(&s);
}

/* A raw peer that speaks the handshake right but forges its proof. */
static void forged_proof(const struct it_agent *a)
{
    uint8_t nonce[WST_AUTH_NONCE_LEN], out[WST_HS_OUT_MAX];
    uint8_t s1[WST_HS_S1_LEN], c2[WST_HS_C2_LEN];
    struct wst_hs hs;
    size_t used, out_len, got = 0;
    int fd = raw_connect(a->port);

    assert_true(fd >= 0);
    memset(nonce, 7, sizeof(nonce));
    memset(c2, 0x5a, sizeof(c2));
    struct wst_auth_secret guess = {.bytes = nonce, .len = sizeof(nonce)};
    wst_hs_init(&hs, WST_HS_CLIENT, &guess, nonce);
    assert_int_equal(wst_hs_step(&hs, NULL, 0, &used, out, &out_len),
                     WST_INPROGRESS);
    send_all(fd, out, out_len);
    while (got < sizeof(s1)) {
        ssize_t n = recv(fd, s1 + got, sizeof(s1) - got, 0);
        assert_true(n > 0);
        got += (size_t)n;
    }
    send_all(fd, c2, sizeof(c2));
    /* The agent hangs up. */
    uint8_t b;
    assert_true(recv(fd, &b, 1, 0) <= 0);
    close(fd);
}

/* (b) */
static void test_hostile_wrong_secret(void **state)
{
    struct it_agent a;
    char wrong[PATH_MAX + 8], err[2048];
    (void)state;

    assert_int_equal(it_agent_start(&a, agent_bin), 0);
    snprintf(wrong, sizeof(wrong), "%s/wrong", a.dir);
    assert_int_equal(wst_auth_secret_create(wrong, err, sizeof(err)), WST_OK);

    foreign_sender_refused(&a, wrong, err, sizeof(err));
    assert_non_null(strstr(err, "proof does not match our auth secret"));
    assert_true(it_agent_log_has(&a, "refused peer 127.0.0.1:"));
    assert_true(it_agent_log_has(&a, "another auth secret"));

    foreign_sender_refused(&a, "", err, sizeof(err));
    assert_non_null(strstr(err, "receiver requires an auth secret"));
    assert_true(it_agent_log_has(&a, "client has no auth secret"));

    forged_proof(&a);
    sleep_s(0.3);
    assert_true(it_agent_log_has(&a, "client's proof does not match"));

    assert_true(it_agent_alive(&a));
    assert_true(it_agent_shm_untouched(&a));
    uint64_t committed = 99;
    int usable = 0;
    assert_int_equal(it_agent_status(&a, &committed, &usable), 0);
    assert_int_equal(committed, 0);
    assert_true(usable);
    real_refit_commits(&a, 1);
    it_agent_stop(&a);
}

/* Runs the agent with 'args' (NULL-terminated, after the binary) and
 * WST_AUTH_SECRET_FILE unset; its exit code, its output in out. */
static int run_agent(const char *const *args, char *out, size_t len)
{
    char path[] = "/tmp/wst-hostile-XXXXXX";
    int fd = mkstemp(path), wstatus = 0;
    const char *argv[24];
    size_t n = 0;

    assert_true(fd >= 0);
    argv[n++] = agent_bin;
    while (*args != NULL && n < 23)
        argv[n++] = *args++;
    argv[n] = NULL;
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        dup2(fd, STDOUT_FILENO);
        dup2(fd, STDERR_FILENO);
        unsetenv("WST_AUTH_SECRET_FILE");
        execv(agent_bin, (char *const *)argv);
        _exit(127);
    }
    assert_int_equal(waitpid(pid, &wstatus, 0), pid);
    ssize_t got = pread(fd, out, len - 1, 0);
    out[got > 0 ? got : 0] = '\0';
    close(fd);
    unlink(path);
    fprintf(stderr, "agent said:\n%s", out);
    return WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : -1;
}

/* (c) */
static void test_hostile_agent_needs_secret(void **state)
{
    struct it_agent a;
    char out[4096], loose[PATH_MAX + 8], err[512];
    (void)state;

    /* A layout that maps: the fixture's. */
    assert_int_equal(it_agent_start(&a, agent_bin), 0);
    const char *none[] = {"--layout", a.layout_path, "--listen", "127.0.0.1:0",
                          NULL};
    assert_int_equal(run_agent(none, out, sizeof(out)), -WST_ERR_CONFIG);
    assert_non_null(strstr(out, "no auth secret"));
    assert_non_null(strstr(out, "--insecure"));

    snprintf(loose, sizeof(loose), "%s/loose", a.dir);
    assert_int_equal(wst_auth_secret_create(loose, err, sizeof(err)), WST_OK);
    assert_int_equal(chmod(loose, 0644), 0);
    const char *readable[] = {"--layout",    a.layout_path,        "--listen",
                              "127.0.0.1:0", "--auth-secret-file", loose,
                              NULL};
    assert_int_equal(run_agent(readable, out, sizeof(out)), -WST_ERR_CONFIG);
    assert_non_null(strstr(out, loose));
    assert_non_null(strstr(out, "mode 0644"));
    assert_true(it_agent_alive(&a));
    it_agent_stop(&a);
}

/* (d) */
static void test_hostile_ucx_confined(void **state)
{
    struct it_agent a;
    char cmd[128], line[1024], pid_tag[32], self_tag[32];
    int n = 0;
    (void)state;

    assert_int_equal(it_agent_start(&a, agent_bin), 0);
    real_refit_commits(&a, 1); /* every transport in use */
    snprintf(pid_tag, sizeof(pid_tag), "pid=%d,", (int)a.pid);
    /* Sockets of this process the agent inherited through fork (UCX's
     * own are not close-on-exec) are ours, not the agent's. */
    snprintf(self_tag, sizeof(self_tag), "pid=%d,", (int)getpid());
    snprintf(cmd, sizeof(cmd), "ss -ltnpH 2>&1");
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    while (fgets(line, sizeof(line), p) != NULL) {
        if (strstr(line, pid_tag) == NULL || strstr(line, self_tag) != NULL)
            continue;
        char state_s[32], local[128];
        unsigned rq, sq;
        assert_int_equal(
            sscanf(line, "%31s %u %u %127s", state_s, &rq, &sq, local), 4);
        fprintf(stderr, "agent listens on %s\n", local);
        if (strncmp(local, "127.0.0.1:", 10) != 0)
            fail_msg("agent listens on %s, not on 127.0.0.1: %s", local, line);
        n++;
    }
    pclose(p);
    /* Our port, and UCX's tcp transport. */
    assert_true(n >= 2);
    it_agent_stop(&a);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hostile_zeros_and_garbage),
        cmocka_unit_test(test_hostile_wrong_secret),
        cmocka_unit_test(test_hostile_agent_needs_secret),
        cmocka_unit_test(test_hostile_ucx_confined),
    };

    if (argc < 2) {
        fprintf(stderr, "usage: %s PATH_TO_WSTREAM_AGENT\n", argv[0]);
        return 2;
    }
    agent_bin = argv[1];
    return cmocka_run_group_tests(tests, NULL, NULL);
}
