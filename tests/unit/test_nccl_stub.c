/* test_nccl_stub.c - the NCCL seam (common/gpu/nccl_comm.h) where CI runs it:
 * no GPU, and usually no NCCL.
 *
 * Without NCCL every call is refused with WST_ERR_UNSUPPORTED, and the
 * calls that take a logger say "built without NCCL". With NCCL but no
 * device, a communicator cannot start, and says why, without hanging. In
 * both builds a bad argument is WST_ERR_INVALID. Lines are caught with a
 * logger sink. On a machine with a device the last case starts a real
 * communicator of one rank instead. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "gpu_probe.h"
#include "log.h"
#include "nccl_comm.h"

struct captured {
    int lines;
    int errors;
    char last[512];
};

static void sink(void *arg, int level, const char *line)
{
    struct captured *cap = arg;

    cap->lines++;
    if (level == WST_LOG_ERROR)
        cap->errors++;
    snprintf(cap->last, sizeof(cap->last), "%s", line);
}

struct fixture {
    struct wst_logger log;
    struct captured cap;
};

static int setup(void **state)
{
    static struct fixture f;

    memset(&f, 0, sizeof(f));
    wst_logger_init(&f.log, "test-nccl", WST_LOG_INFO);
    f.log.sink = sink;
    f.log.sink_arg = &f.cap;
    *state = &f;
    return 0;
}

static int has_device(void)
{
    int n = 0;

    return wst_kernels_device_count(&n, NULL, 0) == WST_OK && n > 0;
}

static void test_nccl_stub_refuses_bad_arguments(void **state)
{
    struct fixture *f = *state;
    unsigned char id[WST_NCCL_ID_BYTES] = {0};
    struct wst_nccl_comm *comm = NULL;
    struct wst_nccl_run run = {id, 1, 0};

    assert_int_equal(wst_nccl_get_id(&f->log, NULL), WST_ERR_INVALID);
    assert_int_equal(wst_nccl_comm_start(&f->log, 0, NULL, 1, 0, &comm),
                     WST_ERR_INVALID);
    assert_int_equal(wst_nccl_comm_start(&f->log, 0, id, 0, 0, &comm),
                     WST_ERR_INVALID);
    assert_int_equal(wst_nccl_comm_start(&f->log, 0, id, 2, 2, &comm),
                     WST_ERR_INVALID);
    assert_int_equal(wst_nccl_comm_start(&f->log, 0, id, 2, -1, &comm),
                     WST_ERR_INVALID);
    assert_int_equal(wst_nccl_comm_start(&f->log, -1, id, 1, 0, &comm),
                     WST_ERR_INVALID);
    assert_int_equal(wst_nccl_comm_start(&f->log, 0, id, 1, 0, NULL),
                     WST_ERR_INVALID);
    assert_null(comm);
    /* Each refusal said so, at error level. */
    assert_int_equal(f->cap.errors, 7);
    assert_int_equal(f->cap.lines, 7);

    assert_int_equal(wst_nccl_comm_poll(NULL), WST_ERR_INVALID);
    assert_int_equal(wst_nccl_comm_wait(NULL, 1.0), WST_ERR_INVALID);
    assert_int_equal(wst_nccl_exchange(NULL, &run, 1, &run, 1, NULL),
                     WST_ERR_INVALID);
    wst_nccl_comm_abort(NULL);
    wst_nccl_comm_destroy(NULL);
}

static void test_nccl_stub_unsupported_without_nccl(void **state)
{
    struct fixture *f = *state;
    unsigned char id[WST_NCCL_ID_BYTES] = {0};
    struct wst_nccl_comm *comm = NULL;
    /* No communicator can exist in this build: any pointer stands for
     * one, and the stub must not touch it. */
    struct wst_nccl_comm *fake = (struct wst_nccl_comm *)(void *)id;

    if (wst_nccl_available())
        skip();
    assert_int_equal(wst_nccl_get_id(&f->log, id), WST_ERR_UNSUPPORTED);
    assert_int_equal(f->cap.errors, 1);
    assert_non_null(strstr(f->cap.last, "NCCL"));
    f->cap.last[0] = '\0';
    assert_int_equal(wst_nccl_comm_start(&f->log, 0, id, 1, 0, &comm),
                     WST_ERR_UNSUPPORTED);
    assert_null(comm);
    assert_int_equal(f->cap.errors, 2);
    assert_non_null(strstr(f->cap.last, "built without NCCL"));

    assert_int_equal(wst_nccl_comm_poll(fake), WST_ERR_UNSUPPORTED);
    assert_int_equal(wst_nccl_comm_wait(fake, 0), WST_ERR_UNSUPPORTED);
    assert_int_equal(wst_nccl_exchange(fake, NULL, 0, NULL, 0, NULL),
                     WST_ERR_UNSUPPORTED);
    wst_nccl_comm_abort(fake);
    wst_nccl_comm_destroy(fake);
}

/* NCCL built in, no device (CI with the toolkit): whatever the id does,
 * a communicator on device 0 fails at once with a reason. */
static void test_nccl_stub_no_device_start_fails(void **state)
{
    struct fixture *f = *state;
    unsigned char id[WST_NCCL_ID_BYTES] = {0};
    struct wst_nccl_comm *comm = NULL;
    wst_status_t st;

    if (!wst_nccl_available() || has_device())
        skip();
    /* ncclGetUniqueId needs a network interface, not a device: it may
     * work here or not, but a failure must say why. */
    st = wst_nccl_get_id(&f->log, id);
    print_message("ncclGetUniqueId without a device: %s%s%s\n",
                  wst_status_name(st), st == WST_OK ? "" : ": ",
                  st == WST_OK ? "" : f->cap.last);
    if (st != WST_OK) {
        assert_true(f->cap.errors > 0);
        assert_non_null(strstr(f->cap.last, "ncclGetUniqueId"));
    }
    f->cap.errors = 0;
    st = wst_nccl_comm_start(&f->log, 0, id, 1, 0, &comm);
    print_message("communicator start without a device: %s: %s\n",
                  wst_status_name(st), f->cap.last);
    assert_int_not_equal(st, WST_OK);
    assert_int_not_equal(st, WST_INPROGRESS);
    assert_null(comm);
    assert_true(f->cap.errors > 0);
}

/* With a device (the GPU machine): the same calls start a real
 * communicator of one rank, which is ready within a minute. */
static void test_nccl_stub_one_rank_with_device(void **state)
{
    struct fixture *f = *state;
    unsigned char id[WST_NCCL_ID_BYTES];
    struct wst_nccl_comm *comm = NULL;

    if (!wst_nccl_available() || !has_device())
        skip();
    assert_int_equal(wst_nccl_get_id(&f->log, id), WST_OK);
    assert_int_equal(wst_nccl_comm_start(&f->log, 0, id, 1, 0, &comm), WST_OK);
    assert_non_null(comm);
    assert_int_equal(wst_nccl_comm_wait(comm, 60.0), WST_OK);
    assert_int_equal(wst_nccl_exchange(comm, NULL, 0, NULL, 0, NULL), WST_OK);
    wst_nccl_comm_destroy(comm);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_nccl_stub_refuses_bad_arguments, setup),
        cmocka_unit_test_setup(test_nccl_stub_unsupported_without_nccl, setup),
        cmocka_unit_test_setup(test_nccl_stub_no_device_start_fails, setup),
        cmocka_unit_test_setup(test_nccl_stub_one_rank_with_device, setup),
    };

    fprintf(stderr, "nccl seam: %s build\n",
            wst_nccl_available() ? "NCCL" : "stub (no NCCL)");
    return cmocka_run_group_tests(tests, NULL, NULL);
}
