/* test_metrics.c - a real wstream-agent with --metrics-listen (set through
 * its environment, as a container would): /healthz answers at once,
 * /readyz says 503 until a version is committed and 200 after, and
 * /metrics, in Prometheus text format, counts the refit, its bytes and its
 * layers' finalize durations. Plain HTTP/1.0 over a socket: the client
 * knows nothing of the server library.
 *
 * usage: test_metrics PATH_TO_WSTREAM_AGENT
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <unistd.h>

#include "agent_fixture.h"

static const char *agent_bin;

/* The value of the sample line starting with 'name' (name and labels). */
static double sample(const char *text, const char *name)
{
    char key[256];
    const char *at = text;

    snprintf(key, sizeof(key), "\n%s ", name);
    at = strstr(text, key);
    if (at == NULL)
        fail_msg("no sample '%s' in:\n%s", name, text);
    return strtod(at + strlen(key), NULL);
}

/* Starts an agent (insecure: without a secret) with metrics on a free
 * port; the port goes to *port_p. */
static void start_with_metrics(struct it_agent *a, int insecure,
                               unsigned *port_p)
{
    char port_file[] = "/tmp/wstream-metrics-XXXXXX";
    int fd = mkstemp(port_file);

    assert_true(fd >= 0);
    close(fd);
    unlink(port_file); /* the agent writes it once serving */
    setenv("WST_METRICS_LISTEN", "127.0.0.1:0", 1);
    setenv("WST_METRICS_PORT_FILE", port_file, 1);
    assert_int_equal(insecure ? it_agent_start_insecure(a, agent_bin)
                              : it_agent_start(a, agent_bin),
                     0);
    unsetenv("WST_METRICS_LISTEN");
    unsetenv("WST_METRICS_PORT_FILE");
    FILE *f = fopen(port_file, "r");
    assert_non_null(f);
    assert_int_equal(fscanf(f, "%u", port_p), 1);
    fclose(f);
    unlink(port_file);
}

static void test_agent_metrics_and_probes(void **state)
{
    struct it_agent a;
    struct it_sender s = {0};
    char body[1 << 16];
    unsigned port = 0;

    (void)state;
    start_with_metrics(&a, 0, &port);

    assert_int_equal(
        it_http_get((uint16_t)port, "/healthz", body, sizeof(body)), 200);
    assert_int_equal(it_http_get((uint16_t)port, "/readyz", body, sizeof(body)),
                     503);
    assert_non_null(strstr(body, "no committed version yet"));
    assert_int_equal(it_http_get((uint16_t)port, "/nope", body, sizeof(body)),
                     404);

    assert_int_equal(it_sender_load(&s, &a), 0);
    assert_int_equal(it_sender_setup(&s, &a, SIZE_MAX, 1), WST_OK);
    assert_int_equal(wst_sender_push(s.sender, 1), WST_OK);
    assert_int_equal(wst_sender_wait(s.sender, 30.0), WST_OK);
    assert_int_equal(it_agent_wait_status(&a, 1, 10.0), 0);

    assert_int_equal(it_http_get((uint16_t)port, "/readyz", body, sizeof(body)),
                     200);
    assert_non_null(strstr(body, "serving version 1"));
    assert_int_equal(
        it_http_get((uint16_t)port, "/metrics", body, sizeof(body)), 200);
    assert_true(sample(body, "wstream_committed_version") == 1);
    assert_true(sample(body, "wstream_usable") == 1);
    assert_true(sample(body, "wstream_insecure") == 0);
    assert_true(sample(body, "wstream_refits_total{outcome=\"committed\"}") ==
                1);
    assert_true(sample(body, "wstream_refits_total{outcome=\"failed\"}") == 0);
    assert_true(sample(body, "wstream_forged_data_total") == 0);
    uint64_t bytes = 0;
    for (size_t i = 0; i < s.n_haves; i++)
        bytes += wst_model_shard_bytes(&s.haves[i]);
    /* Every byte under the mover the sender says it used, none under the
     * others. */
    const char *movers[] = {"put", "am", "nccl"};
    const char *used = wst_sender_mover(s.sender, 0);
    assert_non_null(used);
    for (size_t i = 0; i < 3; i++) {
        char name[64];
        snprintf(name, sizeof(name), "wstream_rx_bytes_total{mover=\"%s\"}",
                 movers[i]);
        assert_true(sample(body, name) ==
                    (strcmp(used, movers[i]) == 0 ? (double)bytes : 0));
    }
    /* Every layer (and the global tensors) finalized once: the histogram's
     * count is the timeline's length, its +Inf bucket the same. */
    double layers = sample(body, "wstream_layer_finalize_seconds_count");
    assert_true(layers >= 1);
    assert_true(
        sample(body, "wstream_layer_finalize_seconds_bucket{le=\"+Inf\"}") ==
        layers);
    assert_non_null(strstr(body, "# TYPE wstream_refits_total counter"));
    it_sender_destroy(&s);
    it_agent_stop(&a);
}

/* --insecure: said at start in the log, in /metrics and in /readyz's body
 * before and after a refit (from a sender without a secret, which the
 * insecure agent accepts). */
static void test_agent_insecure_says_so(void **state)
{
    struct it_agent a;
    char body[1 << 16];
    unsigned port = 0;

    (void)state;
    start_with_metrics(&a, 1, &port);
    assert_true(it_agent_log_has(&a, "running --insecure"));
    assert_true(it_agent_log_has(&a, "no auth secret: any process that"));
    assert_int_equal(
        it_http_get((uint16_t)port, "/metrics", body, sizeof(body)), 200);
    assert_true(sample(body, "wstream_insecure") == 1);
    assert_int_equal(it_http_get((uint16_t)port, "/readyz", body, sizeof(body)),
                     503);
    assert_non_null(strstr(body, "insecure"));

    assert_int_equal(it_refit(&a, 1), 0);
    assert_int_equal(it_http_get((uint16_t)port, "/readyz", body, sizeof(body)),
                     200);
    assert_non_null(strstr(body, "serving version 1 (insecure"));
    it_agent_stop(&a);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_agent_metrics_and_probes),
        cmocka_unit_test(test_agent_insecure_says_so),
    };

    if (argc < 2) {
        fprintf(stderr, "usage: %s PATH_TO_WSTREAM_AGENT\n", argv[0]);
        return 2;
    }
    agent_bin = argv[1];
    return cmocka_run_group_tests(tests, NULL, NULL);
}
