/* test_gpu_probe.c - the CUDA seam reports what it has, and says why not.
 *
 * With no usable device the process exits 77, which ctest reports as
 * skipped (SKIP_RETURN_CODE), after checking that the probe said so
 * clearly. GPU work beyond this probe is tested by tests/gpu/ on a GPU. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <cmocka.h>

#include "gpu_probe.h"

static void test_gpu_probe_counts_devices(void **state)
{
    char why[256] = "";
    int n = -1;

    (void)state;
    assert_int_equal(wst_kernels_device_count(&n, why, sizeof(why)), WST_OK);
    assert_true(wst_kernels_built_with_cuda());
    assert_true(n > 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gpu_probe_counts_devices),
    };
    char why[256] = "";
    int n = -1;
    wst_status_t st = wst_kernels_device_count(&n, why, sizeof(why));

    if (st != WST_OK) {
        if (st != WST_ERR_NO_DEVICE || n != 0 || why[0] == '\0') {
            fprintf(stderr, "FAIL: probe returned %d, n=%d, reason '%s'\n",
                    (int)st, n, why);
            return 1;
        }
        fprintf(stderr, "SKIP gpu: %s (%s build)\n", why,
                wst_kernels_built_with_cuda() ? "CUDA" : "stub");
        return 77;
    }
    return cmocka_run_group_tests(tests, NULL, NULL);
}
