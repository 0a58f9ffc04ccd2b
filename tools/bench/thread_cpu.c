/* thread_cpu.c - per-thread CPU seconds from /proc (see thread_cpu.h).
 *
 * A stat line is "pid (comm) state ppid ...": comm may hold spaces and
 * parentheses, so the fields are counted from the last ')'. utime and
 * stime are fields 14 and 15 of the line, the 12th and 13th after it.
 */
#include "thread_cpu.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "clock.h"
#include "median.h"

/* Reads one stat file: its comm and utime + stime. -1 if it cannot. */
static int read_stat(const char *path, char *comm, size_t comm_len,
                     uint64_t *ticks_p)
{
    char line[1024], *open_p, *close_p;
    unsigned long long utime, stime;
    FILE *f = fopen(path, "r");
    int ok;

    if (f == NULL)
        return -1;
    ok = fgets(line, sizeof(line), f) != NULL;
    fclose(f);
    if (!ok || (open_p = strchr(line, '(')) == NULL ||
        (close_p = strrchr(line, ')')) == NULL || close_p < open_p)
        return -1;
    if (sscanf(close_p + 1,
               " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &utime,
               &stime) != 2)
        return -1;
    if (comm != NULL) {
        size_t n = (size_t)(close_p - open_p - 1);
        if (n >= comm_len)
            n = comm_len - 1;
        memcpy(comm, open_p + 1, n);
        comm[n] = '\0';
    }
    *ticks_p = utime + stime;
    return 0;
}

/* A schedstat line's first field: nanoseconds on a CPU. 0 when the file
 * is not there (a kernel without schedstats) or does not parse. */
static uint64_t read_run_ns(const char *path)
{
    unsigned long long ns = 0;
    FILE *f = fopen(path, "r");

    if (f == NULL)
        return 0;
    if (fscanf(f, "%llu", &ns) != 1)
        ns = 0;
    fclose(f);
    return ns;
}

static int compare_tid(const void *a, const void *b)
{
    pid_t x = ((const struct wst_thread_cpu_entry *)a)->tid;
    pid_t y = ((const struct wst_thread_cpu_entry *)b)->tid;

    return (x > y) - (x < y);
}

wst_status_t wst_thread_cpu_sample(pid_t pid,
                                   struct wst_thread_cpu_sample *sample_p)
{
    struct wst_thread_cpu_sample s;
    char path[64];
    struct dirent *d;
    DIR *dir;

    memset(&s, 0, sizeof(s));
    s.pid = pid;
    s.wall_ns = wst_now_ns();
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    if (read_stat(path, NULL, 0, &s.process_ticks) != 0)
        return WST_ERR_IO;
    snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
    dir = opendir(path);
    if (dir == NULL)
        return WST_ERR_IO;
    while ((d = readdir(dir)) != NULL && s.n < WST_THREAD_CPU_MAX) {
        struct wst_thread_cpu_entry *e = &s.t[s.n];
        char *end;
        long tid = strtol(d->d_name, &end, 10);
        if (*end != '\0' || tid <= 0)
            continue; /* "." and ".." */
        snprintf(path, sizeof(path), "/proc/%d/task/%ld/stat", (int)pid, tid);
        /* A thread that exits as we look is simply not in the sample. */
        if (read_stat(path, e->comm, sizeof(e->comm), &e->ticks) != 0)
            continue;
        snprintf(path, sizeof(path), "/proc/%d/task/%ld/schedstat", (int)pid,
                 tid);
        e->run_ns = read_run_ns(path);
        e->tid = (pid_t)tid;
        s.n++;
    }
    closedir(dir);
    qsort(s.t, s.n, sizeof(s.t[0]), compare_tid);
    *sample_p = s;
    return WST_OK;
}

wst_status_t wst_thread_cpu_table_init(struct wst_thread_cpu_table *t,
                                       const char *who, pid_t pid,
                                       size_t repeats)
{
    memset(t, 0, sizeof(*t));
    t->who = who;
    t->pid = pid;
    t->repeats = repeats;
    t->row_s = calloc(WST_THREAD_CPU_MAX * repeats, sizeof(*t->row_s));
    t->process_s = calloc(repeats, sizeof(*t->process_s));
    t->wall_s = calloc(repeats, sizeof(*t->wall_s));
    if (t->row_s == NULL || t->process_s == NULL || t->wall_s == NULL) {
        wst_thread_cpu_table_release(t);
        return WST_ERR_NO_MEMORY;
    }
    return WST_OK;
}

static const struct wst_thread_cpu_entry *
find_tid(const struct wst_thread_cpu_sample *s, pid_t tid)
{
    for (size_t i = 0; i < s->n; i++)
        if (s->t[i].tid == tid)
            return &s->t[i];
    return NULL;
}

/* The row of 'e', added (in tid order) if it is new; NULL when full. */
static size_t row_of(struct wst_thread_cpu_table *t,
                     const struct wst_thread_cpu_entry *e)
{
    size_t i;

    for (i = 0; i < t->n_rows; i++)
        if (t->rows[i].tid == e->tid)
            return i;
    if (t->n_rows == WST_THREAD_CPU_MAX)
        return WST_THREAD_CPU_MAX;
    t->rows[t->n_rows] = *e;
    return t->n_rows++;
}

void wst_thread_cpu_table_add(struct wst_thread_cpu_table *t, size_t repeat,
                              const struct wst_thread_cpu_sample *before,
                              const struct wst_thread_cpu_sample *after)
{
    double tick_s = 1.0 / (double)sysconf(_SC_CLK_TCK);

    for (size_t i = 0; i < before->n; i++)
        if (find_tid(after, before->t[i].tid) == NULL)
            t->lost = 1;
    for (size_t i = 0; i < after->n; i++) {
        const struct wst_thread_cpu_entry *a = &after->t[i];
        const struct wst_thread_cpu_entry *b = find_tid(before, a->tid);
        size_t r = row_of(t, a);
        if (r == WST_THREAD_CPU_MAX)
            continue;
        /* The name a thread ends the refit with is the one shown. */
        memcpy(t->rows[r].comm, a->comm, sizeof(a->comm));
        /* Nanoseconds where both samples have them (a new thread: after
         * alone), ticks otherwise. */
        if (a->run_ns != 0 && (b == NULL || b->run_ns != 0))
            t->row_s[r * t->repeats + repeat] =
                (double)(a->run_ns - (b != NULL ? b->run_ns : 0)) / 1e9;
        else
            t->row_s[r * t->repeats + repeat] =
                (double)(a->ticks - (b != NULL ? b->ticks : 0)) * tick_s;
    }
    t->process_s[repeat] =
        (double)(after->process_ticks - before->process_ticks) * tick_s;
    t->wall_s[repeat] = (double)(after->wall_ns - before->wall_ns) / 1e9;
}

double wst_thread_cpu_table_process_s(const struct wst_thread_cpu_table *t)
{
    return wst_bench_median(t->process_s, t->repeats);
}

double wst_thread_cpu_table_others_s(const struct wst_thread_cpu_table *t)
{
    double v[WST_THREAD_CPU_OTHERS_REPEATS_MAX];
    size_t n = t->repeats < WST_THREAD_CPU_OTHERS_REPEATS_MAX
                   ? t->repeats
                   : WST_THREAD_CPU_OTHERS_REPEATS_MAX;

    if (n == 0)
        return 0;
    for (size_t k = 0; k < n; k++) {
        v[k] = 0;
        for (size_t r = 0; r < t->n_rows; r++)
            if (t->rows[r].tid != t->pid)
                v[k] += t->row_s[r * t->repeats + k];
    }
    return wst_bench_median(v, n);
}

static void print_row(const char *who, const char *tid, const char *name,
                      const char *order, double s, double gib, double wall_s)
{
    printf("| %s | %s | %s | %s | %.3f | %.3f | %.0f%% |\n", who, tid, name,
           order, s / gib, s, wall_s > 0 ? 100.0 * s / wall_s : 0.0);
}

void wst_thread_cpu_table_print(const struct wst_thread_cpu_table *t,
                                double gib)
{
    double wall_s = wst_bench_median(t->wall_s, t->repeats);
    char tid[16], order[24]; /* "#" and a size_t */

    /* rows[] is in the order threads were first seen; print by tid. */
    struct wst_thread_cpu_entry sorted[WST_THREAD_CPU_MAX];
    size_t idx[WST_THREAD_CPU_MAX];
    memcpy(sorted, t->rows, t->n_rows * sizeof(sorted[0]));
    qsort(sorted, t->n_rows, sizeof(sorted[0]), compare_tid);
    for (size_t i = 0; i < t->n_rows; i++)
        for (size_t r = 0; r < t->n_rows; r++)
            if (t->rows[r].tid == sorted[i].tid)
                idx[i] = r;
    for (size_t i = 0; i < t->n_rows; i++) {
        double m = wst_bench_median(&t->row_s[idx[i] * t->repeats], t->repeats);
        snprintf(tid, sizeof(tid), "%d", (int)sorted[i].tid);
        if (sorted[i].tid == t->pid)
            snprintf(order, sizeof(order), "main");
        else
            snprintf(order, sizeof(order), "#%zu", i);
        print_row(t->who, tid, sorted[i].comm, order, m, gib, wall_s);
    }
    print_row(t->who, "all",
              t->lost ? "(process; some threads exited)" : "(process)", "-",
              wst_thread_cpu_table_process_s(t), gib, wall_s);
}

void wst_thread_cpu_table_release(struct wst_thread_cpu_table *t)
{
    free(t->row_s);
    free(t->process_s);
    free(t->wall_s);
    t->row_s = NULL;
    t->process_s = NULL;
    t->wall_s = NULL;
}
