/* floor.c - runs wstream-tcp-floor and reads its medians (floor.h). */
#include "floor.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "clock.h"

const char *const wst_floor_mode_names[WST_FLOOR_MODES] = {
    "bare", "bare poll", "hash hot", "hash after", "hash ahead"};

/* A mode's line, "NAME   GB/s: ... median G; CPU s/GiB, both processes:
 * C": its figures into *f. A line of no mode is left alone. */
static void parse_line(const char *line, struct wst_bench_floor *f, int *seen)
{
    for (int m = 0; m < WST_FLOOR_MODES; m++) {
        size_t n = strlen(wst_floor_mode_names[m]);
        const char *p = line + n, *med, *cpu;
        if (strncmp(line, wst_floor_mode_names[m], n) != 0)
            continue;
        while (*p == ' ')
            p++;
        if (strncmp(p, "GB/s:", 5) != 0)
            continue; /* "bare" is the start of "bare poll" */
        med = strstr(p, "median ");
        cpu = strstr(p, "processes: ");
        if (med == NULL || cpu == NULL)
            return;
        f->gbps[m] = strtod(med + 7, NULL);
        f->cpu_s_gib[m] = strtod(cpu + 11, NULL);
        seen[m] = 1;
        return;
    }
}

wst_status_t wst_bench_floor_run(const char *bin, uint64_t bytes,
                                 unsigned streams, unsigned repeats,
                                 double timeout_s, struct wst_bench_floor *f,
                                 char *err, size_t errlen)
{
    char a_mib[24], a_streams[16], a_repeats[16], buf[4096];
    int seen[WST_FLOOR_MODES] = {0}, fds[2], status = 0;
    double deadline = wst_now_s() + timeout_s;
    size_t have = 0;
    int timed_out = 0;
    pid_t pid;

    *f = (struct wst_bench_floor){.bytes = bytes, .streams = streams};
    if (streams == 0 || bytes == 0 || bytes % ((uint64_t)streams << 20)) {
        snprintf(err, errlen,
                 "the floor needs a size that is a multiple of %u MiB",
                 streams);
        return WST_ERR_INVALID;
    }
    snprintf(a_mib, sizeof(a_mib), "%llu", (unsigned long long)(bytes >> 20));
    snprintf(a_streams, sizeof(a_streams), "%u", streams);
    snprintf(a_repeats, sizeof(a_repeats), "%u",
             repeats < WST_FLOOR_REPEATS_MAX ? repeats : WST_FLOOR_REPEATS_MAX);
    if (pipe(fds) != 0) {
        snprintf(err, errlen, "pipe: %s", strerror(errno));
        return WST_ERR_IO;
    }
    fflush(stdout);
    pid = fork();
    if (pid < 0) {
        snprintf(err, errlen, "fork: %s", strerror(errno));
        close(fds[0]);
        close(fds[1]);
        return WST_ERR_IO;
    }
    if (pid == 0) {
        dup2(fds[1], STDOUT_FILENO);
        close(fds[0]);
        close(fds[1]);
        execl(bin, bin, a_mib, a_streams, "1024", a_repeats, (char *)NULL);
        fprintf(stderr, "cannot run %s: %s\n", bin, strerror(errno));
        _exit(127);
    }
    close(fds[1]);
    /* Lines as they come; the last partial one waits for its end. */
    for (;;) {
        double left = deadline - wst_now_s();
        struct pollfd pfd = {.fd = fds[0], .events = POLLIN};
        if (left <= 0) {
            timed_out = 1;
            break;
        }
        int r = poll(&pfd, 1, (int)(left * 1000) + 1);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            continue; /* the deadline is checked above */
        ssize_t n = read(fds[0], buf + have, sizeof(buf) - 1 - have);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        have += (size_t)n;
        buf[have] = '\0';
        char *line = buf, *nl;
        while ((nl = strchr(line, '\n')) != NULL) {
            *nl = '\0';
            printf("floor: %s\n", line);
            parse_line(line, f, seen);
            line = nl + 1;
        }
        have = strlen(line);
        memmove(buf, line, have);
        if (have == sizeof(buf) - 1)
            have = 0; /* a line longer than any it prints: dropped */
    }
    close(fds[0]);
    if (timed_out)
        kill(pid, SIGKILL);
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    fflush(stdout);
    if (timed_out) {
        snprintf(err, errlen, "%s did not finish in %.0f s", bin, timeout_s);
        return WST_ERR_TIMED_OUT;
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        snprintf(err, errlen, "%s failed (exit %d)", bin,
                 WIFEXITED(status) ? WEXITSTATUS(status) : -1);
        return WST_ERR_IO;
    }
    for (int m = 0; m < WST_FLOOR_MODES; m++)
        if (!seen[m]) {
            snprintf(err, errlen, "%s printed no \"%s\" line", bin,
                     wst_floor_mode_names[m]);
            return WST_ERR_IO;
        }
    return WST_OK;
}
