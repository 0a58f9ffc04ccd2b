/* test_memory_type.c - the receiver checks where each region's memory is
 * and says so: a declared memory type that CUDA contradicts is refused
 * with a message naming both, and start-up logs what it found (which, on
 * a machine with no GPU, says there is none and why). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include <wstream/receiver.h>

#include "gpu_probe.h"

struct lines {
    char text[8192];
};

static void sink(void *arg, int level, const char *line)
{
    struct lines *l = arg;
    size_t used = strlen(l->text);

    (void)level;
    snprintf(l->text + used, sizeof(l->text) - used, "%s\n", line);
}

static wst_receiver_t *receiver_new(struct lines *l)
{
    struct wst_receiver_params p = {
        .field_mask = WST_RECEIVER_PARAM_LISTEN | WST_RECEIVER_PARAM_LOG,
        .listen_host = "127.0.0.1",
        .log_name = "memtype",
        .log_level = 3,
        .log_fn = sink,
        .log_arg = l,
    };
    wst_receiver_t *r = NULL;

    assert_int_equal(wst_receiver_create(&p, &r), WST_OK);
    return r;
}

static void test_host_pointer_declared_cuda_is_refused(void **state)
{
    struct lines l = {.text = ""};
    wst_receiver_t *r = receiver_new(&l);
    static char buf[4096];
    struct wst_region reg = {.name = "w",
                             .data = buf,
                             .length = sizeof(buf),
                             .mem_type = WST_MEM_CUDA};

    (void)state;
    assert_int_equal(wst_receiver_add_region(r, &reg, NULL), WST_ERR_INVALID);
    assert_non_null(strstr(l.text, "region w: declared cuda memory, but the "
                                   "pointer is host memory"));
    reg.mem_type = 7;
    assert_int_equal(wst_receiver_add_region(r, &reg, NULL), WST_ERR_INVALID);
    assert_non_null(strstr(l.text, "region w: unknown memory type 7"));
    wst_receiver_destroy(r);
}

static void test_start_says_where_memory_is(void **state)
{
    struct lines l = {.text = ""};
    wst_receiver_t *r = receiver_new(&l);
    static char buf[1 << 20];
    struct wst_region reg = {.name = "w",
                             .data = buf,
                             .length = sizeof(buf),
                             .mem_type = WST_MEM_HOST};
    char why[256] = "", expect[400];
    int n = 0;

    (void)state;
    assert_int_equal(wst_receiver_add_region(r, &reg, NULL), WST_OK);
    assert_int_equal(wst_receiver_start(r, NULL), WST_OK);
    if (wst_kernels_device_count(&n, why, sizeof(why)) == WST_OK)
        snprintf(why, sizeof(why), "%d GPU(s) visible, none used", n);
    snprintf(expect, sizeof(expect), "regions: 1.0 MiB of host memory (%s)",
             why);
    if (strstr(l.text, expect) == NULL)
        fail_msg("no line '%s' in:\n%s", expect, l.text);
    /* The reason is CUDA's own or the build's, never empty. */
    assert_true(strlen(why) > 0);
    wst_receiver_destroy(r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_host_pointer_declared_cuda_is_refused),
        cmocka_unit_test(test_start_says_where_memory_is),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
