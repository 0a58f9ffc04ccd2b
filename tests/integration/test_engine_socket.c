/* test_engine_socket.c - a real wstream-agent with --engine-socket and a
 * real wstream-engine-standin: a refit runs BEGIN/READY, LAYER/FINALIZED
 * and COMMITTED over the socket with nothing written before READY; with no
 * engine connected, or an engine that refuses, the push fails, the shm is
 * untouched and the agent stays usable; a second engine is told busy; and
 * the stand-in's own check catches a write before READY; and an unusable
 * agent whose next refit is refused never tells its engine to resume; a
 * stand-in whose agent hangs up mid-refit says unusable and exits 0; a
 * labeled version's BEGIN and COMMITTED lines carry its label, an
 * unlabeled one's none.
 *
 * usage: test_engine_socket PATH_TO_WSTREAM_AGENT PATH_TO_STANDIN
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "agent_fixture.h"
#include "manifest.h"

static const char *agent_bin;
static const char *standin_bin;

/* One agent with an engine socket and at most one stand-in engine. */
struct eng_case {
    struct it_agent a;
    pid_t standin;
    int standin_status; /* wait status once reaped, -1 before */
    char dir[64];
    char state_path[PATH_MAX];
    char log_path[PATH_MAX];
};

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int setup_engine(void **state)
{
    struct eng_case *c = calloc(1, sizeof(*c));

    if (c == NULL)
        return -1;
    c->standin_status = -1;
    snprintf(c->dir, sizeof(c->dir), "/tmp/wstream-eng-XXXXXX");
    if (mkdtemp(c->dir) == NULL) {
        fprintf(stderr, "setup: mkdtemp: %s\n", strerror(errno));
        free(c);
        return -1;
    }
    snprintf(c->state_path, sizeof(c->state_path), "%s/standin.state", c->dir);
    snprintf(c->log_path, sizeof(c->log_path), "%s/standin.log", c->dir);
    if (it_agent_start_engine(&c->a, agent_bin) != 0) {
        fprintf(stderr, "setup: could not start wstream-agent '%s'\n",
                agent_bin);
        rmdir(c->dir);
        free(c);
        return -1;
    }
    *state = c;
    return 0;
}

/* As setup_engine, with every lane on tcp (the sender and agent both
 * inherit UCX_TLS). */
static int setup_engine_tcp(void **state)
{
    setenv("UCX_TLS", "tcp", 1);
    return setup_engine(state);
}

static int teardown_engine(void **state);

static int teardown_engine_tcp(void **state)
{
    int rc = teardown_engine(state);

    unsetenv("UCX_TLS");
    return rc;
}

static void print_standin_log(const struct eng_case *c)
{
    char line[1024];
    FILE *f = fopen(c->log_path, "r");

    if (f == NULL)
        return;
    fprintf(stderr, "---- stand-in log %s ----\n", c->log_path);
    while (fgets(line, sizeof(line), f) != NULL)
        fputs(line, stderr);
    fprintf(stderr, "---- end of stand-in log ----\n");
    fclose(f);
}

/* Stops the agent (the stand-in then sees EOF) and reaps the stand-in,
 * killing it after 10 s. Idempotent. */
static void stop_all(struct eng_case *c)
{
    double deadline = now_s() + 10.0;
    int ws = 0;

    it_agent_stop(&c->a);
    if (c->standin <= 0)
        return;
    while (waitpid(c->standin, &ws, WNOHANG) == 0) {
        if (now_s() > deadline) {
            fprintf(stderr, "stand-in %d did not exit on EOF; killing it\n",
                    (int)c->standin);
            kill(c->standin, SIGKILL);
            waitpid(c->standin, &ws, 0);
            break;
        }
        usleep(10000);
    }
    c->standin = 0;
    c->standin_status = ws;
    print_standin_log(c);
}

static int teardown_engine(void **state)
{
    struct eng_case *c = *state;
    char cmd[128];

    stop_all(c);
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", c->dir);
    if (system(cmd) != 0)
        fprintf(stderr, "teardown: could not remove %s\n", c->dir);
    free(c);
    return 0;
}

/* Starts the stand-in 'late_ms' after now, and returns at once when late. */
static void start_standin_at(struct eng_case *c, const char *delay_ms,
                             int refuse, unsigned late_ms)
{
    char bytes[32];

    snprintf(bytes, sizeof(bytes), "%llu",
             (unsigned long long)c->a.layout.shm_bytes);
    c->standin = fork();
    assert_true(c->standin >= 0);
    if (c->standin == 0) {
        usleep(late_ms * 1000u);
        int fd = open(c->log_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (fd >= 0) {
            dup2(fd, STDOUT_FILENO);
            dup2(fd, STDERR_FILENO);
            close(fd);
        }
        execl(standin_bin, standin_bin, "--socket", c->a.engine_socket, "--shm",
              c->a.shm_name, "--shm-bytes", bytes, "--ready-delay-ms", delay_ms,
              "--state-file", c->state_path,
              refuse ? "--refuse=yes" : "--refuse=no", (char *)NULL);
        fprintf(stderr, "exec %s: %s\n", standin_bin, strerror(errno));
        _exit(127);
    }
    if (late_ms > 0)
        return;
    /* Connected once the agent says so: a refit may then begin. */
    for (double end = now_s() + 10.0; now_s() < end; usleep(10000)) {
        if (it_agent_log_has(&c->a, "engine connected on"))
            return;
        if (waitpid(c->standin, &c->standin_status, WNOHANG) == c->standin) {
            c->standin = 0;
            print_standin_log(c);
            fail_msg("the stand-in exited early (wait status 0x%x)",
                     c->standin_status);
        }
    }
    fail_msg("the agent never logged the stand-in's connection");
}

static int file_has(const char *path, const char *needle)
{
    char text[8192];
    size_t n;
    FILE *f = fopen(path, "r");

    if (f == NULL)
        return 0;
    n = fread(text, 1, sizeof(text) - 1, f);
    fclose(f);
    text[n] = '\0';
    return strstr(text, needle) != NULL;
}

/* Nonzero when 'needle' occurs in the file after the first 'marker'. */
static int file_has_after(const char *path, const char *marker,
                          const char *needle)
{
    char text[8192];
    size_t n;
    FILE *f = fopen(path, "r");

    if (f == NULL)
        return 0;
    n = fread(text, 1, sizeof(text) - 1, f);
    fclose(f);
    text[n] = '\0';
    const char *at = strstr(text, marker);
    return at != NULL && strstr(at + strlen(marker), needle) != NULL;
}

/* Polls the stand-in's state file for 'needle', up to 5 s. */
static void expect_state(const struct eng_case *c, const char *needle)
{
    for (double end = now_s() + 5.0; now_s() < end; usleep(10000))
        if (file_has(c->state_path, needle))
            return;
    fail_msg("the stand-in's state file %s never said '%s'", c->state_path,
             needle);
}

static void start_standin(struct eng_case *c, const char *delay_ms, int refuse)
{
    start_standin_at(c, delay_ms, refuse, 0);
}

/* Pushes version 1 from a correct sender; returns its status. */
static wst_status_t push_v1(struct it_agent *a, char *err, size_t errlen)
{
    struct it_sender s;
    wst_status_t st;

    assert_int_equal(it_sender_load(&s, a), 0);
    assert_int_equal(it_sender_setup(&s, a, SIZE_MAX, 1), WST_OK);
    st = wst_sender_push(s.sender, 1);
    if (st == WST_OK)
        st = wst_sender_wait(s.sender, 30.0);
    snprintf(err, errlen, "%s", wst_sender_last_error(s.sender));
    fprintf(stderr, "push: %s: %s\n", wst_status_string(st), err);
    it_sender_destroy(&s);
    return st;
}

static void assert_agent_untouched(struct it_agent *a)
{
    uint64_t committed = 99;
    int usable = 0;

    assert_true(it_agent_alive(a));
    assert_int_equal(it_agent_status(a, &committed, &usable), 0);
    assert_true(usable);
    assert_int_equal(committed, 0);
    assert_true(it_agent_shm_untouched(a));
}

/* Layers of the agent's plan: model layers, and one more for the global
 * tensors (manifest.h, wst_tensor_layer). */
static uint32_t plan_layers(const struct it_agent *a)
{
    uint32_t n = 0, global = 0;

    for (size_t i = 0; i < a->layout.n_wants; i++) {
        uint32_t l = wst_tensor_layer(a->layout.wants[i].tensor.name);
        if (l == UINT32_MAX)
            global = 1;
        else if (l + 1 > n)
            n = l + 1;
    }
    return n + global;
}

/* From the agent's status file: last_refit_seconds, and the latest
 * "finalized" of its layer timeline (seconds after the begin's
 * acknowledgement); 0 when both were found. */
static int refit_times(const struct it_agent *a, double *refit_s,
                       double *last_final_s)
{
    static char text[65536];

    if (it_agent_status_text(a, text, sizeof(text)) != 0)
        return -1;
    const char *p = strstr(text, "\"last_refit_seconds\": ");
    if (p == NULL || sscanf(p, "\"last_refit_seconds\": %lf", refit_s) != 1)
        return -1;
    *last_final_s = -1;
    for (p = strstr(text, "\"finalized\": "); p != NULL;
         p = strstr(p + 1, "\"finalized\": ")) {
        double t;
        if (sscanf(p, "\"finalized\": %lf", &t) == 1 && t > *last_final_s)
            *last_final_s = t;
    }
    return *last_final_s >= 0 ? 0 : -1;
}

static void test_engine_socket_refit(void **state)
{
    struct eng_case *c = *state;
    char err[512], needle[128];
    double refit_s = 0, last_final_s = 0;
    wst_status_t st;

    start_standin(c, "300", 0);
    st = push_v1(&c->a, err, sizeof(err));
    if (st != WST_OK)
        fail_msg("push: %s: %s", wst_status_string(st), err);
    if (wst_model_verify(&c->a.layout, c->a.shm, IT_SEED, 1, NULL, err,
                         sizeof(err)) != WST_OK)
        fail_msg("version 1: %s", err);
    assert_int_equal(it_agent_wait_status(&c->a, 1, 5.0), 0);
    /* The refit's time runs from the begin's acknowledgement, as its
     * layers' times do: the stand-in's 300 ms before READY are not in it,
     * so commit comes soon after the last layer is final. */
    assert_int_equal(refit_times(&c->a, &refit_s, &last_final_s), 0);
    if (refit_s < last_final_s || refit_s - last_final_s > 0.25)
        fail_msg("last_refit_seconds %.3f, last layer final at %.3f", refit_s,
                 last_final_s);
    snprintf(needle, sizeof(needle),
             "\"state\": \"serving\", \"committed_version\": 1, "
             "\"begins\": 1, \"layers\": %u,",
             plan_layers(&c->a));
    expect_state(c, needle);
    assert_true(file_has(c->log_path, "got BEGIN 1\n"));
    for (uint32_t l = 0; l < plan_layers(&c->a); l++) {
        snprintf(needle, sizeof(needle), "got LAYER %u 1\n", l);
        if (!file_has(c->log_path, needle))
            fail_msg("the stand-in never got '%s'", needle);
    }
    assert_true(file_has(c->log_path, "got COMMITTED 1\n"));
    stop_all(c);
    assert_false(file_has(c->log_path, "VIOLATION"));
    assert_true(WIFEXITED(c->standin_status));
    assert_int_equal(WEXITSTATUS(c->standin_status), 0);
}

/* Version 1 labeled, version 2 not: the stand-in gets "BEGIN 1 <label>"
 * and "COMMITTED 1 <label>", then the plain lines, and says so in its
 * state file. */
static void test_engine_socket_labeled_refit(void **state)
{
    struct eng_case *c = *state;
    const char *label = "run-4/step-1@9f3c";
    struct it_sender s;
    char needle[160];

    start_standin(c, "0", 0);
    assert_int_equal(it_sender_load(&s, &c->a), 0);
    assert_int_equal(it_sender_setup(&s, &c->a, SIZE_MAX, 1), WST_OK);
    struct wst_push_params p = {.field_mask = WST_PUSH_LABEL, .label = label};
    if (wst_sender_push_with(s.sender, 1, &p) != WST_OK ||
        wst_sender_wait(s.sender, 30.0) != WST_OK)
        fail_msg("labeled push: %s", wst_sender_last_error(s.sender));
    snprintf(needle, sizeof(needle),
             "\"label\": \"%s\", \"committed_label\": "
             "\"%s\"",
             label, label);
    expect_state(c, needle);
    snprintf(needle, sizeof(needle), "got BEGIN 1 %s\n", label);
    assert_true(file_has(c->log_path, needle));
    snprintf(needle, sizeof(needle), "got COMMITTED 1 %s\n", label);
    assert_true(file_has(c->log_path, needle));

    it_sender_fill(&s, 2);
    if (wst_sender_push(s.sender, 2) != WST_OK ||
        wst_sender_wait(s.sender, 30.0) != WST_OK)
        fail_msg("push 2: %s", wst_sender_last_error(s.sender));
    it_sender_destroy(&s);
    expect_state(c, "\"committed_version\": 2, ");
    expect_state(c, "\"label\": \"\", \"committed_label\": \"\"");
    assert_true(file_has(c->log_path, "got BEGIN 2\n"));
    assert_true(file_has(c->log_path, "got COMMITTED 2\n"));
    stop_all(c);
    assert_true(WIFEXITED(c->standin_status));
    assert_int_equal(WEXITSTATUS(c->standin_status), 0);
}

static void test_engine_socket_no_engine(void **state)
{
    struct eng_case *c = *state;
    char err[512];
    wst_status_t st = push_v1(&c->a, err, sizeof(err));

    assert_int_equal(st, WST_ERR_UNREACHABLE);
    if (strstr(err, "no engine connected on") == NULL)
        fail_msg("the sender's error '%s' does not say no engine is "
                 "connected",
                 err);
    assert_true(it_agent_log_has(&c->a, "no engine connected on"));
    assert_agent_untouched(&c->a);
}

/* The engine connects 300 ms after the refit was asked for (an engine
 * and its agent start together; the trainer pushes at once): BEGIN waits
 * for it (WST_ENGINE_CONNECT_WAIT_S) and the refit commits. It was refused
 * at once before ("no engine connected"). */
static void test_engine_socket_engine_late(void **state)
{
    struct eng_case *c = *state;
    char err[512];

    start_standin_at(c, "0", 0, 300); /* the agent waits 5 s / 4 */
    wst_status_t st = push_v1(&c->a, err, sizeof(err));
    if (st != WST_OK)
        fail_msg("push with the engine 300 ms late: %s: %s",
                 wst_status_string(st), err);
    assert_true(it_agent_log_has(&c->a, "no engine connected on"));
    assert_true(it_agent_log_has(&c->a, "yet; waiting"));
    expect_state(c, "\"committed_version\": 1, ");
    assert_true(file_has(c->log_path, "got COMMITTED 1\n"));
    stop_all(c);
    assert_true(WIFEXITED(c->standin_status));
    assert_int_equal(WEXITSTATUS(c->standin_status), 0);
}

static void test_engine_socket_refused(void **state)
{
    struct eng_case *c = *state;
    char err[512];
    wst_status_t st;

    start_standin(c, "0", 1);
    st = push_v1(&c->a, err, sizeof(err));
    assert_int_equal(st, WST_ERR_STATE);
    if (strstr(err, "refused by --refuse") == NULL)
        fail_msg("the sender's error '%s' does not carry the engine's "
                 "reason",
                 err);
    assert_true(it_agent_log_has(&c->a, "refused by --refuse"));
    expect_state(c, "\"state\": \"serving\", \"committed_version\": 0, "
                    "\"begins\": 1, \"layers\": 0, \"refused\": 1, "
                    "\"reason\": \"\", \"label\": \"\", \"committed_label\": "
                    "\"\"}");
    assert_agent_untouched(&c->a);
}

/* A second engine gets "ERROR busy" and is closed; the first one stays. */
static void test_engine_socket_busy(void **state)
{
    struct eng_case *c = *state;
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    char buf[64] = "";
    size_t got = 0;
    ssize_t n;
    int fd;

    start_standin(c, "0", 0);
    assert_true(strlen(c->a.engine_socket) < sizeof(sa.sun_path));
    memcpy(sa.sun_path, c->a.engine_socket, strlen(c->a.engine_socket) + 1);
    fd = socket(AF_UNIX, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    while (got < sizeof(buf) - 1 &&
           (n = read(fd, buf + got, sizeof(buf) - 1 - got)) > 0)
        got += (size_t)n;
    close(fd);
    buf[got] = '\0';
    assert_string_equal(buf, "ERROR busy\n");
    assert_true(it_agent_log_has(&c->a, "refused a second engine"));
    stop_all(c);
    assert_true(WIFEXITED(c->standin_status));
    assert_int_equal(WEXITSTATUS(c->standin_status), 0);
}

/* A restarted engine: the first stand-in is SIGKILLed while idle, and an
 * engine that connects next replaces its dead connection (before, it was
 * told "ERROR busy" until the agent next wrote to the dead one); a real
 * stand-in connecting after that takes a refit. */
static void test_engine_socket_restarted_engine(void **state)
{
    struct eng_case *c = *state;
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    struct pollfd pfd;
    char buf[64] = "", err[512];
    ssize_t n = 0;
    int fd, ws;

    start_standin(c, "0", 0);
    kill(c->standin, SIGKILL);
    assert_int_equal(waitpid(c->standin, &ws, 0), c->standin);
    c->standin = 0;
    memcpy(sa.sun_path, c->a.engine_socket, strlen(c->a.engine_socket) + 1);
    fd = socket(AF_UNIX, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    assert_true(it_agent_wait_log_lines(&c->a, "engine connected on", 2, 5.0));
    assert_true(it_agent_log_has(&c->a, "hung up; the engine connecting now "
                                        "replaces it"));
    /* Installed, not told busy: nothing to read, and still open. */
    pfd = (struct pollfd){.fd = fd, .events = POLLIN};
    if (poll(&pfd, 1, 300) > 0)
        n = read(fd, buf, sizeof(buf) - 1);
    if (n > 0)
        fail_msg("the new engine was sent '%.*s'", (int)n, buf);
    assert_int_equal(n, 0);
    assert_false(it_agent_log_has(&c->a, "refused a second engine"));
    close(fd);
    /* and so is a real engine after it, which takes a refit */
    start_standin(c, "0", 0);
    assert_true(it_agent_wait_log_lines(&c->a, "engine connected on", 3, 5.0));
    wst_status_t st = push_v1(&c->a, err, sizeof(err));
    if (st != WST_OK)
        fail_msg("push: %s: %s", wst_status_string(st), err);
    assert_true(file_has(c->log_path, "got COMMITTED 1\n"));
    stop_all(c);
}

/* This test as the agent of a stand-in: listens on 'sock', starts the
 * stand-in (its output into 'log') with "--socket sock" and 'args' (NULL
 * terminated), accepts it. *lfd_p gets the listening socket, *pid_p the
 * stand-in; returns the connection. */
static int fake_agent_start(const char *sock, const char *log,
                            const char *const *args, int *lfd_p, pid_t *pid_p)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    const char *argv[24];
    int n = 0;

    argv[n++] = standin_bin;
    argv[n++] = "--socket";
    argv[n++] = sock;
    for (int i = 0; args[i] != NULL && n < 23; i++)
        argv[n++] = args[i];
    argv[n] = NULL;
    *lfd_p = socket(AF_UNIX, SOCK_STREAM, 0);
    assert_true(*lfd_p >= 0);
    memcpy(sa.sun_path, sock, strlen(sock) + 1);
    assert_int_equal(bind(*lfd_p, (struct sockaddr *)&sa, sizeof(sa)), 0);
    assert_int_equal(listen(*lfd_p, 1), 0);
    *pid_p = fork();
    assert_true(*pid_p >= 0);
    if (*pid_p == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (fd >= 0) {
            dup2(fd, STDOUT_FILENO);
            dup2(fd, STDERR_FILENO);
            close(fd);
        }
        execv(standin_bin, (char *const *)argv);
        _exit(127);
    }
    int fd = accept(*lfd_p, NULL, NULL);
    assert_true(fd >= 0);
    return fd;
}

/* The stand-in's own check must be able to fail: this test plays the
 * agent, sends BEGIN, writes one byte of the live shm while the stand-in
 * waits --ready-delay-ms, and the stand-in must exit 3 saying VIOLATION
 * instead of answering READY. The byte is the first, one in the middle or
 * the last (a short last chunk): the host hash is cut into ranges over
 * threads, and a write in any of them must show. A run without a write
 * must answer READY. */
static int standin_against_write(const char *dir, uint64_t write_at)
{
    const uint64_t bytes = (5u << 20) + 12345; /* not a chunk multiple */
    char shm[64], sock[PATH_MAX], log[PATH_MAX], len[32], reply[64] = "";
    int status = -1;

    snprintf(shm, sizeof(shm), "/wst-violate-%d", (int)getpid());
    snprintf(sock, sizeof(sock), "%s/engine.sock", dir);
    snprintf(log, sizeof(log), "%s/violate.log", dir);
    snprintf(len, sizeof(len), "%llu", (unsigned long long)bytes);
    int mfd = shm_open(shm, O_CREAT | O_EXCL | O_RDWR, 0600);
    assert_true(mfd >= 0);
    assert_int_equal(ftruncate(mfd, (off_t)bytes), 0);
    unsigned char *live =
        mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0);
    assert_true(live != MAP_FAILED);
    const char *const args[] = {
        "--shm", shm, "--shm-bytes", len, "--ready-delay-ms", "400", NULL};
    int lfd;
    pid_t pid;
    int fd = fake_agent_start(sock, log, args, &lfd, &pid);
    assert_int_equal(write(fd, "BEGIN 1\n", 8), 8);
    usleep(150000); /* inside the delay, after the first hash */
    if (write_at != UINT64_MAX)
        live[write_at] ^= 0x5a;
    ssize_t n = read(fd, reply, sizeof(reply) - 1); /* READY, or EOF */
    reply[n > 0 ? n : 0] = '\0';
    close(fd);
    waitpid(pid, &status, 0);
    close(lfd);
    unlink(sock);
    munmap(live, bytes);
    close(mfd);
    shm_unlink(shm);
    if (write_at == UINT64_MAX) {
        assert_string_equal(reply, "READY 1\n");
        return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    }
    assert_string_equal(reply, "");
    assert_true(file_has(log, "VIOLATION: live memory written before READY"));
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static void test_standin_catches_early_write(void **state)
{
    struct eng_case *c = *state;
    const uint64_t bytes = (5u << 20) + 12345;

    stop_all(c); /* this test is the agent */
    assert_int_equal(standin_against_write(c->dir, 0), 3);
    assert_int_equal(standin_against_write(c->dir, bytes / 2 + 7), 3);
    assert_int_equal(standin_against_write(c->dir, bytes - 1), 3);
    /* No write: READY, then EOF ends it cleanly. */
    assert_int_equal(standin_against_write(c->dir, UINT64_MAX), 0);
}

/* The stand-in as a fake agent sees it hang up mid-refit, as a killed
 * agent does: after BEGIN 1, the fake agent closes the connection either
 * before READY comes (the stand-in's READY then meets a broken pipe) or
 * with READY unread in its queue (the stand-in's next read then gets a
 * connection reset). Either way the stand-in lost its agent while paused:
 * it must say "unusable" and exit 0, as on a plain EOF -- not 2, which
 * means a protocol error. Returns its exit code. */
static int standin_hangup(const char *dir, int ready_unread)
{
    const uint64_t bytes = 1u << 20;
    char shm[64], sock[PATH_MAX], log[PATH_MAX], state[PATH_MAX], len[32];
    int status = -1;

    snprintf(shm, sizeof(shm), "/wst-hangup-%d", (int)getpid());
    snprintf(sock, sizeof(sock), "%s/hangup.sock", dir);
    snprintf(log, sizeof(log), "%s/hangup.log", dir);
    snprintf(state, sizeof(state), "%s/hangup.state", dir);
    snprintf(len, sizeof(len), "%llu", (unsigned long long)bytes);
    const char *const args[] = {
        "--shm",        shm,   "--shm-bytes",      len,   "--create",
        "--state-file", state, "--ready-delay-ms", "300", NULL};
    int lfd;
    pid_t pid;
    int fd = fake_agent_start(sock, log, args, &lfd, &pid);
    assert_int_equal(write(fd, "BEGIN 1\n", 8), 8);
    if (ready_unread) {
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        assert_int_equal(poll(&pfd, 1, 5000), 1); /* READY is queued */
    } else {
        usleep(100000); /* BEGIN read, READY not sent yet */
    }
    close(fd);
    waitpid(pid, &status, 0);
    close(lfd);
    unlink(sock);
    if (!file_has(state, "\"unusable\"") || !file_has(state, "lost the agent"))
        fail_msg("the stand-in that lost its agent is not unusable (%s)",
                 state);
    unlink(state);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static void test_standin_agent_hangs_up(void **state)
{
    struct eng_case *c = *state;

    stop_all(c); /* this test is the agent */
    assert_int_equal(standin_hangup(c->dir, 0), 0);
    assert_int_equal(standin_hangup(c->dir, 1), 0);
}

/* An engine that answers the protocol itself, as a script: version 1 is
 * taken whole, version 2 fails at LAYER 0, version 3 answers READY only
 * after 'ready_delay_ms'. Every line it gets goes to 'log_path'. */
static void scripted_engine(const char *sock, const char *log_path,
                            unsigned ready_delay_ms)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    unsigned long long v;
    unsigned layer;
    char line[640], reply[640];
    FILE *log = fopen(log_path, "w");
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);

    if (log == NULL || fd < 0 || strlen(sock) >= sizeof(sa.sun_path))
        _exit(2);
    memcpy(sa.sun_path, sock, strlen(sock) + 1);
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0)
        _exit(2);
    FILE *in = fdopen(fd, "r");
    if (in == NULL)
        _exit(2);
    while (fgets(line, sizeof(line), in) != NULL) {
        fputs(line, log);
        fflush(log);
        reply[0] = '\0';
        if (sscanf(line, "BEGIN %llu", &v) == 1) {
            if (v == 3)
                usleep(ready_delay_ms * 1000u);
            snprintf(reply, sizeof(reply), "READY %llu\n", v);
        } else if (sscanf(line, "LAYER %u %llu", &layer, &v) == 2) {
            snprintf(reply, sizeof(reply),
                     v == 2 ? "FAILED %u %llu scripted failure\n"
                            : "FINALIZED %u %llu\n",
                     layer, v);
        }
        if (reply[0] != '\0' &&
            write(fd, reply, strlen(reply)) != (ssize_t)strlen(reply))
            _exit(2);
    }
    _exit(0);
}

/* A sender process that pushes 'version' and exits 0 on success, 1
 * otherwise. Pushes run in children: this process may fork again after,
 * and UCX does not survive a fork. */
static pid_t push_child(struct it_agent *a, uint64_t version)
{
    pid_t pid = fork();

    assert_true(pid >= 0);
    if (pid == 0) {
        struct it_sender s;
        wst_status_t st = WST_ERR_INVALID;
        if (it_sender_load(&s, a) == 0 &&
            it_sender_setup(&s, a, SIZE_MAX, version) == WST_OK) {
            st = wst_sender_push(s.sender, version);
            if (st == WST_OK)
                st = wst_sender_wait(s.sender, 30.0);
            fprintf(stderr, "push %llu: %s: %s\n", (unsigned long long)version,
                    wst_status_string(st), wst_sender_last_error(s.sender));
        }
        it_sender_destroy(&s);
        _exit(st == WST_OK ? 0 : 1);
    }
    return pid;
}

static int child_exit(pid_t pid)
{
    int ws = 0;

    assert_int_equal(waitpid(pid, &ws, 0), pid);
    return WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws);
}

/* An unusable agent whose next refit is refused before anything is written
 * (its sender is SIGKILLed while the engine is still pausing) must not tell
 * the engine to resume: its live memory is not the committed version. It
 * says UNUSABLE again instead, and stays unusable. */
static void test_engine_socket_unusable_never_resumes(void **state)
{
    struct eng_case *c = *state;
    char log_path[PATH_MAX];
    uint64_t committed = 0;
    int usable = 1;

    snprintf(log_path, sizeof(log_path), "%s/scripted.log", c->dir);
    c->standin = fork();
    assert_true(c->standin >= 0);
    if (c->standin == 0)
        scripted_engine(c->a.engine_socket, log_path, 1000);
    for (double end = now_s() + 10.0;
         !it_agent_log_has(&c->a, "engine connected on"); usleep(10000))
        if (now_s() > end)
            fail_msg("the agent never logged the scripted engine");

    assert_int_equal(child_exit(push_child(&c->a, 1)), 0);
    assert_int_equal(it_agent_wait_status(&c->a, 1, 5.0), 0);
    assert_int_not_equal(child_exit(push_child(&c->a, 2)), 0);
    for (double end = now_s() + 5.0; usable; usleep(10000)) {
        assert_int_equal(it_agent_status(&c->a, &committed, &usable), 0);
        if (now_s() > end)
            fail_msg("the agent stayed usable after the engine's FAILED");
    }
    /* The agent writes its status before it tells the engine (the
     * unusable hook), so the engine may hear it a moment later. */
    for (double end = now_s() + 5.0; !file_has(log_path, "UNUSABLE ");
         usleep(10000))
        if (now_s() > end)
            fail_msg("the engine never heard UNUSABLE after its FAILED");

    /* Version 3: kill the sender once the engine holds BEGIN 3, while it
     * waits to answer READY. */
    pid_t sender = push_child(&c->a, 3);
    for (double end = now_s() + 10.0; !file_has(log_path, "BEGIN 3\n");
         usleep(2000))
        if (now_s() > end)
            fail_msg("the engine never got BEGIN 3");
    kill(sender, SIGKILL);
    child_exit(sender);
    /* READY goes out after 1 s; what the agent says next comes soon after. */
    usleep(2500000);
    assert_int_equal(it_agent_status(&c->a, &committed, &usable), 0);
    assert_false(usable);
    assert_int_equal(committed, 1);
    stop_all(c);
    assert_true(file_has(log_path, "COMMITTED 1\n"));
    if (file_has_after(log_path, "BEGIN 3\n", "COMMITTED"))
        fail_msg("the unusable agent told its engine to resume (%s)", log_path);
    if (!file_has_after(log_path, "BEGIN 3\n", "UNUSABLE "))
        fail_msg("the engine was not told the agent is still unusable");
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_engine_socket_labeled_refit,
                                        setup_engine, teardown_engine),
        cmocka_unit_test_setup_teardown(test_engine_socket_refit, setup_engine,
                                        teardown_engine),
        cmocka_unit_test_setup_teardown(test_engine_socket_no_engine,
                                        setup_engine, teardown_engine),
        cmocka_unit_test_setup_teardown(test_engine_socket_engine_late,
                                        setup_engine, teardown_engine),
        cmocka_unit_test_setup_teardown(test_engine_socket_refused,
                                        setup_engine, teardown_engine),
        cmocka_unit_test_setup_teardown(test_engine_socket_busy, setup_engine,
                                        teardown_engine),
        cmocka_unit_test_setup_teardown(test_engine_socket_restarted_engine,
                                        setup_engine, teardown_engine),
        cmocka_unit_test_setup_teardown(test_standin_catches_early_write,
                                        setup_engine, teardown_engine),
        cmocka_unit_test_setup_teardown(test_standin_agent_hangs_up,
                                        setup_engine, teardown_engine),
        cmocka_unit_test_setup_teardown(
            test_engine_socket_unusable_never_resumes, setup_engine_tcp,
            teardown_engine_tcp),
    };

    if (argc != 3) {
        fprintf(stderr, "usage: %s PATH_TO_WSTREAM_AGENT PATH_TO_STANDIN\n",
                argv[0]);
        return 2;
    }
    agent_bin = argv[1];
    standin_bin = argv[2];
    return cmocka_run_group_tests(tests, NULL, NULL);
}
