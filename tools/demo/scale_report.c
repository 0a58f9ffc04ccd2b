/* scale_report.c - the demo's scale report (demo.h): connection and
 * plan times, control messages, memory and CPU per process, per thread
 * name, and the --csv row wstream-model reads. Moved out of demo_main.c
 * unchanged. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "clock.h"
#include "demo.h"

int wst_demo_compare_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return (x > y) - (x < y);
}

/* Control messages and bytes, in and out, summed over the agents' status
 * files (written at each commit) into slot 'i'. */
void wst_demo_control_snapshot(struct demo *d, int i)
{
    d->ctl_msgs[i] = d->ctl_bytes[i] = 0;
    for (uint32_t k = 0; k < d->set.receivers; k++) {
        struct wst_agent_status st;
        if (wst_cluster_agent_status(&d->cluster, k, &st) != 0)
            continue;
        d->ctl_msgs[i] += st.control_msgs_in + st.control_msgs_out;
        d->ctl_bytes[i] += st.control_bytes_in + st.control_bytes_out;
    }
}

/* The CSV columns of --csv, in order (wstream-model reads them by name). */
static const char *const csv_columns =
    "preset,layers,experts,tensors,model_bytes,live_bytes,senders,receivers,"
    "trainer_tp,engine_tp,engine_ep,transport,refits,start_s,connect_s,"
    "plan_ms_median,plan_ms_max,manifest_ms_median,manifest_ms_max,"
    "plan_cpu_ms_median,plan_cpu_ms_max,manifest_cpu_ms_median,"
    "manifest_cpu_ms_max,"
    "ctl_msgs_per_refit,ctl_bytes_per_refit,agent_rss_start_mb,"
    "agent_rss_mb,agent_rss_max_mb,sender_rss_start_mb,sender_rss_mb,"
    "sender_rss_max_mb,agent_kb_per_sender,sender_kb_per_agent,"
    "agent_cpu_s_per_refit,sender_cpu_s_per_refit,"
    "agent_manifest_kb_per_sender,"
    "first_refit_s,steady_refit_s,verified";

static double median_of(double *v, size_t n)
{
    qsort(v, n, sizeof(*v), wst_demo_compare_double);
    return n == 0 ? 0 : n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static double mean_mb(const struct wst_cluster_mem_side *m)
{
    return m->n ? (double)m->anon_sum / m->n / 1e6 : 0;
}

/* One side's CPU per steady refit by thread name, from the sample after
 * the first refit to the one after the last: where the refit's CPU goes. */
static void print_thread_cpu(const char *who,
                             const struct wst_cluster_mem_side *first,
                             const struct wst_cluster_mem_side *end,
                             uint64_t refits)
{
    printf("scale: CPU per steady refit by thread, all %s:", who);
    for (uint32_t k = 0; k < end->n_kinds; k++) {
        double before = 0;
        for (uint32_t i = 0; i < first->n_kinds; i++)
            if (strcmp(first->kinds[i].comm, end->kinds[k].comm) == 0)
                before = first->kinds[i].cpu_s;
        double s = (end->kinds[k].cpu_s - before) / (double)(refits - 1);
        if (s >= 0.0005)
            printf(" %s %.3f s", end->kinds[k].comm, s);
    }
    printf("\n");
}

/* Prints the scale figures and, with --csv, appends them as one row:
 * per-agent manifest and plan times from the status files, the start and
 * connect phases, control messages per steady refit, resident memory of
 * both sides before the connect and after the last refit, and the first
 * and the steady (median of the others) refit. 'secs' is in version
 * order. Clears *verified_p unless every agent's status says it committed
 * the last version. 0, or -1 when the CSV could not be written. */
int wst_demo_report_scale(struct demo *d, const double *secs, int *verified_p)
{
    uint32_t n = (uint32_t)d->set.receivers;
    double *plan = calloc(n, sizeof(*plan)), *man = calloc(n, sizeof(*man));
    double *pcpu = calloc(n, sizeof(*pcpu)), *mcpu = calloc(n, sizeof(*mcpu));
    double *rest = calloc(d->set.refits, sizeof(*rest));
    double plan_max = 0, man_max = 0, msgs = 0, bytes = 0, man_bytes = 0;
    uint32_t committed = 0;
    int rc = 0, verified = *verified_p;

    if (plan == NULL || man == NULL || pcpu == NULL || mcpu == NULL ||
        rest == NULL) {
        free(plan);
        free(man);
        free(pcpu);
        free(mcpu);
        free(rest);
        return -1;
    }
    for (uint32_t k = 0; k < n; k++) {
        struct wst_agent_status st;
        /* The agent writes its status file as its engine hears of the
         * commit, which may be just after the senders did. */
        uint64_t deadline = wst_deadline_ns(verified ? 5.0 : 0.0);
        int read_ok;
        while ((read_ok = wst_cluster_agent_status(&d->cluster, k, &st)) != 0 ||
               st.committed_version < d->set.refits) {
            if (wst_now_ns() >= deadline)
                break;
            usleep(20000);
        }
        if (read_ok != 0)
            continue;
        committed += st.committed_version == d->set.refits;
        man_bytes += (double)st.manifest_bytes;
        plan[k] = st.plan_seconds * 1e3;
        man[k] = st.manifest_seconds * 1e3;
        pcpu[k] = st.plan_cpu_seconds * 1e3;
        mcpu[k] = st.manifest_cpu_seconds * 1e3;
        plan_max = plan[k] > plan_max ? plan[k] : plan_max;
        man_max = man[k] > man_max ? man[k] : man_max;
    }
    double plan_med = median_of(plan, n), man_med = median_of(man, n);
    double pcpu_med = median_of(pcpu, n), pcpu_max = pcpu[n - 1];
    double mcpu_med = median_of(mcpu, n), mcpu_max = mcpu[n - 1];
    if (d->set.refits > 1) {
        msgs = (double)(d->ctl_msgs[1] - d->ctl_msgs[0]) / (d->set.refits - 1);
        bytes =
            (double)(d->ctl_bytes[1] - d->ctl_bytes[0]) / (d->set.refits - 1);
    }
    size_t n_rest = 0;
    for (uint64_t v = 1; v < d->set.refits; v++)
        rest[n_rest++] = secs[v];
    double first = secs[0], steady = n_rest ? median_of(rest, n_rest) : first;
    const struct wst_cluster_memory *m0 = &d->mem_start, *m1 = &d->mem_end;
    double a_kb = (mean_mb(&m1->agents) - mean_mb(&m0->agents)) * 1e3 /
                  (double)d->set.senders;
    double s_kb = (mean_mb(&m1->senders) - mean_mb(&m0->senders)) * 1e3 /
                  (double)d->set.receivers;
    uint32_t ep = d->model.n_experts != 0 ? n : 0;
    /* the agents' own account: decoded manifests held, per sender */
    double man_kb = man_bytes / n / (double)d->set.senders / 1e3;
    /* CPU of every agent and every sender per steady refit (the demo's own
     * verification and the engines are not in it) */
    double a_cpu = 0, s_cpu = 0;
    if (d->set.refits > 1) {
        a_cpu = (m1->agents.cpu_s - d->mem_first.agents.cpu_s) /
                (double)(d->set.refits - 1);
        s_cpu = (m1->senders.cpu_s - d->mem_first.senders.cpu_s) /
                (double)(d->set.refits - 1);
    }
    printf("scale: start %.2f s; connect (connections, manifests, plans) "
           "%.2f s; plan per agent median %.1f ms, max %.1f ms; manifests "
           "unpacked per agent median %.1f ms, max %.1f ms\n",
           d->start_s, d->connect_s, plan_med, plan_max, man_med, man_max);
    printf("scale: planner thread's CPU per agent: plan median %.1f ms, max "
           "%.1f ms; manifests median %.1f ms, max %.1f ms\n",
           pcpu_med, pcpu_max, mcpu_med, mcpu_max);
    printf("scale: control per steady refit %.0f messages, %.1f KB (%.2f "
           "messages per sender-agent pair)\n",
           msgs, bytes / 1e3, msgs / (double)(d->set.senders * n));
    printf("scale: resident anonymous memory, mean per process before the "
           "connect -> after the last refit: agents %.1f -> %.1f MB (max "
           "%.1f; %.1f kB per sender), senders %.1f -> %.1f MB (max %.1f; "
           "%.1f kB per agent)\n",
           mean_mb(&m0->agents), mean_mb(&m1->agents),
           m1->agents.anon_max / 1e6, a_kb, mean_mb(&m0->senders),
           mean_mb(&m1->senders), m1->senders.anon_max / 1e6, s_kb);
    printf("scale: the agents hold %.1f kB of decoded manifest per sender "
           "(their own account)\n",
           man_kb);
    printf("scale: first refit %.3f s, steady refit %.3f s; CPU per steady "
           "refit: agents %.2f s, senders %.2f s (all processes)\n",
           first, steady, a_cpu, s_cpu);
    if (d->set.refits > 1) {
        print_thread_cpu("agents", &d->mem_first.agents, &m1->agents,
                         d->set.refits);
        print_thread_cpu("senders", &d->mem_first.senders, &m1->senders,
                         d->set.refits);
    }
    printf("scale: %u of %u agents committed version %llu\n", committed, n,
           (unsigned long long)d->set.refits);
    if (committed != n)
        verified = 0;
    if (d->set.csv[0] != '\0') {
        FILE *f = fopen(d->set.csv, "a");
        if (f == NULL ||
            (ftell(f) == 0 && fprintf(f, "%s\n", csv_columns) < 0) ||
            fprintf(f,
                    "%s,%u,%u,%zu,%llu,%llu,%llu,%u,%llu,%u,%u,%s,%llu,%.3f,"
                    "%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%.1f,%.0f,"
                    "%.2f,%.2f,%.2f,%.2f,"
                    "%.2f,%.2f,%.2f,%.2f,%.3f,%.3f,%.2f,%.4f,%.4f,%d\n",
                    d->model.preset, d->model.n_layers, d->model.n_experts,
                    d->model.n_tensors,
                    (unsigned long long)wst_model_bytes(&d->model),
                    (unsigned long long)d->cluster.live_bytes,
                    (unsigned long long)d->set.senders, n,
                    (unsigned long long)d->set.trainer_tp, n, ep,
                    wst_demo_transport_names[d->set.transport],
                    (unsigned long long)d->set.refits, d->start_s, d->connect_s,
                    plan_med, plan_max, man_med, man_max, pcpu_med, pcpu_max,
                    mcpu_med, mcpu_max, msgs, bytes, mean_mb(&m0->agents),
                    mean_mb(&m1->agents), m1->agents.anon_max / 1e6,
                    mean_mb(&m0->senders), mean_mb(&m1->senders),
                    m1->senders.anon_max / 1e6, a_kb, s_kb, a_cpu, s_cpu,
                    man_kb, first, steady, verified) < 0) {
            fprintf(stderr, "wstream-demo: --csv %s: %s\n", d->set.csv,
                    strerror(errno));
            rc = -1;
        }
        if (f != NULL && fclose(f) != 0)
            rc = -1;
    }
    free(plan);
    free(man);
    free(pcpu);
    free(mcpu);
    free(rest);
    *verified_p = verified;
    return rc;
}
