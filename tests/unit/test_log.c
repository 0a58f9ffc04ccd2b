/* test_log.c - log lines as text and as JSON (common/log.h): every JSON
 * line parses (json-c, an independent parser) back to the fields and the
 * exact message, whatever bytes the message holds. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include <json-c/json.h>

#include "log.h"

/* One emitted line, read back from a memory stream. */
static void emit(enum wst_log_format format, const char *name, int level,
                 const char *msg, char *out, size_t len)
{
    FILE *f = fmemopen(out, len, "w");

    assert_non_null(f);
    memset(out, 0, len);
    wst_log_emit(f, format, name, level, msg);
    fclose(f);
}

static json_object *parse_line(const char *line)
{
    size_t n = strlen(line);

    assert_true(n > 0 && line[n - 1] == '\n');
    assert_null(strchr(line, '\n') != line + n - 1 ? "two lines" : NULL);
    json_object *o = json_tokener_parse(line);
    if (o == NULL)
        fail_msg("not JSON: %s", line);
    return o;
}

static const char *field(json_object *o, const char *key)
{
    json_object *v = NULL;

    assert_true(json_object_object_get_ex(o, key, &v));
    return json_object_get_string(v);
}

static void test_log_json_fields(void **state)
{
    char out[4096];

    (void)state;
    emit(WST_LOG_FORMAT_JSON, "agent[3]", WST_LOG_WARN, "layer 7 late", out,
         sizeof(out));
    json_object *o = parse_line(out);
    assert_string_equal(field(o, "level"), "warn");
    assert_string_equal(field(o, "component"), "agent[3]");
    assert_string_equal(field(o, "msg"), "layer 7 late");
    json_object *ts = NULL;
    assert_true(json_object_object_get_ex(o, "ts", &ts));
    assert_true(json_object_is_type(ts, json_type_double));
    assert_true(json_object_get_double(ts) > 1.6e9); /* seconds since 1970 */
    const char *stamp = strstr(out, "\"ts\":");
    assert_non_null(stamp);
    assert_int_equal(strspn(stamp + 5, "0123456789."), 10 + 1 + 6);
    json_object_put(o);
    emit(WST_LOG_FORMAT_JSON, NULL, WST_LOG_ERROR, "x", out, sizeof(out));
    o = parse_line(out);
    assert_string_equal(field(o, "component"), "-");
    assert_string_equal(field(o, "level"), "error");
    json_object_put(o);
}

static void test_log_json_escapes_everything(void **state)
{
    char out[8192];
    /* Quotes, backslashes, newlines, tabs, other control bytes, DEL,
     * valid UTF-8 (2, 3 and 4 bytes) pass through to the same string. */
    const char *msg = "tensor \"a\\b\"\nline\ttab \x01\x1f\x7f "
                      "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80";

    (void)state;
    emit(WST_LOG_FORMAT_JSON, "r\"x", WST_LOG_INFO, msg, out, sizeof(out));
    json_object *o = parse_line(out);
    assert_string_equal(field(o, "msg"), msg);
    assert_string_equal(field(o, "component"), "r\"x");
    json_object_put(o);
}

static void test_log_json_invalid_utf8_stays_json(void **state)
{
    char out[4096];
    /* A lone continuation byte, a truncated sequence, 0xff: each becomes
     * the code point of its value, so the line still parses. */
    const char *msg = "bad \x80 \xe2\x82 end \xff";

    (void)state;
    emit(WST_LOG_FORMAT_JSON, "n", WST_LOG_INFO, msg, out, sizeof(out));
    assert_non_null(strstr(out, "\\u0080"));
    assert_non_null(strstr(out, "\\u00ff"));
    json_object *o = parse_line(out);
    assert_string_equal(field(o, "msg"),
                        "bad \xc2\x80 \xc3\xa2\xc2\x82 end \xc3\xbf");
    json_object_put(o);
}

static void test_log_json_message_of_quotes_comes_back_whole(void **state)
{
    char msg[1024], out[16384];

    (void)state;
    memset(msg, '"', sizeof(msg) - 1); /* every byte doubles when escaped */
    msg[sizeof(msg) - 1] = '\0';
    emit(WST_LOG_FORMAT_JSON, "n", WST_LOG_INFO, msg, out, sizeof(out));
    json_object *o = parse_line(out);
    assert_string_equal(field(o, "msg"), msg);
    json_object_put(o);
}

static void test_log_text_shape(void **state)
{
    char out[4096];

    (void)state;
    emit(WST_LOG_FORMAT_TEXT, "sender[1]", WST_LOG_INFO, "hello", out,
         sizeof(out));
    /* "<s>.<us> wstream[sender[1]] info: hello\n" */
    char *sp = strchr(out, ' ');
    assert_non_null(sp);
    assert_string_equal(sp, " wstream[sender[1]] info: hello\n");
    assert_true(strspn(out, "0123456789.") == (size_t)(sp - out));
    char *dot = strchr(out, '.');
    assert_true(dot != NULL && dot < sp);
    assert_int_equal(sp - dot - 1, 6); /* microseconds */
}

static void test_log_stream_sink(void **state)
{
    char out[4096];
    FILE *f = fmemopen(out, sizeof(out), "w");
    struct wst_log_stream s = {.format = WST_LOG_FORMAT_JSON, .name = "a"};
    struct wst_logger lg;

    (void)state;
    memset(out, 0, sizeof(out));
    s.out = f;
    wst_logger_init(&lg, "ignored", WST_LOG_INFO);
    lg.sink = wst_log_stream_sink;
    lg.sink_arg = &s;
    WST_INFO(&lg, "n=%d", 42);
    WST_DEBUG(&lg, "filtered"); /* below the level: not written */
    fclose(f);
    json_object *o = parse_line(out);
    assert_string_equal(field(o, "msg"), "n=42");
    assert_string_equal(field(o, "component"), "a");
    json_object_put(o);
}

/* One table: names by level, parse the inverse, NULL after the last one
 * (the choices of a config enum), nothing else accepted. */
static void test_log_level_names(void **state)
{
    static const char *const want[] = {"error", "warn", "info", "debug",
                                       "trace"};

    (void)state;
    for (int i = WST_LOG_ERROR; i <= WST_LOG_TRACE; i++) {
        assert_string_equal(wst_log_level_names[i], want[i]);
        assert_string_equal(wst_log_level_name((enum wst_log_level)i), want[i]);
        assert_int_equal(wst_log_level_parse(want[i]), i);
    }
    assert_null(wst_log_level_names[WST_LOG_TRACE + 1]);
    assert_string_equal(wst_log_level_name((enum wst_log_level)5), "?");
    assert_int_equal(wst_log_level_parse("WARN"), -1);
    assert_int_equal(wst_log_level_parse("warning"), -1);
    assert_int_equal(wst_log_level_parse(""), -1);
    assert_int_equal(wst_log_level_parse(NULL), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_log_json_fields),
        cmocka_unit_test(test_log_json_escapes_everything),
        cmocka_unit_test(test_log_json_invalid_utf8_stays_json),
        cmocka_unit_test(test_log_json_message_of_quotes_comes_back_whole),
        cmocka_unit_test(test_log_text_shape),
        cmocka_unit_test(test_log_stream_sink),
        cmocka_unit_test(test_log_level_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
