/* test_shm.c - POSIX shared-memory objects as live memory (common/shm.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "shm.h"

#define BYTES (64u * 1024u + 3u)

static void name_for(char *buf, size_t len, const char *tag)
{
    snprintf(buf, len, "/wst-test-shm-%d-%s", (int)getpid(), tag);
}

/* Created poisoned; a second mapping, by name, sees the same bytes. */
static void test_shm_create_poisons_and_maps(void **state)
{
    char name[64], err[256] = "";
    unsigned char *w = NULL;
    const unsigned char *r = NULL;

    (void)state;
    name_for(name, sizeof(name), "a");
    assert_int_equal(wst_shm_create(name, BYTES, (void **)&w, err, sizeof(err)),
                     WST_OK);
    for (size_t i = 0; i < BYTES; i++)
        assert_int_equal(w[i], WST_SHM_POISON);
    assert_int_equal(wst_shm_map(name, BYTES, 0, (void **)&r, err, sizeof(err)),
                     WST_OK);
    w[BYTES - 1] = 7;
    assert_int_equal(r[BYTES - 1], 7);
    munmap((void *)r, BYTES);
    munmap(w, BYTES);
    shm_unlink(name);
}

/* An object that exists is not taken over, and is left as it was. */
static void test_shm_create_refuses_existing(void **state)
{
    char name[64], err[256] = "";
    unsigned char *first = NULL;
    void *second = NULL;

    (void)state;
    name_for(name, sizeof(name), "b");
    assert_int_equal(wst_shm_create(name, BYTES, (void **)&first, NULL, 0),
                     WST_OK);
    first[0] = 1;
    assert_int_equal(wst_shm_create(name, BYTES, &second, err, sizeof(err)),
                     WST_ERR_IO);
    assert_null(second);
    assert_non_null(strstr(err, "shm_open"));
    assert_non_null(strstr(err, name));
    assert_int_equal(wst_shm_map(name, BYTES, 1, &second, NULL, 0), WST_OK);
    assert_int_equal(((unsigned char *)second)[0], 1);
    munmap(second, BYTES);
    munmap(first, BYTES);
    shm_unlink(name);
}

static void test_shm_map_missing(void **state)
{
    char name[64], err[256] = "";
    void *p = NULL;

    (void)state;
    name_for(name, sizeof(name), "none");
    assert_int_equal(wst_shm_map(name, BYTES, 0, &p, err, sizeof(err)),
                     WST_ERR_IO);
    assert_null(p);
    assert_non_null(strstr(err, "No such file"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shm_create_poisons_and_maps),
        cmocka_unit_test(test_shm_create_refuses_existing),
        cmocka_unit_test(test_shm_map_missing),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
