/* wstream-tcp-floor - what kernel TCP itself carries on this host, for a
 * refit's footprint with every byte verified, without UCX (issue 17).
 *
 * The bar is ucx_perftest, which streams one buffer that stays in
 * cache, busy-polls, and hashes nothing. A verified refit reads a model
 * from memory, writes it to other memory, and hashes both sides. Before
 * building a tcp path of our own, or calling UCX the bound, this measures
 * what the kernel's TCP gives such a stream on this host, between two real
 * processes over loopback, with S streams (a thread and a connection
 * each, as wstream's lanes):
 *   bare       send() from the source, recv() into the destination;
 *   bare poll  the same without sleeping: each side retries a call that
 *              would block (MSG_DONTWAIT), as perftest busy-polls;
 *   hash hot   each side hashes each segment next to its send or recv,
 *              while it is in cache (the receiver's verify today; the
 *              sender's would be a change);
 *   hash after the same, but the sender hashes each segment just after
 *              its send returned (the kernel has read it: is it still in
 *              cache?);
 *   hash ahead the receiver as in hash hot; the sender's bytes hashed by
 *              a thread of their own beside each stream, from memory
 *              (wstream's sender today: digest threads ahead of the send).
 * Hashing is the digest's own (digest.h, 64 KiB parts by position), so the
 * receiver's sum is checked against the sender's; every round's bytes are
 * also checked against the source after it, untimed. The modes alternate in
 * each repeat, so each repeat shares the host's noise.
 *
 * Each mode's line gives, beside its GB/s, the CPU seconds both processes
 * spent per GiB (the kernel's copies are in them), to set beside
 * wstream-bench's thread table.
 *
 * Usage: wstream-tcp-floor --version, or wstream-tcp-floor [SIZE_MIB [STREAMS
 * [SEGMENT_KIB [REPEATS]]]] (default 1024 MiB, 1 stream, 1024 KiB segments, 5
 * repeats; medians printed). SIZE must be a multiple of STREAMS x SEGMENT,
 * SEGMENT of 64. Exit 0 with every byte checked, 1 on a failure, 2 on bad
 * usage.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <wstream/version.h>

#include "clock.h"
#include "digest.h"
#include "floor.h"
#include "median.h"
#include "pattern.h"

#define STREAMS_MAX 16
/* The modes are floor.h's, so that wstream-bench reads what this
 * prints under the same names. */
enum mode {
    MODE_BARE = WST_FLOOR_BARE,
    MODE_BARE_POLL = WST_FLOOR_BARE_POLL,
    MODE_HASH_HOT = WST_FLOOR_HASH_HOT,
    MODE_HASH_AFTER = WST_FLOOR_HASH_AFTER,
    MODE_HASH_AHEAD = WST_FLOOR_HASH_AHEAD,
};

/* One stream's share of a round, on either side. 'buf' is not owned. */
struct stream {
    int fd;
    unsigned char *buf; /* the whole source or destination */
    size_t off, len, seg;
    enum mode mode;
    uint64_t sum; /* the digest parts of [off, off + len) */
    int failed;   /* errno of the first failed call, or 0 */
};

/* 'flags' MSG_DONTWAIT: retry instead of sleeping (bare poll). */
static int send_all(int fd, const void *p, size_t n, int flags)
{
    const unsigned char *c = p;

    while (n > 0) {
        ssize_t k = send(fd, c, n, MSG_NOSIGNAL | flags);
        if (k < 0 && (errno == EINTR || errno == EAGAIN))
            continue;
        if (k <= 0)
            return k < 0 ? errno : EPIPE;
        c += k;
        n -= (size_t)k;
    }
    return 0;
}

static int recv_all(int fd, void *p, size_t n, int flags)
{
    unsigned char *c = p;

    while (n > 0) {
        ssize_t k = recv(fd, c, n, flags);
        if (k < 0 && (errno == EINTR || errno == EAGAIN))
            continue;
        if (k <= 0)
            return k < 0 ? errno : ECONNRESET;
        c += k;
        n -= (size_t)k;
    }
    return 0;
}

/* The sender's companion in hash ahead: the share's parts, from memory. */
static void *hash_ahead(void *arg)
{
    struct stream *s = arg;

    s->sum = wst_digest_part(s->buf + s->off, s->len, s->off);
    return NULL;
}

/* A sender stream's round: wait for the receiver's go, send the share,
 * then its sum (the receiver compares). */
static void *send_round(void *arg)
{
    struct stream *s = arg;
    struct stream ahead = *s;
    int flags = s->mode == MODE_BARE_POLL ? MSG_DONTWAIT : 0;
    pthread_t t;
    char go;
    int e;

    s->sum = 0;
    if ((e = recv_all(s->fd, &go, 1, flags)) != 0)
        goto out_failed;
    if (s->mode == MODE_HASH_AHEAD &&
        (e = pthread_create(&t, NULL, hash_ahead, &ahead)) != 0)
        goto out_failed;
    for (size_t o = 0; o < s->len; o += s->seg) {
        const unsigned char *p = s->buf + s->off + o;
        if (s->mode == MODE_HASH_HOT)
            s->sum += wst_digest_part(p, s->seg, s->off + o);
        if ((e = send_all(s->fd, p, s->seg, flags)) != 0)
            break;
        if (s->mode == MODE_HASH_AFTER)
            s->sum += wst_digest_part(p, s->seg, s->off + o);
    }
    if (s->mode == MODE_HASH_AHEAD) {
        pthread_join(t, NULL);
        s->sum = ahead.sum;
    }
    if (e == 0)
        e = send_all(s->fd, &s->sum, sizeof(s->sum), flags);
    if (e == 0)
        return NULL;
out_failed:
    s->failed = e;
    return NULL;
}

/* A receiver stream's round: say go, land the share, hash it unless
 * bare, and compare the sender's sum with its own. */
static void *recv_round(void *arg)
{
    struct stream *s = arg;
    int flags = s->mode == MODE_BARE_POLL ? MSG_DONTWAIT : 0;
    uint64_t theirs;
    int e;

    s->sum = 0;
    if ((e = send_all(s->fd, "g", 1, flags)) != 0)
        goto out_failed;
    for (size_t o = 0; o < s->len; o += s->seg) {
        unsigned char *p = s->buf + s->off + o;
        if ((e = recv_all(s->fd, p, s->seg, flags)) != 0)
            goto out_failed;
        if (s->mode != MODE_BARE && s->mode != MODE_BARE_POLL)
            s->sum += wst_digest_part(p, s->seg, s->off + o);
    }
    if ((e = recv_all(s->fd, &theirs, sizeof(theirs), flags)) != 0)
        goto out_failed;
    if ((s->mode != MODE_BARE && s->mode != MODE_BARE_POLL) &&
        theirs != s->sum) {
        fprintf(stderr, "%s: stream at %zu: digest differs from the sender's\n",
                wst_floor_mode_names[s->mode], s->off);
        e = EIO;
        goto out_failed;
    }
    return NULL;
out_failed:
    s->failed = e;
    return NULL;
}

/* Runs one round of 'mode' on every stream with 'fn'; 0 or an errno. */
static int round_all(struct stream *s, unsigned n, enum mode mode,
                     void *(*fn)(void *))
{
    pthread_t t[STREAMS_MAX];
    unsigned started = 0;
    int e = 0;

    for (; started < n; started++) {
        s[started].mode = mode;
        s[started].failed = 0;
        if ((e = pthread_create(&t[started], NULL, fn, &s[started])) != 0)
            break;
    }
    for (unsigned i = 0; i < started; i++) {
        pthread_join(t[i], NULL);
        if (e == 0)
            e = s[i].failed;
    }
    return e;
}

/* The sender process: connects S streams to 'port' and serves rounds
 * until the receiver closes them. */
static double cpu_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int sender(uint16_t port, int cpu_fd, size_t size, unsigned n,
                  size_t seg, unsigned rounds)
{
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons(port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    struct stream s[STREAMS_MAX];
    unsigned char *src = malloc(size);
    int rc = 1;

    if (src == NULL)
        return 1;
    wst_bench_pattern_fill(src, size, 0x9e3779b97f4a7c15ull);
    for (unsigned i = 0; i < n; i++) {
        s[i] = (struct stream){
            .buf = src, .off = i * (size / n), .len = size / n, .seg = seg};
        s[i].fd = socket(AF_INET, SOCK_STREAM, 0);
        if (s[i].fd < 0 || connect(s[i].fd, (void *)&a, sizeof(a)) != 0) {
            perror("sender: connect");
            goto out_free;
        }
    }
    for (unsigned r = 0; r < rounds; r++) {
        double c = cpu_s();
        if (round_all(s, n, (enum mode)(r % WST_FLOOR_MODES), send_round) != 0)
            goto out_free;
        c = cpu_s() - c; /* this process's CPU time in the round */
        if (write(cpu_fd, &c, sizeof(c)) != (ssize_t)sizeof(c))
            goto out_free;
    }
    rc = 0;
out_free:
    free(src); /* the sockets close at exit */
    return rc;
}

int main(int argc, char **argv)
{
    size_t size = (size_t)(argc > 1 ? strtoull(argv[1], NULL, 10) : 1024) << 20;
    unsigned n = argc > 2 ? (unsigned)strtoul(argv[2], NULL, 10) : 1;
    size_t seg = (size_t)(argc > 3 ? strtoull(argv[3], NULL, 10) : 1024) << 10;
    unsigned repeats = argc > 4 ? (unsigned)strtoul(argv[4], NULL, 10) : 5;
    static double gbs[WST_FLOOR_MODES][WST_FLOOR_REPEATS_MAX],
        cpu[WST_FLOOR_MODES][WST_FLOOR_REPEATS_MAX];
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t alen = sizeof(a);
    struct stream s[STREAMS_MAX];
    uint64_t want[STREAMS_MAX];
    unsigned char *dst;
    int ls, cpu_pipe[2], rc = 1;
    pid_t pid;

    if (argc == 2 && strcmp(argv[1], "--version") == 0) {
        printf("wstream-tcp-floor %s\n", WST_VERSION_STRING);
        return 0;
    }
    if (n == 0 || n > STREAMS_MAX || seg == 0 || seg % WST_DIGEST_CHUNK ||
        size == 0 || size % (n * seg) || repeats == 0 ||
        repeats > WST_FLOOR_REPEATS_MAX) {
        fprintf(stderr,
                "usage: %s [SIZE_MIB [STREAMS (1..%d) [SEGMENT_KIB (a "
                "multiple of 64) [REPEATS (1..%d)]]]]\n"
                "SIZE must be a multiple of STREAMS x SEGMENT\n",
                argv[0], STREAMS_MAX, WST_FLOOR_REPEATS_MAX);
        return 2;
    }
    ls = socket(AF_INET, SOCK_STREAM, 0);
    if (ls < 0 || bind(ls, (void *)&a, sizeof(a)) != 0 ||
        listen(ls, STREAMS_MAX) != 0 ||
        getsockname(ls, (void *)&a, &alen) != 0) {
        perror("listen on loopback");
        return 1;
    }
    for (unsigned i = 0; i < STREAMS_MAX; i++)
        s[i].fd = -1;
    if (pipe(cpu_pipe) != 0) {
        perror("pipe");
        return 1;
    }
    pid = fork();
    if (pid < 0) {
        perror("fork");
        return 1;
    }
    if (pid == 0) {
        close(ls);
        close(cpu_pipe[0]);
        _exit(sender(ntohs(a.sin_port), cpu_pipe[1], size, n, seg,
                     repeats * WST_FLOOR_MODES));
    }
    close(cpu_pipe[1]);
    dst = malloc(size);
    if (dst == NULL) {
        fprintf(stderr, "no memory for %zu MiB\n", size >> 20);
        goto out_stop_sender;
    }
    /* The source as the sender fills it: each share's parts, to check
     * every round's bytes. */
    wst_bench_pattern_fill(dst, size, 0x9e3779b97f4a7c15ull);
    for (unsigned i = 0; i < n; i++)
        want[i] =
            wst_digest_part(dst + i * (size / n), size / n, i * (size / n));
    for (unsigned i = 0; i < n; i++) {
        s[i] = (struct stream){
            .buf = dst, .off = i * (size / n), .len = size / n, .seg = seg};
        s[i].fd = accept(ls, NULL, NULL);
        if (s[i].fd < 0) {
            perror("accept");
            goto out_free_dst;
        }
    }
    for (unsigned k = 0; k < repeats; k++) {
        for (int m = 0; m < WST_FLOOR_MODES; m++) {
            double t;
            int e;
            memset(dst, 0, size);
            t = wst_now_s();
            double c = cpu_s(), theirs;
            e = round_all(s, n, (enum mode)m, recv_round);
            gbs[m][k] = (double)size / (wst_now_s() - t) / 1e9;
            c = cpu_s() - c;
            if (e == 0 && read(cpu_pipe[0], &theirs, sizeof(theirs)) !=
                              (ssize_t)sizeof(theirs))
                e = EPIPE; /* the sender is gone */
            cpu[m][k] = (c + theirs) / ((double)size / (1u << 30));
            if (e != 0) {
                fprintf(stderr, "%s: %s\n", wst_floor_mode_names[m],
                        strerror(e));
                goto out_free_dst;
            }
            for (unsigned i = 0; i < n; i++)
                if (wst_digest_part(dst + s[i].off, s[i].len, s[i].off) !=
                    want[i]) {
                    fprintf(stderr, "%s: the bytes differ from the source\n",
                            wst_floor_mode_names[m]);
                    goto out_free_dst;
                }
        }
    }
    printf("wstream-tcp-floor: %zu MiB over %u loopback TCP stream%s, %zu "
           "KiB segments, %u repeats; every byte checked\n",
           size >> 20, n, n == 1 ? "" : "s", seg >> 10, repeats);
    for (int m = 0; m < WST_FLOOR_MODES; m++) {
        printf("%-10s GB/s:", wst_floor_mode_names[m]);
        for (unsigned k = 0; k < repeats; k++)
            printf(" %.2f", gbs[m][k]);
        printf("  median %.2f; CPU s/GiB, both processes: %.2f\n",
               wst_bench_median(gbs[m], repeats),
               wst_bench_median(cpu[m], repeats));
    }
    rc = 0;
out_free_dst:
    free(dst);
out_stop_sender:
    if (rc != 0)
        kill(pid, SIGKILL); /* it may wait on a stream we gave up */
    int status = 0;
    waitpid(pid, &status, 0);
    if (rc == 0 && !(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
        fprintf(stderr, "the sender process failed\n");
        rc = 1;
    }
    for (unsigned i = 0; i < n; i++)
        if (s[i].fd >= 0)
            close(s[i].fd);
    close(cpu_pipe[0]);
    close(ls);
    return rc;
}
