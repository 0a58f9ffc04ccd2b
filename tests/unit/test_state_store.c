/* test_state_store.c - wstream-agent's state file (receiver/agent/
 * state_store.h): what is saved is what is loaded, a missing file is a
 * fresh agent, and anything but the exact object is refused, naming the
 * file and leaving *state as it was. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "state_store.h"

struct dir_case {
    char dir[256];
    char path[300];
};

static int setup(void **state)
{
    struct dir_case *c = calloc(1, sizeof(*c));

    if (c == NULL)
        return -1;
    snprintf(c->dir, sizeof(c->dir), "/tmp/test_state_store.XXXXXX");
    if (mkdtemp(c->dir) == NULL) {
        free(c);
        return -1;
    }
    snprintf(c->path, sizeof(c->path), "%s/agent.state", c->dir);
    *state = c;
    return 0;
}

static int teardown(void **state)
{
    struct dir_case *c = *state;

    unlink(c->path);
    rmdir(c->dir);
    free(c);
    return 0;
}

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");

    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static void test_round_trip(void **state)
{
    struct dir_case *c = *state;
    struct wst_agent_state in = {.committed_version = UINT64_MAX - 1,
                                 .usable = 0,
                                 .open_version = UINT64_MAX},
                           out;
    char err[512];
    int found = 0;

    snprintf(in.reason, sizeof(in.reason),
             "refit of \"v\" failed:\ttab, slash / and \\ backslash");
    snprintf(in.committed_label, sizeof(in.committed_label),
             "run\"7\"/step-1200\\x");
    assert_int_equal(wst_state_store_save(c->path, &in, err, sizeof(err)),
                     WST_OK);
    memset(&out, 0x5a, sizeof(out));
    assert_int_equal(
        wst_state_store_load(c->path, &out, &found, err, sizeof(err)), WST_OK);
    assert_int_equal(found, 1);
    assert_true(out.committed_version == in.committed_version);
    assert_true(out.open_version == in.open_version);
    assert_int_equal(out.usable, 0);
    assert_string_equal(out.reason, in.reason);
    assert_string_equal(out.committed_label, "run\"7\"/step-1200\\x");

    in = (struct wst_agent_state){.committed_version = 5, .usable = 1};
    assert_int_equal(wst_state_store_save(c->path, &in, err, sizeof(err)),
                     WST_OK);
    assert_int_equal(
        wst_state_store_load(c->path, &out, &found, err, sizeof(err)), WST_OK);
    assert_true(out.committed_version == 5 && out.usable &&
                out.reason[0] == '\0' && out.open_version == 0);
    assert_string_equal(out.committed_label, "");
}

/* A file written before labels (no committed_label) loads: no label. */
static void test_file_without_label(void **state)
{
    struct dir_case *c = *state;
    struct wst_agent_state out;
    char err[512];
    int found = 0;

    write_text(c->path, "{\"committed_version\": 5, \"usable\": true, "
                        "\"reason\": \"\", \"open_version\": 0}");
    memset(&out, 0x5a, sizeof(out));
    assert_int_equal(
        wst_state_store_load(c->path, &out, &found, err, sizeof(err)), WST_OK);
    assert_int_equal(found, 1);
    assert_true(out.committed_version == 5 && out.usable);
    assert_string_equal(out.committed_label, "");
}

static void test_missing_is_fresh(void **state)
{
    struct dir_case *c = *state;
    struct wst_agent_state out;
    char err[512];
    int found = 1;

    memset(&out, 0x5a, sizeof(out));
    assert_int_equal(
        wst_state_store_load(c->path, &out, &found, err, sizeof(err)), WST_OK);
    assert_int_equal(found, 0);
    assert_true(out.committed_version == 0 && out.usable &&
                out.reason[0] == '\0' && out.open_version == 0);
}

static void test_refusals(void **state)
{
    static const struct {
        const char *text;
        const char *why;
    } cases[] = {
        {"", "not valid JSON"},
        {"{\"committed_version\": 5", "not valid JSON"},
        {"[1]", "not a JSON object"},
        {"{\"committed_version\": 5, \"usable\": true, \"reason\": \"\", "
         "\"open_version\": 0} x",
         "data after the JSON object"},
        {"{\"committed_version\": -1, \"usable\": true, \"reason\": \"\", "
         "\"open_version\": 0}",
         "\"committed_version\" is not an integer >= 0"},
        {"{\"committed_version\": 1.5, \"usable\": true, \"reason\": \"\", "
         "\"open_version\": 0}",
         "\"committed_version\" is not an integer >= 0"},
        {"{\"committed_version\": 5, \"usable\": 1, \"reason\": \"\", "
         "\"open_version\": 0}",
         "\"usable\" is not true or false"},
        {"{\"committed_version\": 5, \"usable\": true, \"reason\": null, "
         "\"open_version\": 0}",
         "\"reason\" is not a string"},
        {"{\"committed_version\": 5, \"usable\": true, \"reason\": \"\", "
         "\"open_version\": \"2\"}",
         "\"open_version\" is not an integer >= 0"},
        {"{\"committed_version\": 5, \"usable\": true, \"reason\": \"\"}",
         "no \"open_version\""},
        {"{\"committed_version\": 5, \"usable\": true, \"reason\": \"\", "
         "\"open_version\": 0, \"commited\": 6}",
         "unknown key \"commited\""},
        {"{\"committed_version\": 5, \"usable\": true, \"reason\": \"x\", "
         "\"open_version\": 0}",
         "usable, yet with a reason or an open version"},
        {"{\"committed_version\": 5, \"usable\": true, \"reason\": \"\", "
         "\"open_version\": 6}",
         "usable, yet with a reason or an open version"},
        {"{\"committed_version\": 5, \"usable\": false, \"reason\": \"\", "
         "\"open_version\": 0}",
         "unusable without a reason"},
        {"{\"committed_version\": 5, \"usable\": true, \"reason\": \"\", "
         "\"open_version\": 0, \"committed_label\": 7}",
         "\"committed_label\" is not a string"},
        {"{\"committed_version\": 5, \"usable\": true, \"reason\": \"\", "
         "\"open_version\": 0, \"committed_label\": \"step 5\"}",
         "\"committed_label\": label \"step?5\": byte 4 is 0x20"},
        {"{\"committed_version\": 5, \"usable\": true, \"reason\": \"\", "
         "\"open_version\": 0, \"committed_label\": \"a\\u0000b\"}",
         "\"committed_label\": label \"a?b\": byte 1 is 0x00"},
        {"{\"committed_version\": 5, \"usable\": true, \"reason\": \"\", "
         "\"open_version\": 0, \"committed_label\": "
         "\"0123456789012345678901234567890123456789012345678901234567890123\""
         "}",
         "\"committed_label\": label \"0123456789012345678901234567890123456"
         "78901234567890123456789012...\": 64 bytes, at most 63"},
    };
    struct dir_case *c = *state;
    char err[512], want[512];

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct wst_agent_state out = {.committed_version = 42};
        int found = 7;
        write_text(c->path, cases[i].text);
        wst_status_t st =
            wst_state_store_load(c->path, &out, &found, err, sizeof(err));
        snprintf(want, sizeof(want), "state file %s: %s", c->path,
                 cases[i].why);
        if (st != WST_ERR_CONFIG || strstr(err, want) == NULL)
            fail_msg("'%s': %s, '%s'; expected '%s'", cases[i].text,
                     wst_status_string(st), err, want);
        assert_true(out.committed_version == 42 && found == 7);
    }
}

static void test_too_long(void **state)
{
    struct dir_case *c = *state;
    struct wst_agent_state out;
    char err[512];
    int found;
    size_t n = 70000;
    char *text = malloc(n + 1);

    assert_non_null(text);
    memset(text, ' ', n);
    text[n] = '\0';
    write_text(c->path, text);
    free(text);
    assert_int_equal(
        wst_state_store_load(c->path, &out, &found, err, sizeof(err)),
        WST_ERR_CONFIG);
    assert_non_null(strstr(err, "more than 65536 bytes"));
}

static void test_save_fails_naming_the_file(void **state)
{
    struct dir_case *c = *state;
    struct wst_agent_state in = {.usable = 1};
    char path[400], err[512];

    snprintf(path, sizeof(path), "%s/no/such/dir/agent.state", c->dir);
    assert_int_equal(wst_state_store_save(path, &in, err, sizeof(err)),
                     WST_ERR_IO);
    assert_non_null(strstr(err, path));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_round_trip, setup, teardown),
        cmocka_unit_test_setup_teardown(test_file_without_label, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_missing_is_fresh, setup, teardown),
        cmocka_unit_test_setup_teardown(test_refusals, setup, teardown),
        cmocka_unit_test_setup_teardown(test_too_long, setup, teardown),
        cmocka_unit_test_setup_teardown(test_save_fails_naming_the_file, setup,
                                        teardown),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
