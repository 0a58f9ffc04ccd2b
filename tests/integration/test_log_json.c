/* test_log_json.c - a real wstream-agent with --log-format json (set
 * through its environment, WST_LOG_FORMAT, as a container would) takes a
 * refit, and every line it wrote is one JSON object (json-c, an
 * independent parser) with ts, level, component and msg; the lines say
 * what the text log says (listening, committed).
 *
 * usage: test_log_json PATH_TO_WSTREAM_AGENT
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <json-c/json.h>

#include "agent_fixture.h"

static const char *agent_bin;

static void test_agent_logs_json(void **state)
{
    struct it_agent a;
    struct it_sender s = {0};
    char line[4096];
    int lines = 0, listening = 0, committed = 0;

    (void)state;
    setenv("WST_LOG_FORMAT", "json", 1);
    assert_int_equal(it_agent_start(&a, agent_bin), 0);
    unsetenv("WST_LOG_FORMAT");
    assert_int_equal(it_sender_load(&s, &a), 0);
    assert_int_equal(it_sender_setup(&s, &a, SIZE_MAX, 1), WST_OK);
    assert_int_equal(wst_sender_push(s.sender, 1), WST_OK);
    assert_int_equal(wst_sender_wait(s.sender, 30.0), WST_OK);
    assert_int_equal(it_agent_wait_status(&a, 1, 10.0), 0);

    FILE *f = fopen(a.log_path, "r");
    assert_non_null(f);
    while (fgets(line, sizeof(line), f) != NULL) {
        json_object *o = json_tokener_parse(line);
        json_object *v = NULL;
        if (o == NULL)
            fail_msg("agent log line is not JSON: %s", line);
        static const char *const keys[] = {"ts", "level", "component", "msg"};
        for (size_t k = 0; k < 4; k++)
            if (!json_object_object_get_ex(o, keys[k], &v))
                fail_msg("no \"%s\" in: %s", keys[k], line);
        json_object_object_get_ex(o, "msg", &v);
        const char *msg = json_object_get_string(v);
        listening += strncmp(msg, "listening on 127.0.0.1:", 23) == 0;
        committed += strstr(msg, "version 1 committed") != NULL;
        json_object_put(o);
        lines++;
    }
    fclose(f);
    assert_true(lines >= 3);
    assert_int_equal(listening, 1);
    assert_int_equal(committed, 1);
    it_sender_destroy(&s);
    it_agent_stop(&a);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_agent_logs_json),
    };

    if (argc < 2) {
        fprintf(stderr, "usage: %s PATH_TO_WSTREAM_AGENT\n", argv[0]);
        return 2;
    }
    agent_bin = argv[1];
    return cmocka_run_group_tests(tests, NULL, NULL);
}
