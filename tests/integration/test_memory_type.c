/* test_memory_type.c - the receiver checks where each region's memory is
 * and says so: a declared memory type that CUDA contradicts is refused
 * with a message naming both, and start-up logs what it found (which, on
 * a machine with no GPU, says there is none and why). The sender checks
 * its shards the same way, and refuses device-path settings it cannot
 * honour at create. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include <wstream/receiver.h>
#include <wstream/sender.h>

#include "gpu_probe.h"
#include "log.h"

struct lines {
    char text[8192];
};

static void sink(void *arg, int level, const char *line)
{
    struct lines *l = arg;
    size_t used = strlen(l->text);

    snprintf(l->text + used, sizeof(l->text) - used, "%s: %s\n",
             wst_log_level_name((enum wst_log_level)level), line);
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
    else
        snprintf(why, sizeof(why), "%s",
                 wst_kernels_built_with_cuda() ? "no GPU"
                                               : "a build without CUDA");
    snprintf(expect, sizeof(expect), "regions: 1.0 MiB of host memory (%s)",
             why);
    if (strstr(l.text, expect) == NULL)
        fail_msg("no line '%s' in:\n%s", expect, l.text);
    /* A host without a GPU or driver is normal: CUDA's error for it is
     * not in the log at info (only at debug). */
    for (const char *p = l.text; *p != '\0'; p = strchr(p, '\n') + 1) {
        const char *end = strchr(p, '\n');
        int at_debug =
            strncmp(p, "debug: ", 7) == 0 || strncmp(p, "trace: ", 7) == 0;
        if (at_debug)
            continue;
        if (memmem(p, (size_t)(end - p), "cudaGetDeviceCount", 18) != NULL ||
            memmem(p, (size_t)(end - p), "driver", 6) != NULL)
            fail_msg("a CUDA error above debug in:\n%s", l.text);
    }
    wst_receiver_destroy(r);
}

static const char *const one_receiver[] = {"127.0.0.1:9"};

static wst_status_t sender_new(struct lines *l, uint64_t extra_fields,
                               const char *path, uint64_t bounce,
                               wst_sender_t **s_p)
{
    struct wst_sender_params p = {
        .field_mask = WST_SENDER_PARAM_RANK | WST_SENDER_PARAM_WORLD_SIZE |
                      WST_SENDER_PARAM_RECEIVERS | WST_SENDER_PARAM_LOG |
                      extra_fields,
        .rank = 0,
        .world_size = 1,
        .receivers = one_receiver,
        .n_receivers = 1,
        .log_level = 3,
        .log_fn = sink,
        .log_arg = l,
        .device_path = path,
        .bounce_bytes = bounce,
    };

    *s_p = NULL;
    return wst_sender_create(&p, s_p);
}

static void test_sender_shard_declared_cuda_is_refused(void **state)
{
    struct lines l = {.text = ""};
    wst_sender_t *s = NULL;
    static uint16_t buf[64];
    uint64_t shape[1] = {64}, start[1] = {0}, stop[1] = {64};
    struct wst_shard sh = {.name = "w",
                           .data = buf,
                           .mem_type = WST_MEM_CUDA,
                           .dtype = WST_DTYPE_BF16,
                           .ndim = 1,
                           .shape = shape,
                           .box_start = start,
                           .box_stop = stop};

    (void)state;
    assert_int_equal(sender_new(&l, 0, NULL, 0, &s), WST_OK);
    assert_int_equal(wst_sender_register(s, &sh), WST_ERR_INVALID);
    assert_non_null(strstr(l.text, "register 'w': declared cuda memory, but "
                                   "the pointer is host memory"));
    sh.mem_type = 7;
    assert_int_equal(wst_sender_register(s, &sh), WST_ERR_INVALID);
    assert_non_null(strstr(l.text, "register 'w': unknown memory type 7"));
    /* The application gets the same words, not only the log. */
    assert_non_null(strstr(wst_sender_last_error(s),
                           "register 'w': unknown memory type 7 "
                           "(WST_ERR_INVALID)"));
    /* Refused registrations left nothing behind: the shard is new. */
    sh.mem_type = WST_MEM_HOST;
    assert_int_equal(wst_sender_register(s, &sh), WST_OK);
    assert_string_equal(wst_sender_last_error(s), "");
    wst_sender_destroy(s);
}

static void test_sender_device_settings_are_checked(void **state)
{
    struct lines l = {.text = ""};
    wst_sender_t *s = NULL;

    (void)state;
    assert_int_equal(
        sender_new(&l, WST_SENDER_PARAM_DEVICE_PATH, "sideways", 0, &s),
        WST_ERR_INVALID);
    assert_null(s);
    assert_non_null(strstr(l.text, "device_path 'sideways': want auto, "
                                   "direct, bounce or nccl"));
    /* One slot cannot overlap a copy with a send. */
    assert_int_equal(
        sender_new(&l, WST_SENDER_PARAM_BOUNCE, NULL, 8ull << 20, &s),
        WST_ERR_INVALID);
    assert_non_null(strstr(l.text, "bounce_bytes 8388608: want 2 to 64 "
                                   "slots of 8 MiB"));
    assert_int_equal(
        sender_new(&l, WST_SENDER_PARAM_BOUNCE, NULL, 1ull << 40, &s),
        WST_ERR_INVALID);
    for (int i = 0; i < 4; i++) {
        static const char *const ok[] = {"auto", "direct", "bounce", "nccl"};
        assert_int_equal(
            sender_new(&l,
                       WST_SENDER_PARAM_DEVICE_PATH | WST_SENDER_PARAM_BOUNCE,
                       ok[i], 16ull << 20, &s),
            WST_OK);
        wst_sender_destroy(s);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sender_shard_declared_cuda_is_refused),
        cmocka_unit_test(test_sender_device_settings_are_checked),
        cmocka_unit_test(test_host_pointer_declared_cuda_is_refused),
        cmocka_unit_test(test_start_says_where_memory_is),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
