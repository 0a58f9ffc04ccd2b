/* test_status.c - status codes (include/wstream/status.h) and dtype tables. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include <wstream/status.h>

#include "dtype.h"

struct status_row {
    int value;
    const char *name;
    const char *msg;
};

static const struct status_row status_rows[] = {
#define STATUS_ROW_(name, value, msg) {value, #name, msg},
    WST_STATUS_LIST(STATUS_ROW_)
#undef STATUS_ROW_
};

#define NSTATUS (sizeof(status_rows) / sizeof(status_rows[0]))

struct dtype_row {
    enum wst_dtype id;
    int value;
    const char *name;
    size_t size;
};

static const struct dtype_row dtype_rows[] = {
#define DTYPE_ROW_(id, value, str, size) {id, value, str, size},
    WST_DTYPE_LIST(DTYPE_ROW_)
#undef DTYPE_ROW_
};

#define NDTYPE (sizeof(dtype_rows) / sizeof(dtype_rows[0]))

static void test_status_values_distinct(void **state)
{
    size_t i, j;

    (void)state;
    assert_int_equal(WST_OK, 0);
    assert_int_equal(WST_INPROGRESS, 1);
    for (i = 0; i < NSTATUS; i++) {
        if (i >= 2)
            assert_true(status_rows[i].value < 0);
        for (j = i + 1; j < NSTATUS; j++)
            assert_int_not_equal(status_rows[i].value, status_rows[j].value);
    }
}

static void test_status_messages_and_names(void **state)
{
    size_t i, j;

    (void)state;
    for (i = 0; i < NSTATUS; i++) {
        wst_status_t s = (wst_status_t)status_rows[i].value;
        const char *msg = wst_status_string(s);
        const char *name = wst_status_name(s);

        assert_non_null(msg);
        assert_true(strlen(msg) > 0);
        assert_string_equal(msg, status_rows[i].msg);
        assert_string_not_equal(msg, "unknown status");
        assert_non_null(name);
        assert_string_equal(name, status_rows[i].name);
        assert_true(wst_status_is_known(status_rows[i].value));
        for (j = i + 1; j < NSTATUS; j++)
            assert_string_not_equal(name, status_rows[j].name);
    }
}

static int status_listed(int value)
{
    size_t i;

    for (i = 0; i < NSTATUS; i++) {
        if (status_rows[i].value == value)
            return 1;
    }
    return 0;
}

static void test_status_unknown_values(void **state)
{
    static const int probes[] = {2, 3, 100, -1000, INT32_MIN, INT32_MAX};
    size_t i;
    int v;

    (void)state;
    for (i = 0; i < sizeof(probes) / sizeof(probes[0]); i++) {
        assert_false(status_listed(probes[i]));
        assert_string_equal(wst_status_string((wst_status_t)probes[i]),
                            "unknown status");
        assert_null(wst_status_name((wst_status_t)probes[i]));
        assert_false(wst_status_is_known(probes[i]));
    }
    /* Just past both ends of the list. */
    for (v = -200; v <= 200; v++)
        assert_int_equal(!!wst_status_is_known(v), status_listed(v));
}

static void test_status_dtype_round_trip(void **state)
{
    size_t i;

    (void)state;
    for (i = 0; i < NDTYPE; i++) {
        const struct dtype_row *r = &dtype_rows[i];

        assert_int_equal((int)r->id, r->value);
        assert_int_equal(wst_dtype_size(r->id), r->size);
        assert_true(r->size > 0);
        assert_string_equal(wst_dtype_name(r->id), r->name);
        assert_int_equal(wst_dtype_parse(r->name), r->id);
        assert_int_equal(wst_dtype_parse(wst_dtype_name(r->id)), r->id);
        assert_true(wst_dtype_is_valid(r->value));
    }
}

static void test_status_dtype_invalid(void **state)
{
    static const int bad[] = {0, -1, 11, 255, 1000};
    static const char *const bad_names[] = {"",   "BF16",    "bf16 ", "float",
                                            "f8", "invalid", "i16"};
    size_t i;

    (void)state;
    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_int_equal(wst_dtype_size((enum wst_dtype)bad[i]), 0);
        assert_string_equal(wst_dtype_name((enum wst_dtype)bad[i]), "invalid");
        assert_false(wst_dtype_is_valid(bad[i]));
    }
    for (i = 0; i < sizeof(bad_names) / sizeof(bad_names[0]); i++)
        assert_int_equal(wst_dtype_parse(bad_names[i]), WST_DTYPE_INVALID);
}

static void test_status_mem_type_names(void **state)
{
    (void)state;
    assert_string_equal(wst_mem_type_name(WST_MEM_HOST), "host");
    assert_string_equal(wst_mem_type_name(WST_MEM_CUDA), "cuda");
    assert_string_equal(wst_mem_type_name((enum wst_mem_type)0), "invalid");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_status_values_distinct),
        cmocka_unit_test(test_status_messages_and_names),
        cmocka_unit_test(test_status_unknown_values),
        cmocka_unit_test(test_status_dtype_round_trip),
        cmocka_unit_test(test_status_dtype_invalid),
        cmocka_unit_test(test_status_mem_type_names),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
