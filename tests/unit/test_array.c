/* test_array.c - growing heap arrays by doubling (common/array.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>

#include "array.h"

struct pair {
    uint64_t a, b;
};

/* Appending one at a time keeps every element and grows by doubling. */
static void test_array_append_keeps_elements(void **state)
{
    struct pair *v = NULL;
    size_t n = 0, cap = 0, grows = 0, last_cap = 0;

    (void)state;
    for (uint64_t i = 0; i < 1000; i++) {
        assert_int_equal(wst_array_grow(&v, &cap, n + 1, sizeof(*v)), WST_OK);
        assert_true(cap >= n + 1);
        if (cap != last_cap) {
            grows++;
            if (last_cap != 0)
                assert_int_equal(cap, 2 * last_cap);
            last_cap = cap;
        }
        v[n++] = (struct pair){i, ~i};
    }
    for (uint64_t i = 0; i < n; i++) {
        assert_int_equal(v[i].a, i);
        assert_int_equal(v[i].b, ~i);
    }
    assert_int_equal(cap, 1024);
    assert_int_equal(grows, 8); /* 8, 16, ..., 1024 */
    free(v);
}

/* Room already there: nothing moves; a large need jumps straight there. */
static void test_array_room_and_jump(void **state)
{
    char *v = NULL, *before;
    size_t cap = 0;

    (void)state;
    assert_int_equal(wst_array_grow(&v, &cap, 0, 1), WST_OK);
    assert_null(v);
    assert_int_equal(cap, 0);
    assert_int_equal(wst_array_grow(&v, &cap, 5, 1), WST_OK);
    assert_int_equal(cap, 8);
    before = v;
    assert_int_equal(wst_array_grow(&v, &cap, 8, 1), WST_OK);
    assert_ptr_equal(v, before);
    assert_int_equal(cap, 8);
    assert_int_equal(wst_array_grow(&v, &cap, 1000, 1), WST_OK);
    assert_int_equal(cap, 1024);
    v[999] = 'x';
    free(v);
}

/* A size that cannot be allocated, or would overflow, leaves the array. */
static void test_array_overflow_untouched(void **state)
{
    uint64_t *v = NULL;
    size_t cap = 0;

    (void)state;
    assert_int_equal(wst_array_grow(&v, &cap, 4, sizeof(*v)), WST_OK);
    v[3] = 42;
    uint64_t *before = v;
    assert_int_equal(wst_array_grow(&v, &cap, SIZE_MAX / 4, sizeof(*v)),
                     WST_ERR_NO_MEMORY);
    assert_int_equal(wst_array_grow(&v, &cap, SIZE_MAX, 1), WST_ERR_NO_MEMORY);
    assert_ptr_equal(v, before);
    assert_int_equal(cap, 8);
    assert_int_equal(v[3], 42);
    assert_int_equal(wst_array_grow(&v, &cap, 1, 0), WST_ERR_INVALID);
    free(v);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_array_append_keeps_elements),
        cmocka_unit_test(test_array_room_and_jump),
        cmocka_unit_test(test_array_overflow_untouched),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
