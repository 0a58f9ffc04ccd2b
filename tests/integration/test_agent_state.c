/* test_agent_state.c - a real wstream-agent keeps its committed version and
 * its unusability across a restart (--state-file, by default the status
 * file's path + ".state"), over UCX tcp on loopback:
 *  - committed 5, SIGTERM, restart: version 3 is refused "not above 5";
 *  - unusable (the engine FAILED a layer), restart: still unusable with the
 *    same reason (status file, /readyz 503), until a complete refit;
 *  - SIGKILL while the engine holds a layer of version 2, restart:
 *    unusable, naming version 2;
 *  - a malformed state file: the agent refuses to start, naming it;
 *  - a state file it cannot write: the refit is refused, nothing written;
 *  - a labeled version: its label in the status and state files, the
 *    metrics, the engine's lines and what a sender reads, across a
 *    restart; a label breaking the rule is refused at the sender's API.
 *
 * The engine is a scripted one (a child of this process, forked before any
 * UCX use here) that reconnects whenever the agent goes away.
 *
 * usage: test_agent_state PATH_TO_WSTREAM_AGENT
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
#include <json-c/json.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agent_fixture.h"
#include "clock.h"

static const char *agent_bin;

/* An agent, where its state file is, and a scripted engine (0: none). */
struct st_case {
    struct it_agent a;
    char state_path[PATH_MAX + 8];
    char dir[64]; /* this test's own files: engine log, metrics port */
    char engine_log[PATH_MAX];
    char metrics_port[PATH_MAX];
    pid_t engine;
};

/* The scripted engine: READY to every BEGIN; FAILED to each LAYER of
 * version 'fail_v', no answer at all to one of 'hold_v', FINALIZED
 * otherwise. Every line it gets goes to 'log_path'; when the agent goes
 * away it connects again. */
struct script {
    uint64_t fail_v;
    uint64_t hold_v;
};

static int engine_connect(const char *sock)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    int fd;

    if (strlen(sock) >= sizeof(sa.sun_path))
        return -1;
    memcpy(sa.sun_path, sock, strlen(sock) + 1);
    for (double end = wst_now_s() + 60.0; wst_now_s() < end; usleep(20000)) {
        fd = socket(AF_UNIX, SOCK_STREAM, 0);
        if (fd < 0)
            return -1;
        if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0)
            return fd;
        close(fd);
    }
    return -1;
}

static const char *engine_reply(const struct script *sc, const char *line,
                                char *reply, size_t len)
{
    unsigned long long v;
    unsigned layer;

    if (sscanf(line, "BEGIN %llu", &v) == 1)
        snprintf(reply, len, "READY %llu\n", v);
    else if (sscanf(line, "LAYER %u %llu", &layer, &v) != 2 || v == sc->hold_v)
        return NULL;
    else if (v == sc->fail_v)
        snprintf(reply, len, "FAILED %u %llu scripted failure of layer %u\n",
                 layer, v, layer);
    else
        snprintf(reply, len, "FINALIZED %u %llu\n", layer, v);
    return reply;
}

static void run_engine(const char *sock, const char *log_path, struct script sc)
{
    char line[640], reply[640];
    FILE *log = fopen(log_path, "w");
    int fd;

    if (log == NULL)
        _exit(2);
    while ((fd = engine_connect(sock)) >= 0) {
        FILE *in = fdopen(fd, "r");
        if (in == NULL)
            _exit(2);
        fputs("CONNECTED\n", log);
        fflush(log);
        while (fgets(line, sizeof(line), in) != NULL) {
            fputs(line, log);
            fflush(log);
            const char *r = engine_reply(&sc, line, reply, sizeof(reply));
            if (r != NULL && write(fd, r, strlen(r)) != (ssize_t)strlen(r))
                break;
        }
        fclose(in);
    }
    _exit(0);
}

static void wait_for(const char *path, const char *needle, double timeout_s)
{
    for (double end = wst_now_s() + timeout_s; !it_file_has(path, needle);
         usleep(5000))
        if (wst_now_s() > end)
            fail_msg("%s never said '%s'", path, needle);
}

/* The JSON file at 'path' (status or state), parsed; the caller puts it. */
static struct json_object *read_json(const char *path)
{
    struct json_object *o = json_object_from_file(path);

    if (o == NULL)
        fail_msg("%s: cannot read it as JSON", path);
    return o;
}

static const char *get_str(struct json_object *o, const char *key)
{
    struct json_object *v;

    if (!json_object_object_get_ex(o, key, &v))
        fail_msg("no \"%s\" in %s", key, json_object_to_json_string(o));
    return json_object_get_string(v);
}

static uint64_t get_u64(struct json_object *o, const char *key)
{
    struct json_object *v;

    if (!json_object_object_get_ex(o, key, &v))
        fail_msg("no \"%s\" in %s", key, json_object_to_json_string(o));
    return json_object_get_uint64(v);
}

static int get_bool(struct json_object *o, const char *key)
{
    struct json_object *v;

    if (!json_object_object_get_ex(o, key, &v))
        fail_msg("no \"%s\" in %s", key, json_object_to_json_string(o));
    return json_object_get_boolean(v);
}

/* The file says committed_version 'committed' and usable 'usable'. */
static void expect_file(const char *path, uint64_t committed, int usable)
{
    struct json_object *o = read_json(path);

    if (get_u64(o, "committed_version") != committed ||
        get_bool(o, "usable") != usable)
        fail_msg("%s says %s; expected committed_version %llu, usable %d", path,
                 json_object_to_json_string(o), (unsigned long long)committed,
                 usable);
    json_object_put(o);
}

static int setup(void **state)
{
    struct st_case *c = calloc(1, sizeof(*c));

    if (c == NULL)
        return -1;
    snprintf(c->dir, sizeof(c->dir), "/tmp/wstream-state-XXXXXX");
    if (mkdtemp(c->dir) == NULL) {
        free(c);
        return -1;
    }
    snprintf(c->engine_log, sizeof(c->engine_log), "%s/engine.log", c->dir);
    snprintf(c->metrics_port, sizeof(c->metrics_port), "%s/metrics.port",
             c->dir);
    *state = c;
    return 0;
}

static void print_engine_log(const struct st_case *c)
{
    char line[1024];
    FILE *f = fopen(c->engine_log, "r");

    if (f == NULL)
        return;
    fprintf(stderr, "---- engine log ----\n");
    while (fgets(line, sizeof(line), f) != NULL)
        fputs(line, stderr);
    fclose(f);
}

static int teardown(void **state)
{
    struct st_case *c = *state;
    char cmd[128];

    it_agent_stop(&c->a);
    if (c->engine > 0) {
        kill(c->engine, SIGKILL);
        waitpid(c->engine, NULL, 0);
        print_engine_log(c);
    }
    unsetenv("WST_METRICS_LISTEN");
    unsetenv("WST_METRICS_PORT_FILE");
    unsetenv("WST_STATE_FILE");
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", c->dir);
    if (system(cmd) != 0)
        fprintf(stderr, "teardown: could not remove %s\n", c->dir);
    free(c);
    return 0;
}

/* Starts the agent (with an engine socket when 'sc' is given, and the
 * scripted engine on it). */
static void start(struct st_case *c, const struct script *sc)
{
    if (sc == NULL) {
        assert_int_equal(it_agent_start(&c->a, agent_bin), 0);
    } else {
        assert_int_equal(it_agent_start_engine(&c->a, agent_bin), 0);
        c->engine = fork();
        assert_true(c->engine >= 0);
        if (c->engine == 0)
            run_engine(c->a.engine_socket, c->engine_log, *sc);
        wait_for(c->a.log_path, "engine connected on", 10.0);
    }
    snprintf(c->state_path, sizeof(c->state_path), "%s.state",
             c->a.status_path);
}

/* Stops the agent with 'sig' (0: it is stopped already) and starts it
 * again on the same files. */
static void restart(struct st_case *c, int sig)
{
    int ws = sig != 0 ? it_agent_kill(&c->a, sig) : 0;

    if (sig == SIGTERM && !(WIFEXITED(ws) && WEXITSTATUS(ws) == 0))
        fail_msg("the agent did not exit cleanly on SIGTERM (0x%x)", ws);
    unlink(c->metrics_port);
    assert_int_equal(it_agent_restart(&c->a, agent_bin, NULL), 0);
    if (c->engine > 0)
        wait_for(c->a.log_path, "engine connected on", 10.0);
}

/* Pushes 'version' from a correct sender; its status, and its last error
 * into err. */
static wst_status_t push(struct st_case *c, uint64_t version, char *err,
                         size_t errlen)
{
    struct it_sender s;
    wst_status_t st;

    assert_int_equal(it_sender_load(&s, &c->a), 0);
    assert_int_equal(it_sender_setup(&s, &c->a, SIZE_MAX, version), WST_OK);
    st = wst_sender_push(s.sender, version);
    if (st == WST_OK)
        st = wst_sender_wait(s.sender, 30.0);
    snprintf(err, errlen, "%s", wst_sender_last_error(s.sender));
    fprintf(stderr, "push %llu: %s: %s\n", (unsigned long long)version,
            wst_status_string(st), err);
    it_sender_destroy(&s);
    return st;
}

/* What a restarted trainer reads before it pushes: the version the agent
 * holds (wst_sender_connect, wst_sender_committed_version). */
static uint64_t held_version(struct st_case *c)
{
    struct it_sender s;
    uint64_t v;

    assert_int_equal(it_sender_load(&s, &c->a), 0);
    assert_int_equal(it_sender_setup(&s, &c->a, SIZE_MAX, 1), WST_OK);
    assert_int_equal(wst_sender_committed_version(s.sender, 0), 0);
    if (wst_sender_connect(s.sender) != WST_OK)
        fail_msg("connect: %s", wst_sender_last_error(s.sender));
    v = wst_sender_committed_version(s.sender, 0);
    assert_int_equal(wst_sender_committed_version(s.sender, 1), 0);
    it_sender_destroy(&s);
    return v;
}

static void push_ok(struct st_case *c, uint64_t version)
{
    char err[512];

    if (push(c, version, err, sizeof(err)) != WST_OK)
        fail_msg("push %llu failed: %s", (unsigned long long)version, err);
    assert_int_equal(it_agent_wait_status(&c->a, version, 5.0), 0);
}

static uint16_t metrics_port(const struct st_case *c)
{
    unsigned port = 0;
    FILE *f;

    for (double end = wst_now_s() + 5.0;
         (f = fopen(c->metrics_port, "r")) == NULL; usleep(10000))
        if (wst_now_s() > end)
            fail_msg("the agent never wrote %s", c->metrics_port);
    assert_int_equal(fscanf(f, "%u", &port), 1);
    fclose(f);
    return (uint16_t)port;
}

/* Committed 5, SIGTERM, restart with the same state file: 3 is refused
 * with both numbers named, 5 is still served, and 6 goes through. */
static void test_restart_keeps_committed_version(void **state)
{
    struct st_case *c = *state;
    char err[512];

    start(c, NULL);
    push_ok(c, 5);
    restart(c, SIGTERM);
    expect_file(c->a.status_path, 5, 1);
    expect_file(c->state_path, 5, 1);
    assert_true(it_agent_log_has(&c->a, "committed version 5, usable"));

    assert_int_equal(held_version(c), 5);
    assert_int_equal(push(c, 3, err, sizeof(err)), WST_ERR_STALE_VERSION);
    if (strstr(err, "version 3 is not above 5") == NULL)
        fail_msg("the refusal '%s' does not name 3 and 5", err);
    expect_file(c->a.status_path, 5, 1);
    if (wst_model_verify(&c->a.layout, c->a.shm, IT_SEED, 5, NULL, err,
                         sizeof(err)) != WST_OK)
        fail_msg("the live bytes are no longer version 5: %s", err);
    push_ok(c, 6);
    expect_file(c->state_path, 6, 1);
}

/* Unusable after the engine FAILED a layer of version 2; restarted, it is
 * still unusable for the same reason, /readyz says 503 and why, the engine
 * is never told to resume; a complete refit of version 3 restores it, and
 * that is what the state file then says. */
static void test_restart_stays_unusable(void **state)
{
    struct st_case *c = *state;
    struct script sc = {.fail_v = 2};
    char err[512], body[8192], reason[512];

    setenv("WST_METRICS_LISTEN", "127.0.0.1:0", 1);
    setenv("WST_METRICS_PORT_FILE", c->metrics_port, 1);
    start(c, &sc);
    push_ok(c, 1);
    assert_int_not_equal(push(c, 2, err, sizeof(err)), WST_OK);
    for (double end = wst_now_s() + 5.0;; usleep(10000)) {
        struct json_object *o = read_json(c->a.status_path);
        int usable = get_bool(o, "usable");
        snprintf(reason, sizeof(reason), "%s", get_str(o, "reason"));
        json_object_put(o);
        if (!usable)
            break;
        if (wst_now_s() > end)
            fail_msg("the agent stayed usable after the engine's FAILED");
    }
    assert_non_null(strstr(reason, "scripted failure of layer"));

    restart(c, SIGTERM);
    expect_file(c->a.status_path, 1, 0);
    expect_file(c->state_path, 1, 0);
    struct json_object *o = read_json(c->a.status_path);
    assert_string_equal(get_str(o, "reason"), reason);
    json_object_put(o);
    assert_int_equal(
        it_http_get(metrics_port(c), "/readyz", body, sizeof(body)), 503);
    if (strstr(body, reason) == NULL)
        fail_msg("/readyz says '%s', not the reason '%s'", body, reason);

    push_ok(c, 3);
    expect_file(c->a.status_path, 3, 1);
    expect_file(c->state_path, 3, 1);
    assert_int_equal(
        it_http_get(metrics_port(c), "/readyz", body, sizeof(body)), 200);
    /* The restarted agent's engine heard BEGIN 3 before any COMMITTED. */
    char *log = NULL;
    size_t n = 0;
    FILE *f = fopen(c->engine_log, "r");
    assert_non_null(f);
    assert_true(getdelim(&log, &n, '\0', f) > 0);
    fclose(f);
    const char *second = strstr(strstr(log, "CONNECTED\n") + 1, "CONNECTED\n");
    assert_non_null(second);
    const char *begin3 = strstr(second, "BEGIN 3\n");
    const char *commit = strstr(second, "COMMITTED");
    assert_non_null(begin3);
    assert_true(commit == NULL || commit > begin3);
    /* It heard at once that the agent is unusable, and why. */
    const char *told = strstr(second, "UNUSABLE WST_ERR_UNUSABLE ");
    if (told == NULL || told > begin3 ||
        strstr(told, "scripted failure of layer") == NULL)
        fail_msg("the engine that connected to the restarted agent was not "
                 "told it is unusable before BEGIN 3:\n%s",
                 second);
    free(log);
}

/* SIGKILL while the engine holds layer 0 of version 2 (after READY, bytes
 * landing): the restarted agent is unusable and names version 2. */
static void test_restart_after_crash_mid_refit(void **state)
{
    struct st_case *c = *state;
    struct script sc = {.hold_v = 2};
    struct it_sender s;

    start(c, &sc);
    push_ok(c, 1);
    assert_int_equal(it_sender_load(&s, &c->a), 0);
    assert_int_equal(it_sender_setup(&s, &c->a, SIZE_MAX, 2), WST_OK);
    assert_int_equal(wst_sender_push(s.sender, 2), WST_OK);
    wait_for(c->engine_log, "LAYER 0 2\n", 10.0);
    it_agent_kill(&c->a, SIGKILL);
    assert_int_not_equal(wst_sender_wait(s.sender, 30.0), WST_OK);
    it_sender_destroy(&s);

    restart(c, 0);
    expect_file(c->a.status_path, 1, 0);
    struct json_object *o = read_json(c->a.status_path);
    if (strstr(get_str(o, "reason"), "refit of version 2 was open") == NULL)
        fail_msg("the reason '%s' does not name version 2",
                 get_str(o, "reason"));
    json_object_put(o);
    o = read_json(c->state_path);
    assert_int_equal(get_u64(o, "open_version"), 2);
    json_object_put(o);
    assert_true(it_agent_log_has(&c->a, "unusable until a refit completes"));
}

/* A malformed state file: the agent exits at start, nonzero, naming the
 * file and what is wrong; the file is left as it was. */
static void expect_refused_start(struct st_case *c, const char *path,
                                 const char *text, const char *why)
{
    char needle[PATH_MAX + 64];
    int ws = 0;
    FILE *f = fopen(path, "w");

    assert_non_null(f);
    fputs(text, f);
    fclose(f);
    assert_int_not_equal(it_agent_restart(&c->a, agent_bin, &ws), 0);
    if (!WIFEXITED(ws) || WEXITSTATUS(ws) == 0)
        fail_msg("the agent did not exit with an error (0x%x) on '%s'", ws,
                 text);
    snprintf(needle, sizeof(needle), "state file %s: %s", path, why);
    if (!it_agent_log_has(&c->a, needle))
        fail_msg("the agent's log does not say '%s'", needle);
    assert_true(it_file_has(path, text));
}

/* GET /metrics: the body into body[len]. */
static void get_metrics(const struct st_case *c, char *body, size_t len)
{
    assert_int_equal(it_http_get(metrics_port(c), "/metrics", body, len), 200);
}

/* The label the agent's sender-facing side holds, as a sender that
 * connects reads it (wst_sender_connect, wst_sender_committed_label). */
static void held_label(struct st_case *c, char *label, size_t len)
{
    struct it_sender s;

    assert_int_equal(it_sender_load(&s, &c->a), 0);
    assert_int_equal(it_sender_setup(&s, &c->a, SIZE_MAX, 1), WST_OK);
    if (wst_sender_connect(s.sender) != WST_OK)
        fail_msg("connect: %s", wst_sender_last_error(s.sender));
    assert_int_equal(wst_sender_committed_label(s.sender, 0, label, len),
                     WST_OK);
    assert_int_equal(wst_sender_committed_label(s.sender, 1, label, len),
                     WST_ERR_INVALID);
    it_sender_destroy(&s);
}

/* A label with both characters Prometheus escapes inside a label value. */
#define LABEL "run-4/step-5:\"q\"\\x"
#define LABEL_PROM "run-4/step-5:\\\"q\\\"\\\\x"

/* Version 5 pushed labeled: the label is in the status file, the state
 * file, the metrics, the engine's BEGIN and COMMITTED lines and what a
 * sender that connects reads; a restarted agent still says it everywhere;
 * version 6, unlabeled, holds none. A label breaking the rule is refused
 * at the API before anything is sent. */
static void test_label_everywhere(void **state)
{
    struct st_case *c = *state;
    struct script sc = {0};
    struct it_sender s;
    char body[16384], label[WST_LABEL_MAX];

    setenv("WST_METRICS_LISTEN", "127.0.0.1:0", 1);
    setenv("WST_METRICS_PORT_FILE", c->metrics_port, 1);
    start(c, &sc);
    assert_int_equal(it_sender_load(&s, &c->a), 0);
    assert_int_equal(it_sender_setup(&s, &c->a, SIZE_MAX, 5), WST_OK);
    struct wst_push_params p = {.field_mask = WST_PUSH_LABEL,
                                .label = "two words"};
    assert_int_equal(wst_sender_push_with(s.sender, 5, &p), WST_ERR_INVALID);
    if (strstr(wst_sender_last_error(s.sender), "byte 3 is 0x20") == NULL)
        fail_msg("the refusal '%s' does not name the space",
                 wst_sender_last_error(s.sender));
    assert_false(it_agent_log_has(&c->a, "connected, world"));
    p.label = LABEL;
    if (wst_sender_push_with(s.sender, 5, &p) != WST_OK ||
        wst_sender_wait(s.sender, 30.0) != WST_OK)
        fail_msg("labeled push: %s", wst_sender_last_error(s.sender));
    assert_int_equal(
        wst_sender_committed_label(s.sender, 0, label, sizeof(label)), WST_OK);
    assert_string_equal(label, LABEL);
    it_sender_destroy(&s);
    assert_int_equal(it_agent_wait_status(&c->a, 5, 5.0), 0);

    for (int round = 0; round < 2; round++) {
        struct json_object *o = read_json(c->a.status_path);
        assert_string_equal(get_str(o, "committed_label"), LABEL);
        json_object_put(o);
        o = read_json(c->state_path);
        assert_string_equal(get_str(o, "committed_label"), LABEL);
        json_object_put(o);
        get_metrics(c, body, sizeof(body));
        if (strstr(body, "\nwstream_committed_version_info{label=\"" LABEL_PROM
                         "\"} 1\n") == NULL)
            fail_msg("no labeled info metric in:\n%s", body);
        held_label(c, label, sizeof(label));
        assert_string_equal(label, LABEL);
        if (round == 0) {
            wait_for(c->engine_log, "BEGIN 5 " LABEL "\n", 5.0);
            wait_for(c->engine_log, "COMMITTED 5 " LABEL "\n", 5.0);
            restart(c, SIGTERM);
            expect_file(c->a.status_path, 5, 1);
        }
    }
    assert_true(it_agent_log_has(&c->a, "committed version 5 label " LABEL));

    push_ok(c, 6);
    wait_for(c->engine_log, "COMMITTED 6\n", 5.0);
    struct json_object *o = read_json(c->a.status_path);
    assert_string_equal(get_str(o, "committed_label"), "");
    json_object_put(o);
    o = read_json(c->state_path);
    assert_string_equal(get_str(o, "committed_label"), "");
    json_object_put(o);
    get_metrics(c, body, sizeof(body));
    assert_non_null(
        strstr(body, "\nwstream_committed_version_info{label=\"\"} 1\n"));
}

static void test_malformed_state_file(void **state)
{
    struct st_case *c = *state;
    char explicit_path[PATH_MAX];

    start(c, NULL);
    it_agent_kill(&c->a, SIGTERM);
    expect_refused_start(c, c->state_path, "{\"committed_version\": 5,",
                         "not valid JSON");
    expect_refused_start(c, c->state_path,
                         "{\"committed_version\": \"5\", \"usable\": true, "
                         "\"reason\": \"\", \"open_version\": 0}",
                         "\"committed_version\" is not an integer");
    expect_refused_start(c, c->state_path,
                         "{\"committed_version\": 5, \"usable\": false, "
                         "\"reason\": \"\", \"open_version\": 0}",
                         "unusable without a reason");
    expect_refused_start(c, c->state_path,
                         "{\"committed_version\": 5, \"usable\": true, "
                         "\"reason\": \"\"}",
                         "no \"open_version\"");
    expect_refused_start(c, c->state_path,
                         "{\"committed_version\": 5, \"usable\": true, "
                         "\"reason\": \"\", \"open_version\": 0, "
                         "\"committed_label\": \"step 5\"}",
                         "\"committed_label\": label \"step?5\": byte 4");
    /* --state-file (here as its variable) names another file. */
    snprintf(explicit_path, sizeof(explicit_path), "%s/explicit.state", c->dir);
    setenv("WST_STATE_FILE", explicit_path, 1);
    expect_refused_start(c, explicit_path, "[]", "not a JSON object");
    /* And a good one there is taken. */
    FILE *f = fopen(explicit_path, "w");
    assert_non_null(f);
    fputs("{\"committed_version\": 7, \"usable\": true, \"reason\": \"\", "
          "\"open_version\": 0}\n",
          f);
    fclose(f);
    assert_int_equal(it_agent_restart(&c->a, agent_bin, NULL), 0);
    expect_file(c->a.status_path, 7, 1);
}

/* A state file the agent cannot replace (a directory took its place): the
 * refit is refused before the engine pauses, naming the file; nothing is
 * written and the agent stays usable. */
static void test_unwritable_state_refuses_refit(void **state)
{
    struct st_case *c = *state;
    char err[512];

    start(c, NULL);
    assert_int_equal(unlink(c->state_path), 0);
    assert_int_equal(mkdir(c->state_path, 0755), 0);
    assert_int_not_equal(push(c, 1, err, sizeof(err)), WST_OK);
    if (strstr(err, "cannot persist its state") == NULL ||
        strstr(err, c->state_path) == NULL)
        fail_msg("the refusal '%s' does not name the state file", err);
    assert_true(it_agent_shm_untouched(&c->a));
    expect_file(c->a.status_path, 0, 1);
    rmdir(c->state_path);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_restart_keeps_committed_version,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_restart_stays_unusable, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_restart_after_crash_mid_refit,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_malformed_state_file, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_unwritable_state_refuses_refit,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_label_everywhere, setup, teardown),
    };

    if (argc != 2) {
        fprintf(stderr, "usage: %s PATH_TO_WSTREAM_AGENT\n", argv[0]);
        return 2;
    }
    agent_bin = argv[1];
    /* Every lane on tcp: the agent and the senders inherit it. */
    setenv("UCX_TLS", "tcp", 1);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
