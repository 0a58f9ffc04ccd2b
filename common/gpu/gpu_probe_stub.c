/* gpu_probe_stub.c - gpu_probe.h for builds without the CUDA toolkit. */
#include "gpu_probe.h"

#include <stdio.h>

int wst_kernels_built_with_cuda(void)
{
    return 0;
}

wst_status_t wst_kernels_device_count(int *count_p, char *why, int whylen)
{
    *count_p = 0;
    if (why != NULL && whylen > 0)
        snprintf(why, (size_t)whylen, "built without the CUDA toolkit");
    return WST_ERR_NO_DEVICE;
}

wst_status_t wst_kernels_device_bus_id(int device, char *buf, int len,
                                       char *why, int whylen)
{
    (void)device;
    if (buf != NULL && len > 0)
        buf[0] = '\0';
    if (why != NULL && whylen > 0)
        snprintf(why, (size_t)whylen, "built without the CUDA toolkit");
    return WST_ERR_NO_DEVICE;
}
