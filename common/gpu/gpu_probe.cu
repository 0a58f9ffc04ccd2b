/* gpu_probe.cu - gpu_probe.h with the CUDA runtime. */
#include <cuda_runtime.h>
#include <stdio.h>

extern "C" {
#include "gpu_probe.h"
}

extern "C" int wst_kernels_built_with_cuda(void)
{
    return 1;
}

extern "C" wst_status_t wst_kernels_device_count(int *count_p, char *why,
                                                 int whylen)
{
    int n = 0;
    cudaError_t err = cudaGetDeviceCount(&n);

    *count_p = 0;
    if (err != cudaSuccess || n <= 0) {
        if (why != NULL && whylen > 0)
            snprintf(why, (size_t)whylen, "cudaGetDeviceCount: %s",
                     err != cudaSuccess ? cudaGetErrorString(err)
                                        : "no device");
        return WST_ERR_NO_DEVICE;
    }
    *count_p = n;
    return WST_OK;
}

extern "C" wst_status_t
wst_kernels_device_bus_id(int device, char *buf, int len, char *why, int whylen)
{
    cudaError_t err = cudaDeviceGetPCIBusId(buf, len, device);

    if (err != cudaSuccess) {
        if (buf != NULL && len > 0)
            buf[0] = '\0';
        if (why != NULL && whylen > 0)
            snprintf(why, (size_t)whylen, "cudaDeviceGetPCIBusId(%d): %s",
                     device, cudaGetErrorString(err));
        return WST_ERR_NO_DEVICE;
    }
    return WST_OK;
}
