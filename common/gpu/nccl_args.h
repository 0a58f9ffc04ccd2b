/* nccl_args.h - the argument checks nccl_comm.cu and nccl_comm_stub.c
 * share, so that a bad argument is the same error, with the same line, in
 * either build. */
#ifndef WST_NCCL_ARGS_H
#define WST_NCCL_ARGS_H

#include <wstream/status.h>

#include "log.h"

#ifdef __cplusplus
extern "C" {
#endif

/* wst_nccl_comm_start's arguments: WST_ERR_INVALID (logged) or WST_OK. */
wst_status_t wst_nccl_start_args(const struct wst_logger *log, int device,
                                 const unsigned char *id, int nranks, int rank,
                                 const void *comm_p);

#ifdef __cplusplus
}
#endif
#endif
