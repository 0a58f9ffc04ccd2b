/* nccl_comm_stub.c - nccl_comm.h for builds without NCCL: arguments are
 * checked as nccl_comm.cu checks them (a bad one is WST_ERR_INVALID in
 * either build), then every call is refused with WST_ERR_UNSUPPORTED. No
 * communicator can exist here, so the calls that take one have no logger
 * to say so and only return the status. */
#include "nccl_comm.h"

#include "nccl_args.h"

static wst_status_t none(const struct wst_logger *log, const char *what)
{
    WST_ERROR(log, "nccl: %s: built without NCCL", what);
    return WST_ERR_UNSUPPORTED;
}

int wst_nccl_available(void)
{
    return 0;
}

wst_status_t wst_nccl_get_id(const struct wst_logger *log,
                             unsigned char id[WST_NCCL_ID_BYTES])
{
    if (id == NULL) {
        WST_ERROR(log, "nccl: unique id: no buffer for it");
        return WST_ERR_INVALID;
    }
    return none(log, "ncclGetUniqueId");
}

wst_status_t wst_nccl_comm_start(const struct wst_logger *log, int device,
                                 const unsigned char id[WST_NCCL_ID_BYTES],
                                 int nranks, int rank,
                                 struct wst_nccl_comm **comm_p)
{
    if (wst_nccl_start_args(log, device, id, nranks, rank, comm_p) != WST_OK)
        return WST_ERR_INVALID;
    return none(log, "ncclCommInitRankConfig");
}

wst_status_t wst_nccl_comm_poll(struct wst_nccl_comm *comm)
{
    return comm == NULL ? WST_ERR_INVALID : WST_ERR_UNSUPPORTED;
}

wst_status_t wst_nccl_comm_wait(struct wst_nccl_comm *comm, double timeout_s)
{
    if (comm == NULL || !(timeout_s >= 0))
        return WST_ERR_INVALID;
    return WST_ERR_UNSUPPORTED;
}

wst_status_t wst_nccl_exchange(struct wst_nccl_comm *comm,
                               const struct wst_nccl_run *sends, size_t n_sends,
                               const struct wst_nccl_run *recvs, size_t n_recvs,
                               wst_gpu_stream_t stream)
{
    (void)stream;
    if (comm == NULL || (n_sends > 0 && sends == NULL) ||
        (n_recvs > 0 && recvs == NULL))
        return WST_ERR_INVALID;
    return WST_ERR_UNSUPPORTED;
}

void wst_nccl_comm_abort(struct wst_nccl_comm *comm)
{
    (void)comm;
}

void wst_nccl_comm_destroy(struct wst_nccl_comm *comm)
{
    (void)comm;
}
