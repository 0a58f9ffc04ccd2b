/* test_config.c - table-driven settings: defaults, environment, flags. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"

struct test_settings {
    char *listen;
    uint64_t refits;
    double ratio;
    int verbose;
    int mode;
};

static const char *const mode_choices[] = {"auto", "push", "pull", NULL};

static const struct wst_config_entry table[] = {
    {"listen", WST_CONFIG_STRING, "0.0.0.0:7070", "address to listen on",
     offsetof(struct test_settings, listen), NULL, NULL},
    {"refits", WST_CONFIG_UINT, "4", "refits to keep",
     offsetof(struct test_settings, refits), NULL, NULL},
    {"ratio", WST_CONFIG_DOUBLE, "0.5", "fraction of staging",
     offsetof(struct test_settings, ratio), NULL, NULL},
    {"verbose", WST_CONFIG_BOOL, "no", "log more",
     offsetof(struct test_settings, verbose), NULL, NULL},
    {"mode", WST_CONFIG_ENUM, "auto", "transfer mode",
     offsetof(struct test_settings, mode), mode_choices, NULL},
    WST_CONFIG_END,
};

static const char *const env_names[] = {"WST_LISTEN", "WST_REFITS", "WST_RATIO",
                                        "WST_VERBOSE", "WST_MODE"};

struct fixture {
    struct test_settings s;
    char err[256];
};

static void clear_env(void)
{
    size_t i;

    for (i = 0; i < sizeof(env_names) / sizeof(env_names[0]); i++)
        unsetenv(env_names[i]);
}

static int setup(void **state)
{
    struct fixture *f = calloc(1, sizeof(*f));

    if (f == NULL)
        return -1;
    clear_env();
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;

    wst_config_release(table, &f->s);
    free(f);
    clear_env();
    return 0;
}

/* Loads defaults (and whatever WST_* is set) or fails the test. */
static void load(struct fixture *f)
{
    wst_status_t st = wst_config_defaults(table, &f->s, f->err, sizeof(f->err));

    if (st != WST_OK)
        fail_msg("defaults: %s", f->err);
}

static wst_status_t parse(struct fixture *f, int argc, char **argv, int *next)
{
    return wst_config_parse_args(table, &f->s, argc, argv, next, f->err,
                                 sizeof(f->err));
}

static wst_status_t set(struct fixture *f, const char *name, const char *value)
{
    return wst_config_set(table, &f->s, name, value, f->err, sizeof(f->err));
}

static void test_config_defaults_applied(void **state)
{
    struct fixture *f = *state;

    load(f);
    assert_string_equal(f->s.listen, "0.0.0.0:7070");
    assert_int_equal(f->s.refits, 4);
    assert_true(f->s.ratio == 0.5);
    assert_int_equal(f->s.verbose, 0);
    assert_int_equal(f->s.mode, 0);
}

static void test_config_env_overrides_default(void **state)
{
    struct fixture *f = *state;

    setenv("WST_LISTEN", "10.0.0.7:9000", 1);
    setenv("WST_REFITS", "16", 1);
    setenv("WST_RATIO", "0.25", 1);
    setenv("WST_VERBOSE", "on", 1);
    setenv("WST_MODE", "pull", 1);
    load(f);
    assert_string_equal(f->s.listen, "10.0.0.7:9000");
    assert_int_equal(f->s.refits, 16);
    assert_true(f->s.ratio == 0.25);
    assert_int_equal(f->s.verbose, 1);
    assert_int_equal(f->s.mode, 2);
}

static void test_config_env_bad_value_names_variable(void **state)
{
    struct fixture *f = *state;

    setenv("WST_REFITS", "lots", 1);
    assert_int_equal(wst_config_defaults(table, &f->s, f->err, sizeof(f->err)),
                     WST_ERR_CONFIG);
    assert_non_null(strstr(f->err, "WST_REFITS"));
    assert_non_null(strstr(f->err, "'lots'"));
}

static void test_config_argv_beats_env(void **state)
{
    struct fixture *f = *state;
    char *argv[] = {"prog", "--refits", "7", "--listen=host:1", NULL};
    int next = -1;

    setenv("WST_REFITS", "16", 1);
    setenv("WST_LISTEN", "env:2", 1);
    load(f);
    assert_int_equal(f->s.refits, 16);
    assert_int_equal(parse(f, 4, argv, &next), WST_OK);
    assert_int_equal(next, 4);
    assert_int_equal(f->s.refits, 7);
    assert_string_equal(f->s.listen, "host:1");
}

static void test_config_both_flag_syntaxes(void **state)
{
    struct fixture *f = *state;
    char *argv[] = {"prog",       "--ratio=0.75", "--mode", "push",
                    "--refits=3", "--listen",     "a:1",    NULL};
    int next = -1;

    load(f);
    assert_int_equal(parse(f, 7, argv, &next), WST_OK);
    assert_int_equal(next, 7);
    assert_true(f->s.ratio == 0.75);
    assert_int_equal(f->s.mode, 1);
    assert_int_equal(f->s.refits, 3);
    assert_string_equal(f->s.listen, "a:1");
}

static void test_config_bool_flag_alone(void **state)
{
    struct fixture *f = *state;
    char *argv[] = {"prog", "--verbose", "--refits", "2", NULL};
    char *argv_no[] = {"prog", "--verbose=off", NULL};
    int next = -1;

    load(f);
    assert_int_equal(parse(f, 4, argv, &next), WST_OK);
    assert_int_equal(f->s.verbose, 1);
    assert_int_equal(f->s.refits, 2);
    assert_int_equal(next, 4);
    assert_int_equal(parse(f, 2, argv_no, &next), WST_OK);
    assert_int_equal(f->s.verbose, 0);
}

static void test_config_bool_spellings(void **state)
{
    struct fixture *f = *state;
    static const char *const yes[] = {"y", "yes", "true", "1", "on", "YES"};
    static const char *const no[] = {"n", "no", "false", "0", "off", "Off"};
    size_t i;

    load(f);
    for (i = 0; i < sizeof(yes) / sizeof(yes[0]); i++) {
        f->s.verbose = 0;
        assert_int_equal(set(f, "verbose", yes[i]), WST_OK);
        assert_int_equal(f->s.verbose, 1);
        f->s.verbose = 1;
        assert_int_equal(set(f, "verbose", no[i]), WST_OK);
        assert_int_equal(f->s.verbose, 0);
    }
    assert_int_equal(set(f, "verbose", "maybe"), WST_ERR_CONFIG);
    assert_non_null(strstr(f->err, "--verbose"));
    assert_non_null(strstr(f->err, "'maybe'"));
    assert_int_equal(set(f, "verbose", ""), WST_ERR_CONFIG);
}

static void test_config_uint_suffixes(void **state)
{
    struct fixture *f = *state;

    load(f);
    assert_int_equal(set(f, "refits", "0"), WST_OK);
    assert_int_equal(f->s.refits, 0);
    assert_int_equal(set(f, "refits", "3k"), WST_OK);
    assert_int_equal(f->s.refits, 3 * 1024);
    assert_int_equal(set(f, "refits", "5m"), WST_OK);
    assert_int_equal(f->s.refits, 5ull << 20);
    assert_int_equal(set(f, "refits", "7g"), WST_OK);
    assert_int_equal(f->s.refits, 7ull << 30);
    assert_int_equal(set(f, "refits", "2G"), WST_OK);
    assert_int_equal(f->s.refits, 2ull << 30);
    assert_int_equal(set(f, "refits", "18446744073709551615"), WST_OK);
    assert_true(f->s.refits == UINT64_MAX);
}

static void test_config_uint_overflow_rejected(void **state)
{
    struct fixture *f = *state;
    static const char *const bad[] = {"18446744073709551616",
                                      "99999999999999999999999", "17179869184g",
                                      "18014398509481984k"};
    size_t i;

    load(f);
    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_int_equal(set(f, "refits", bad[i]), WST_ERR_CONFIG);
        assert_int_equal(f->s.refits, 4); /* unchanged */
        assert_non_null(strstr(f->err, "--refits"));
        assert_non_null(strstr(f->err, bad[i]));
    }
    /* Largest values that still fit. */
    assert_int_equal(set(f, "refits", "17179869183g"), WST_OK);
    assert_true(f->s.refits == 17179869183ull << 30);
}

static void test_config_uint_junk_rejected(void **state)
{
    struct fixture *f = *state;
    static const char *const bad[] = {"",   "x1",  "1x",   "-1",  "+1", " 1",
                                      "1 ", "1kk", "0x10", "1.5", "k",  "1t"};
    size_t i;

    load(f);
    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_int_equal(set(f, "refits", bad[i]), WST_ERR_CONFIG);
        assert_int_equal(f->s.refits, 4);
    }
    assert_int_equal(set(f, "refits", "x1"), WST_ERR_CONFIG);
    assert_string_equal(
        f->err, "--refits: bad value 'x1': expected an unsigned integer");
}

static void test_config_double_rejects_junk(void **state)
{
    struct fixture *f = *state;
    static const char *const bad[] = {"",    "abc", "1.5x", " 1",
                                      "inf", "nan", "1e999"};
    size_t i;

    load(f);
    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_int_equal(set(f, "ratio", bad[i]), WST_ERR_CONFIG);
        assert_true(f->s.ratio == 0.5);
    }
    assert_non_null(strstr(f->err, "--ratio"));
    assert_int_equal(set(f, "ratio", "-2.5e1"), WST_OK);
    assert_true(f->s.ratio == -25.0);
}

static void test_config_enum_unknown_rejected(void **state)
{
    struct fixture *f = *state;
    char *argv[] = {"prog", "--mode=sideways", NULL};

    load(f);
    assert_int_equal(parse(f, 2, argv, NULL), WST_ERR_CONFIG);
    assert_int_equal(f->s.mode, 0);
    assert_non_null(strstr(f->err, "--mode"));
    assert_non_null(strstr(f->err, "'sideways'"));
    assert_non_null(strstr(f->err, "auto, push, pull"));
    assert_int_equal(set(f, "mode", "PUSH"), WST_ERR_CONFIG);
    assert_int_equal(set(f, "mode", ""), WST_ERR_CONFIG);
}

static void test_config_unknown_flag_rejected(void **state)
{
    struct fixture *f = *state;
    char *argv[] = {"prog", "--refits", "2", "--colour=red", NULL};
    char *argv_short[] = {"prog", "-v", NULL};
    int next = -1;

    load(f);
    assert_int_equal(parse(f, 4, argv, &next), WST_ERR_CONFIG);
    assert_int_equal(next, -1); /* written only on success */
    assert_non_null(strstr(f->err, "--colour"));
    assert_int_equal(parse(f, 2, argv_short, &next), WST_ERR_CONFIG);
    assert_non_null(strstr(f->err, "-v"));
    assert_int_equal(set(f, "colour", "red"), WST_ERR_CONFIG);
    assert_non_null(strstr(f->err, "colour"));
}

static void test_config_missing_value_rejected(void **state)
{
    struct fixture *f = *state;
    char *argv[] = {"prog", "--refits", NULL};

    load(f);
    assert_int_equal(parse(f, 2, argv, NULL), WST_ERR_CONFIG);
    assert_non_null(strstr(f->err, "--refits"));
}

static void test_config_stops_at_first_operand(void **state)
{
    struct fixture *f = *state;
    char *argv[] = {"prog", "--refits=9", "run", "--refits=1", NULL};
    char *argv_dash[] = {"prog", "--verbose", "--", "--refits=1", NULL};
    char *argv_none[] = {"prog", NULL};
    char *argv_stdin[] = {"prog", "-", "x", NULL};
    int next = -1;

    load(f);
    assert_int_equal(parse(f, 4, argv, &next), WST_OK);
    assert_int_equal(next, 2);
    assert_int_equal(f->s.refits, 9);
    assert_int_equal(parse(f, 4, argv_dash, &next), WST_OK);
    assert_int_equal(next, 3);
    assert_int_equal(f->s.refits, 9);
    assert_int_equal(f->s.verbose, 1);
    assert_int_equal(parse(f, 1, argv_none, &next), WST_OK);
    assert_int_equal(next, 1);
    assert_int_equal(parse(f, 3, argv_stdin, &next), WST_OK);
    assert_int_equal(next, 1);
}

static void test_config_has_flag(void **state)
{
    char *argv[] = {"prog", "--refits=2", "--print-config",
                    "--",   "--help",     NULL};

    (void)state;
    assert_true(wst_config_has_flag(5, argv, "--print-config"));
    assert_true(wst_config_has_flag(5, argv, "print-config"));
    assert_false(wst_config_has_flag(5, argv, "--help")); /* after "--" */
    assert_false(wst_config_has_flag(5, argv, "--refits"));
    assert_false(wst_config_has_flag(1, argv, "--print-config"));
}

/* A bug fix: parse_args refused --print-config, so no CLI could print its
 * configuration. Both caller-handled flags are skipped, others still
 * apply. */
static void test_config_parse_skips_help_and_print_config(void **state)
{
    struct fixture *f = *state;
    char *argv[] = {"prog", "--print-config", "--refits=4", "--help", NULL};
    int next = 0;

    load(f);
    assert_int_equal(parse(f, 4, argv, &next), WST_OK);
    assert_int_equal(next, 4);
    assert_int_equal(f->s.refits, 4);
}

static char *capture_print(const struct test_settings *s, int help)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&buf, &len);

    assert_non_null(out);
    if (help)
        wst_config_print_help(table, out);
    else
        wst_config_print(table, s, out);
    assert_int_equal(fclose(out), 0);
    return buf;
}

static void test_config_print_exact(void **state)
{
    struct fixture *f = *state;
    char *argv[] = {"prog", "--verbose", "--mode=pull", "--refits=2k", NULL};
    char *text;

    load(f);
    text = capture_print(&f->s, 0);
    assert_string_equal(text, "listen = 0.0.0.0:7070\n"
                              "refits = 4\n"
                              "ratio = 0.5\n"
                              "verbose = no\n"
                              "mode = auto\n");
    free(text);

    assert_int_equal(parse(f, 4, argv, NULL), WST_OK);
    text = capture_print(&f->s, 0);
    assert_string_equal(text, "listen = 0.0.0.0:7070\n"
                              "refits = 2048\n"
                              "ratio = 0.5\n"
                              "verbose = yes\n"
                              "mode = pull\n");
    free(text);
}

static void test_config_print_help_exact(void **state)
{
    char *text;

    (void)state;
    text = capture_print(NULL, 1);
    assert_string_equal(
        text,
        "  --listen VALUE          address to listen on "
        "(default: 0.0.0.0:7070, env WST_LISTEN)\n"
        "  --refits N              refits to keep (default: 4, env "
        "WST_REFITS)\n"
        "  --ratio X               fraction of staging "
        "(default: 0.5, env WST_RATIO)\n"
        "  --verbose[=yes|no]      log more (default: no, env WST_VERBOSE)\n"
        "  --mode auto|push|pull   transfer mode "
        "(default: auto, env WST_MODE)\n");
    free(text);
}

static void test_config_release_frees_strings(void **state)
{
    struct fixture *f = *state;
    char *argv[] = {"prog", "--listen", "a:1", "--listen=b:2", NULL};

    setenv("WST_LISTEN", "env:3", 1);
    load(f);
    /* Each overwrite frees the previous copy; valgrind checks for leaks. */
    assert_int_equal(parse(f, 4, argv, NULL), WST_OK);
    assert_int_equal(set(f, "listen", "c:3"), WST_OK);
    assert_string_equal(f->s.listen, "c:3");
    wst_config_release(table, &f->s);
    assert_null(f->s.listen);
    wst_config_release(table, &f->s); /* twice is harmless */
}

/* A library starts from its table's defaults, whatever WST_* says. */
static void test_config_init_reads_no_environment(void **state)
{
    struct fixture *f = *state;

    setenv("WST_REFITS", "9", 1);
    setenv("WST_MODE", "pull", 1);
    assert_int_equal(wst_config_init(table, &f->s, f->err, sizeof(f->err)),
                     WST_OK);
    assert_int_equal(f->s.refits, 4);
    assert_int_equal(f->s.mode, 0);
    assert_string_equal(f->s.listen, "0.0.0.0:7070");
}

/* A program's flags for a library's settings (above: 'table'): each is
 * like the library's entry, under its own name and offset. */
struct prog_settings {
    int debug;
    uint64_t keep;
    int transfer;
    char *addr;
};

static const struct wst_config_entry prog_table[] = {
    {"debug", WST_CONFIG_BOOL, "no", "debug output",
     offsetof(struct prog_settings, debug), NULL, NULL},
    WST_CONFIG_LIKE_ENTRY("keep", NULL, offsetof(struct prog_settings, keep),
                          &table[1]),
    WST_CONFIG_LIKE_ENTRY("transfer", "how data moves",
                          offsetof(struct prog_settings, transfer), &table[4]),
    WST_CONFIG_LIKE_ENTRY("addr", NULL, offsetof(struct prog_settings, addr),
                          &table[0]),
    WST_CONFIG_END,
};

static void test_config_like_takes_definition(void **state)
{
    struct prog_settings p;
    char err[256] = "", *text = NULL;
    size_t len = 0;
    char *argv[] = {"prog", "--transfer=pull", "--addr", "h:1", NULL};
    FILE *out;

    (void)state;
    setenv("WST_KEEP", "2k", 1); /* its own name, like's type */
    assert_int_equal(wst_config_defaults(prog_table, &p, err, sizeof(err)),
                     WST_OK);
    unsetenv("WST_KEEP");
    assert_int_equal(p.keep, 2048);
    assert_int_equal(p.transfer, 0);
    assert_string_equal(p.addr, "0.0.0.0:7070");
    assert_int_equal(
        wst_config_parse_args(prog_table, &p, 4, argv, NULL, err, sizeof(err)),
        WST_OK);
    assert_int_equal(p.transfer, 2);
    assert_string_equal(p.addr, "h:1");
    assert_int_equal(wst_config_set(prog_table, &p, "transfer", "sideways", err,
                                    sizeof(err)),
                     WST_ERR_CONFIG);
    assert_string_equal(err, "--transfer: bad value 'sideways': expected one "
                             "of auto, push, pull");

    out = open_memstream(&text, &len);
    assert_non_null(out);
    wst_config_print(prog_table, &p, out);
    wst_config_print_help(prog_table, out);
    assert_int_equal(fclose(out), 0);
    assert_string_equal(
        text, "debug = no\n"
              "keep = 2048\n"
              "transfer = pull\n"
              "addr = h:1\n"
              "  --debug[=yes|no]            debug output (default: no, env "
              "WST_DEBUG)\n"
              "  --keep N                    refits to keep (default: 4, env "
              "WST_KEEP)\n"
              "  --transfer auto|push|pull   how data moves (default: auto, "
              "env WST_TRANSFER)\n"
              "  --addr VALUE                address to listen on (default: "
              "0.0.0.0:7070, env WST_ADDR)\n");
    free(text);
    wst_config_release(prog_table, &p);
    assert_null(p.addr);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
#define CASE(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)
        CASE(test_config_defaults_applied),
        CASE(test_config_env_overrides_default),
        CASE(test_config_env_bad_value_names_variable),
        CASE(test_config_argv_beats_env),
        CASE(test_config_both_flag_syntaxes),
        CASE(test_config_bool_flag_alone),
        CASE(test_config_bool_spellings),
        CASE(test_config_uint_suffixes),
        CASE(test_config_uint_overflow_rejected),
        CASE(test_config_uint_junk_rejected),
        CASE(test_config_double_rejects_junk),
        CASE(test_config_enum_unknown_rejected),
        CASE(test_config_unknown_flag_rejected),
        CASE(test_config_missing_value_rejected),
        CASE(test_config_stops_at_first_operand),
        CASE(test_config_has_flag),
        CASE(test_config_parse_skips_help_and_print_config),
        CASE(test_config_print_exact),
        CASE(test_config_print_help_exact),
        CASE(test_config_release_frees_strings),
        CASE(test_config_init_reads_no_environment),
        CASE(test_config_like_takes_definition),
#undef CASE
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
