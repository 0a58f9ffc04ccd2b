/* gpu_probe.h - is there a CUDA device, and which build are we?
 *
 * The one seam between CUDA and the rest of the tree: gpu_probe.cu
 * implements it with the CUDA runtime, gpu_probe_stub.c (no toolkit at build
 * time) with the same symbols returning WST_ERR_NO_DEVICE.
 */
#ifndef WST_GPU_PROBE_H
#define WST_GPU_PROBE_H

#include <wstream/status.h>

/* Nonzero when this build contains CUDA kernels. */
int wst_kernels_built_with_cuda(void);

/* Number of visible CUDA devices. WST_ERR_NO_DEVICE (with *count_p = 0) when
 * the build has no CUDA, the driver is missing or no device is visible; the
 * reason goes to 'why' (may be NULL). */
wst_status_t wst_kernels_device_count(int *count_p, char *why, int whylen);

/* The PCI bus id of CUDA device 'device' ("0000:19:00.0") into buf[len].
 * WST_ERR_NO_DEVICE, with the reason in 'why' (may be NULL), when the
 * build has no CUDA or CUDA does not know the device. */
wst_status_t wst_kernels_device_bus_id(int device, char *buf, int len,
                                       char *why, int whylen);

#endif
