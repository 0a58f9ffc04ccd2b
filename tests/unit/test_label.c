/* test_label.c - the rule a version's label is checked by
 * (common/label.h): what passes, and the message for what does not. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "label.h"

static wst_status_t check(const char *s, size_t len, char *err, size_t n)
{
    if (err != NULL)
        err[0] = '\0';
    return wst_label_check(s, len, err, n);
}

static void test_label_accepts_printable_without_spaces(void **state)
{
    char err[256], longest[WST_LABEL_MAX];

    (void)state;
    assert_int_equal(check("", 0, err, sizeof(err)), WST_OK);
    assert_int_equal(check("step-1200", 9, err, sizeof(err)), WST_OK);
    const char *odd = "run/7@abc123:\"x\\y\"{}~!";
    assert_int_equal(check(odd, strlen(odd), err, sizeof(err)), WST_OK);
    memset(longest, '~', WST_LABEL_MAX - 1);
    longest[WST_LABEL_MAX - 1] = '\0';
    assert_int_equal(check(longest, WST_LABEL_MAX - 1, err, sizeof(err)),
                     WST_OK);
    assert_string_equal(err, "");
}

static void test_label_refuses_long_spaces_and_control_bytes(void **state)
{
    char err[256], big[WST_LABEL_MAX + 1];

    (void)state;
    memset(big, 'a', sizeof(big));
    assert_int_equal(check(big, WST_LABEL_MAX, err, sizeof(err)),
                     WST_ERR_INVALID);
    assert_non_null(strstr(err, "64 bytes, at most 63"));
    assert_int_equal(check("step 12", 7, err, sizeof(err)), WST_ERR_INVALID);
    assert_string_equal(err, "label \"step?12\": byte 4 is 0x20; a label is "
                             "printable ASCII without spaces (0x21..0x7e)");
    assert_int_equal(check("a\nb", 3, err, sizeof(err)), WST_ERR_INVALID);
    assert_non_null(strstr(err, "byte 1 is 0x0a"));
    assert_int_equal(check("ab\0c", 4, err, sizeof(err)), WST_ERR_INVALID);
    assert_non_null(strstr(err, "byte 2 is 0x00"));
    assert_int_equal(check("\x7f", 1, err, sizeof(err)), WST_ERR_INVALID);
    assert_int_equal(check("caf\xc3\xa9", 5, err, sizeof(err)),
                     WST_ERR_INVALID);
    assert_non_null(strstr(err, "byte 3 is 0xc3"));
    assert_int_equal(check("\t", 1, NULL, 0), WST_ERR_INVALID);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_label_accepts_printable_without_spaces),
        cmocka_unit_test(test_label_refuses_long_spaces_and_control_bytes),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
