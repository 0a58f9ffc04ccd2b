/* stale_shm_main.c - wstream-stale-shm: a cluster starts although an
 * earlier, crashed run left a live-memory object behind under the name
 * this process's pid would give it (pids are reused; /dev/shm is not
 * cleaned). Creates /wstream-<pid>-r0 first, then starts and stops a
 * 1-sender, 1-agent cluster (tools/demo/cluster.h) and refits version 1.
 * Exit 0 when the cluster started and the refit held; 1 otherwise. */
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "cluster.h"
#include "model.h"

int main(void)
{
    struct wst_model model;
    struct wst_cluster c;
    struct wst_sender_result res;
    char agent_bin[PATH_MAX], workdir[256], stale[64], err[512];
    int own = 0, rc = 1;

    snprintf(stale, sizeof(stale), "/wstream-%d-r0", (int)getpid());
    int fd = shm_open(stale, O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0 || ftruncate(fd, 4096) != 0) {
        perror("stale shm");
        return 1;
    }
    close(fd);
    if (wst_cluster_agent_path(agent_bin, sizeof(agent_bin)) != 0 ||
        wst_model_preset("tiny", 1, &model, err, sizeof(err)) != WST_OK ||
        wst_cluster_workdir("wstream-stale-shm", NULL, workdir, sizeof(workdir),
                            &own) != 0)
        goto out_stale;
    struct wst_cluster_params cp = {
        .model = &model,
        .n_senders = 1,
        .n_receivers = 1,
        .transport = WST_TRANSPORT_TCP,
        .mover = "auto",
        .seed = 5,
        .timeout_s = 15,
        .agent_bin = agent_bin,
        .workdir = workdir,
    };
    if (wst_cluster_start(&c, &cp) != 0) {
        printf("FAIL: the cluster did not start beside a stale %s\n", stale);
    } else if (wst_cluster_push(&c, 1) != 0 ||
               wst_cluster_result(&c, 0, 30, &res) != 0 || res.status != 0 ||
               wst_cluster_verify(&c, 1) != 0) {
        printf("FAIL: version 1 did not land\n");
    } else {
        printf("ok: the cluster started beside a stale %s and refit v1\n",
               stale);
        rc = 0;
    }
    wst_cluster_stop(&c);
    wst_cluster_workdir_remove("wstream-stale-shm", workdir);
    wst_model_release(&model);
out_stale:
    shm_unlink(stale);
    return rc;
}
