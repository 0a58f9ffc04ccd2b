/* nccl_args.c - shared argument checks of the NCCL seam (nccl_args.h). */
#include "nccl_args.h"

#include <stddef.h>

wst_status_t wst_nccl_start_args(const struct wst_logger *log, int device,
                                 const unsigned char *id, int nranks, int rank,
                                 const void *comm_p)
{
    if (id != NULL && comm_p != NULL && device >= 0 && nranks >= 1 &&
        rank >= 0 && rank < nranks)
        return WST_OK;
    WST_ERROR(log,
              "nccl: communicator of rank %d/%d on device %d: bad "
              "arguments (id %s, output %s)",
              rank, nranks, device, id == NULL ? "NULL" : "given",
              comm_p == NULL ? "NULL" : "given");
    return WST_ERR_INVALID;
}
