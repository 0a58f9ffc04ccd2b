/* thread_cpu.h - CPU seconds of every thread of a process, per refit.
 *
 * Each thread's utime + stime from /proc/<pid>/task/<tid>/stat, sampled
 * before and after each timed refit, so the bench can say which thread
 * spends how much CPU per GiB moved (the median over refits). The
 * process's own /proc/<pid>/stat total is kept beside the threads: it also
 * counts threads that exited between two samples, which the per-thread
 * rows cannot. The kernel counts stat's times in clock ticks (10 ms
 * here), too coarse for a thread of a 75 ms refit (the 16-core host's
 * 1 GiB), so a thread's row takes its time on a CPU in nanoseconds from
 * /proc/<pid>/task/<tid>/schedstat where the kernel has it, and ticks
 * otherwise; the process row stays in ticks.
 *
 * wstream's libraries name their threads (wst-progress, wst-digest,
 * wst-hash, ...); threads of one name are told apart by tid and by the
 * order they were started in (tids grow, so sorting by tid gives it,
 * barring wrap-around).
 */
#ifndef WST_BENCH_THREAD_CPU_H
#define WST_BENCH_THREAD_CPU_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <wstream/status.h>

#define WST_THREAD_CPU_MAX 64 /* threads kept per process */

struct wst_thread_cpu_entry {
    pid_t tid;
    char comm[16];   /* the thread's name (comm), at most 15 characters */
    uint64_t ticks;  /* utime + stime */
    uint64_t run_ns; /* time on a CPU (schedstat); 0: not known */
};

/* One look at a process: its threads, sorted by tid. */
struct wst_thread_cpu_sample {
    pid_t pid;
    uint64_t wall_ns;       /* CLOCK_MONOTONIC when it was taken */
    uint64_t process_ticks; /* /proc/<pid>/stat: all threads, dead ones too */
    size_t n;
    struct wst_thread_cpu_entry t[WST_THREAD_CPU_MAX];
};

/* Reads every thread of 'pid' into *sample_p (threads past
 * WST_THREAD_CPU_MAX are left out). WST_ERR_IO when the process cannot be
 * read (it exited, or /proc is not there); *sample_p is then untouched. */
wst_status_t wst_thread_cpu_sample(pid_t pid,
                                   struct wst_thread_cpu_sample *sample_p);

/* One process's CPU per refit: a row per thread seen, and the process. */
struct wst_thread_cpu_table {
    const char *who; /* "sender", "agent"; borrowed for the table's life */
    pid_t pid;
    size_t repeats;
    size_t n_rows;
    struct wst_thread_cpu_entry rows[WST_THREAD_CPU_MAX]; /* ticks unused */
    double *row_s;     /* [WST_THREAD_CPU_MAX][repeats] CPU seconds */
    double *process_s; /* [repeats] */
    double *wall_s;    /* [repeats]: between the two samples */
    int lost;          /* a thread was gone at the sample after a refit */
};

/* Prepares an empty table for 'repeats' refits of process 'pid'. */
wst_status_t wst_thread_cpu_table_init(struct wst_thread_cpu_table *t,
                                       const char *who, pid_t pid,
                                       size_t repeats);

/* Adds refit 'repeat' (0-based): the CPU each thread spent between the
 * samples 'before' and 'after'. A thread first seen in 'after' is counted
 * from zero (it started during the refit). */
void wst_thread_cpu_table_add(struct wst_thread_cpu_table *t, size_t repeat,
                              const struct wst_thread_cpu_sample *before,
                              const struct wst_thread_cpu_sample *after);

/* Prints the table's rows as Markdown table rows (the caller prints the
 * header): median CPU seconds per GiB and per refit, and the share of the
 * time between the samples the thread was on a CPU (median CPU over median
 * interval). 'gib' is the GiB moved per refit. */
void wst_thread_cpu_table_print(const struct wst_thread_cpu_table *t,
                                double gib);

/* The median over refits of the whole process's CPU seconds per refit. */
double wst_thread_cpu_table_process_s(const struct wst_thread_cpu_table *t);

/* What the process's threads but its main one (tid == pid) spent, per
 * refit (median): the bench's sender regenerates its shards on its main
 * thread, which a trainer's push does not ask of it. Threads that exited
 * between two samples are not in it. Over the first
 * WST_THREAD_CPU_OTHERS_REPEATS_MAX refits. */
#define WST_THREAD_CPU_OTHERS_REPEATS_MAX 1000
double wst_thread_cpu_table_others_s(const struct wst_thread_cpu_table *t);

/* Frees the table's arrays. */
void wst_thread_cpu_table_release(struct wst_thread_cpu_table *t);

#endif
