/* wstream-pull-bench - whether a receiver that pulls a sender's bytes
 * itself could carry shared memory at line rate (issue 17).
 *
 * Over shared memory with peer-error handling, UCX 1.13 gives up its
 * zero-copy rendezvous and moves each byte twice: the sender into a
 * shared segment, the receiver out of it. A receiver could instead read
 * the sender's memory with one copy (process_vm_readv, what UCX's cma
 * does) into the place it chose, and keep its own failure handling (a
 * sender gone is ESRCH, not an abort). Before building such a mover this
 * measures, between two real processes on this host, for one receiver
 * thread:
 *   pull        process_vm_readv of each message into the destination;
 *   pull+hash   the same, each message's 64 KiB digest parts hashed right
 *               after it landed (the receiver's verify, while in cache);
 *   two copies  the sender's process copies each message into a shared
 *               ring slot, the receiver's copies it out: UCX's path today,
 *               without UCX;
 *   copy        memcpy inside one process: the memory's own ceiling.
 * The ratios against `wstream-bench --transport shm` and ucx_perftest in
 * the same run choose; figures in NOTES.md.
 *
 * Usage: wstream-pull-bench [SIZE_MIB [MESSAGE_KIB [REPEATS]]]
 * (default 1024 MiB, 8192 KiB messages, 5 repeats; medians printed).
 * Exit 0 with every pulled byte checked against the source, 1 otherwise,
 * 77 when this host forbids reading another process (ptrace rules).
 */
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "clock.h"
#include "digest.h"
#include "median.h"
#include "pattern.h"

#define REPEATS_MAX 100
/* The two-copy ring: slots the sender fills and the receiver empties. */
#define RING_SLOTS 8u

/* Shared between the two processes: the ring and its counters. The
 * sender publishes 'filled', the receiver 'emptied'; each spins. */
struct ring {
    volatile uint64_t filled, emptied;
    volatile int start, quit;
    uint64_t src_addr; /* the sender's buffer, for the pulls */
    unsigned char slots[];
};

/* The sender's side: holds 'src' for the pulls, and for each two-copy
 * round copies every message into the ring as slots come free. */
static void sender(struct ring *r, const unsigned char *src, size_t size,
                   size_t msg)
{
    uint64_t n_msgs = (size + msg - 1) / msg;

    for (;;) {
        while (!r->start && !r->quit)
            usleep(100); /* idle while the receiver pulls */
        if (r->quit)
            return;
        for (uint64_t m = 0; m < n_msgs; m++) {
            while (r->filled - r->emptied >= RING_SLOTS)
                ;
            size_t off = (size_t)m * msg;
            size_t len = size - off < msg ? size - off : msg;
            memcpy(r->slots + (size_t)(m % RING_SLOTS) * msg, src + off, len);
            __atomic_store_n(&r->filled, m + 1, __ATOMIC_RELEASE);
        }
        r->start = 0;
    }
}

/* Pulls every message of the sender's buffer into 'dst'; 'hash' adds each
 * message's digest parts to *sum. 0, or -1 with errno. */
static int pull(pid_t pid, uint64_t src_addr, unsigned char *dst, size_t size,
                size_t msg, int hash, uint64_t *sum)
{
    for (size_t off = 0; off < size; off += msg) {
        size_t len = size - off < msg ? size - off : msg;
        struct iovec local = {.iov_base = dst + off, .iov_len = len};
        struct iovec remote = {.iov_base = (void *)(uintptr_t)(src_addr + off),
                               .iov_len = len};
        ssize_t got = process_vm_readv(pid, &local, 1, &remote, 1, 0);
        if (got != (ssize_t)len) {
            if (got >= 0)
                errno = EIO;
            return -1;
        }
        if (hash)
            *sum += wst_digest_part(dst + off, len, off);
    }
    return 0;
}

static void two_copies(struct ring *r, unsigned char *dst, size_t size,
                       size_t msg)
{
    uint64_t n_msgs = (size + msg - 1) / msg;

    r->filled = r->emptied = 0;
    __atomic_store_n(&r->start, 1, __ATOMIC_RELEASE);
    for (uint64_t m = 0; m < n_msgs; m++) {
        while (__atomic_load_n(&r->filled, __ATOMIC_ACQUIRE) <= m)
            ;
        size_t off = (size_t)m * msg;
        size_t len = size - off < msg ? size - off : msg;
        memcpy(dst + off, r->slots + (size_t)(m % RING_SLOTS) * msg, len);
        __atomic_store_n(&r->emptied, m + 1, __ATOMIC_RELEASE);
    }
    while (r->start)
        ;
}

int main(int argc, char **argv)
{
    size_t size = (size_t)(argc > 1 ? strtoull(argv[1], NULL, 10) : 1024) << 20;
    size_t msg = (size_t)(argc > 2 ? strtoull(argv[2], NULL, 10) : 8192) << 10;
    unsigned repeats = argc > 3 ? (unsigned)strtoul(argv[3], NULL, 10) : 5;
    double gbs[4][REPEATS_MAX];
    static const char *const names[4] = {"pull", "pull+hash", "two copies",
                                         "copy"};
    int rc = 1;

    if (size == 0 || msg == 0 || msg % WST_DIGEST_CHUNK != 0 || repeats == 0 ||
        repeats > REPEATS_MAX) {
        fprintf(stderr,
                "usage: %s [SIZE_MIB [MESSAGE_KIB (a multiple of "
                "64) [REPEATS (1..100)]]]\n",
                argv[0]);
        return 2;
    }
    size_t ring_bytes = sizeof(struct ring) + (size_t)RING_SLOTS * msg;
    struct ring *r = mmap(NULL, ring_bytes, PROT_READ | PROT_WRITE,
                          MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    unsigned char *src = malloc(size), *dst = malloc(size);
    if (r == MAP_FAILED || src == NULL || dst == NULL) {
        fprintf(stderr, "no memory for %zu MiB twice\n", size >> 20);
        return 1;
    }
    wst_bench_pattern_fill(src, size, 0x9e3779b97f4a7c15ull);
    memset(dst, 0, size); /* touched: page faults are not what we time */
    r->src_addr = (uint64_t)(uintptr_t)src;
    uint64_t want = wst_digest_part(src, size, 0);

    pid_t pid = fork();
    if (pid < 0) {
        perror("fork");
        return 1;
    }
    if (pid == 0) {
        /* The sender's own copy of the bytes (copy-on-write made real). */
        wst_bench_pattern_fill(src, size, 0x9e3779b97f4a7c15ull);
        sender(r, src, size, msg);
        _exit(0);
    }
    /* Reading a child is allowed under Yama's default scope 1 too. */
    uint64_t sum = 0;
    if (pull(pid, r->src_addr, dst, size, msg, 0, &sum) != 0) {
        int e = errno;
        fprintf(stderr, "process_vm_readv of the sender: %s\n", strerror(e));
        rc = e == EPERM || e == ENOSYS ? 77 : 1; /* ptrace rules, seccomp */
        goto out_stop_sender;
    }
    for (unsigned k = 0; k < repeats; k++) {
        double t;
        memset(dst, 0, size);
        t = wst_now_s();
        if (pull(pid, r->src_addr, dst, size, msg, 0, &sum) != 0)
            goto out_failed;
        gbs[0][k] = (double)size / (wst_now_s() - t) / 1e9;
        if (wst_digest_part(dst, size, 0) != want) {
            fprintf(stderr, "pull: the bytes differ from the source\n");
            goto out_stop_sender;
        }
        memset(dst, 0, size);
        sum = 0;
        t = wst_now_s();
        if (pull(pid, r->src_addr, dst, size, msg, 1, &sum) != 0)
            goto out_failed;
        gbs[1][k] = (double)size / (wst_now_s() - t) / 1e9;
        if (sum != want) {
            fprintf(stderr, "pull+hash: digest differs from the source's\n");
            goto out_stop_sender;
        }
        memset(dst, 0, size);
        t = wst_now_s();
        two_copies(r, dst, size, msg);
        gbs[2][k] = (double)size / (wst_now_s() - t) / 1e9;
        if (wst_digest_part(dst, size, 0) != want) {
            fprintf(stderr, "two copies: the bytes differ from the source\n");
            goto out_stop_sender;
        }
        t = wst_now_s();
        memcpy(dst, src, size);
        gbs[3][k] = (double)size / (wst_now_s() - t) / 1e9;
    }
    printf("wstream-pull-bench: %zu MiB in %zu KiB messages, %u repeats, one "
           "receiver thread; every byte checked\n",
           size >> 20, msg >> 10, repeats);
    for (int c = 0; c < 4; c++) {
        printf("%-11s GB/s:", names[c]);
        for (unsigned k = 0; k < repeats; k++)
            printf(" %.2f", gbs[c][k]);
        printf("  median %.2f\n", wst_bench_median(gbs[c], repeats));
    }
    rc = 0;
    goto out_stop_sender;
out_failed:
    fprintf(stderr, "process_vm_readv: %s\n", strerror(errno));
out_stop_sender:
    r->quit = 1;
    waitpid(pid, NULL, 0);
    free(dst);
    free(src);
    munmap(r, ring_bytes);
    return rc;
}
