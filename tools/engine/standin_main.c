/* standin_main.c - wstream-engine-standin: a stand-in engine process that
 * speaks the agent's engine socket protocol (README.md, "Engine socket
 * protocol") for tests and demos.
 *
 * With --create it owns the live buffers, as an engine does: it creates the
 * POSIX shm object (which must not exist), poisons it with 0xA5 bytes and
 * unlinks it when it exits; the agent maps it from its layout file.
 * Otherwise it maps an existing object read-only. With --create and
 * --cuda-device N the live buffers are --shm-bytes of device memory on GPU
 * N instead (cudaMalloc, poisoned the same way, freed at exit): their CUDA
 * IPC handle goes into the state file as "cuda_ipc" (128 hex digits, with
 * "cuda_device" and "cuda_bytes") before it connects, for whoever writes
 * the agent's layout file.
 *
 * It connects to the agent's socket (retrying up to 10 s) and checks the
 * fail-closed promise: between BEGIN
 * and its READY (sent after --ready-delay-ms) nobody may write the live
 * bytes, so it hashes the whole mapping at BEGIN and again just before
 * READY, with the integrity digest (common/digest.h): host memory on one
 * thread per core, device memory on the GPU with the digest kernel that
 * tests/gpu checks against its CPU twin, so that the check costs little
 * and the demo's refit times are mostly wstream's, not the check's. It
 * finalizes every layer, and writes its state to --state-file after every
 * message (common/atomic_file.h), with the label of the last BEGIN and of
 * the version it serves ("label", "committed_label": "" for none).
 *
 * Losing the agent between READY and COMMITTED leaves it "unusable" (the
 * live memory may be half written).
 *
 * Exit codes: 0 on EOF from the agent (or when it hung up: a reset or a
 * broken pipe, as when it is killed mid-refit); 1 set-up failed (also: no
 * CUDA or no GPU for --cuda-device); 2 bad usage, as for every wstream
 * program; 3 live memory written before READY; 4 a protocol error, "ERROR
 * busy" or a failed copy of the live device memory.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "atomic_file.h"
#include "config.h"
#include "digest.h"
#include "digest_gpu.h"
#include "gpu.h"
#include "label.h"
#include "log.h"
#include "shm.h"

#define LINE_MAX_BYTES 600 /* the '\n' included */

struct standin_settings {
    char *socket;
    char *shm;
    uint64_t shm_bytes;
    uint64_t ready_delay_ms;
    int ready_check;
    char *state_file;
    int refuse;
    uint64_t refuse_version;
    int create;
    char *cuda_device; /* text: an int, -1 for host shm */
};

static const struct wst_config_entry standin_config[] = {
    {"socket", WST_CONFIG_STRING, "", "the agent's --engine-socket path",
     offsetof(struct standin_settings, socket), NULL, NULL},
    {"shm", WST_CONFIG_STRING, "", "POSIX shm object of the live regions",
     offsetof(struct standin_settings, shm), NULL, NULL},
    {"shm-bytes", WST_CONFIG_UINT, "0",
     "bytes of the live memory to map (or allocate) and hash: the shm, or "
     "the device memory with --cuda-device",
     offsetof(struct standin_settings, shm_bytes), NULL, NULL},
    {"ready-delay-ms", WST_CONFIG_UINT, "0",
     "milliseconds between BEGIN and READY (live bytes watched meanwhile)",
     offsetof(struct standin_settings, ready_delay_ms), NULL, NULL},
    {"ready-check", WST_CONFIG_BOOL, "yes",
     "hash the live memory at BEGIN and before READY (no: a benchmark's "
     "engine, which pauses without the check; a real engine does not hash "
     "its weights to pause)",
     offsetof(struct standin_settings, ready_check), NULL, NULL},
    {"state-file", WST_CONFIG_STRING, "",
     "write the engine state here after every message",
     offsetof(struct standin_settings, state_file), NULL, NULL},
    {"refuse", WST_CONFIG_BOOL, "no", "answer every BEGIN with REFUSE",
     offsetof(struct standin_settings, refuse), NULL, NULL},
    {"refuse-version", WST_CONFIG_UINT, "0",
     "answer BEGIN of this version (only) with REFUSE; 0: none",
     offsetof(struct standin_settings, refuse_version), NULL, NULL},
    {"create", WST_CONFIG_BOOL, "no",
     "create the shm (poisoned), own it, unlink it at exit",
     offsetof(struct standin_settings, create), NULL, NULL},
    {"cuda-device", WST_CONFIG_STRING, "-1",
     "with --create: the live memory is --shm-bytes of device memory on this "
     "GPU, exported by CUDA IPC (its handle goes to the state file); -1: "
     "host shm",
     offsetof(struct standin_settings, cuda_device), NULL, NULL},
    WST_CONFIG_END,
};

struct standin {
    struct standin_settings set;
    struct wst_logger log; /* for the CUDA seam (common/gpu/gpu.h) */
    /* The live memory, set.shm_bytes long: a read-only shm mapping, or with
     * device >= 0 device memory this process allocated (wst_gpu_malloc). */
    const void *live;
    int device; /* -1: host shm */
    /* device only: the digest context and its stream (owned) */
    struct wst_gpu_digest *dg;
    wst_gpu_stream_t stream;
    char ipc_hex[WST_GPU_IPC_HANDLE_BYTES * 2 + 1]; /* device only */
    int fd;
    char rbuf[LINE_MAX_BYTES];
    size_t rlen;
    const char *state;                   /* "serving", "paused", "unusable" */
    char reason[LINE_MAX_BYTES];         /* the agent's, when unusable */
    char label[WST_LABEL_MAX];           /* the last BEGIN's; "": none */
    char committed_label[WST_LABEL_MAX]; /* the served version's */
    unsigned long long committed, begins, layers, refused;
    int gone; /* the agent hung up (reset or broken pipe): as EOF */
};

static void sleep_ms(uint64_t ms)
{
    struct timespec ts = {.tv_sec = (time_t)(ms / 1000),
                          .tv_nsec = (long)(ms % 1000) * 1000000L};

    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

static int connect_retry(const char *path)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};

    if (strlen(path) >= sizeof(sa.sun_path)) {
        fprintf(stderr, "standin: --socket %s: path too long\n", path);
        return -1;
    }
    memcpy(sa.sun_path, path, strlen(path) + 1);
    for (int i = 0; i < 200; i++) { /* 200 x 50 ms: 10 s */
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0) {
            fprintf(stderr, "standin: socket: %s\n", strerror(errno));
            return -1;
        }
        if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0)
            return fd;
        close(fd);
        sleep_ms(50);
    }
    fprintf(stderr, "standin: cannot connect to %s for 10 s: %s\n", path,
            strerror(errno));
    return -1;
}

static const void *map_live(const char *name, uint64_t bytes)
{
    char err[256];
    void *p = NULL;

    if (wst_shm_map(name, bytes, 0, &p, err, sizeof(err)) != WST_OK) {
        fprintf(stderr, "standin: %s\n", err);
        return NULL;
    }
    return p;
}

/* The engine's own buffers: created here, poisoned so that a byte no refit
 * wrote cannot pass for data. */
static const void *create_live(const char *name, uint64_t bytes)
{
    char err[256];
    void *p = NULL;

    if (wst_shm_create(name, bytes, &p, err, sizeof(err)) != WST_OK) {
        fprintf(stderr, "standin: %s\n", err);
        return NULL;
    }
    return p;
}

/* --cuda-device: an integer >= -1; -2 after printing why it is not. */
static int parse_device(const char *text)
{
    char *end = NULL;
    long v;

    errno = 0;
    v = strtol(text, &end, 10);
    if (text[0] == '\0' || *end != '\0' || errno != 0 || v < -1 ||
        v > INT_MAX) {
        fprintf(stderr,
                "wstream-engine-standin: --cuda-device: bad value '%s': "
                "expected a GPU ordinal, or -1 for host shm\n",
                text);
        return -2;
    }
    return (int)v;
}

static void hex_encode(const unsigned char *in, size_t n, char *out)
{
    static const char digits[] = "0123456789abcdef";

    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[in[i] >> 4];
        out[2 * i + 1] = digits[in[i] & 15];
    }
    out[2 * n] = '\0';
}

/* The engine's buffers on GPU e->device: allocated, poisoned like the shm,
 * exported by CUDA IPC (e->ipc_hex), and a digest context to hash them.
 * On failure everything is freed; the seam has logged CUDA's reason. */
static int create_device_live(struct standin *e)
{
    unsigned char handle[WST_GPU_IPC_HANDLE_BYTES];
    void *p = NULL;
    uint64_t bytes = e->set.shm_bytes;

    if (wst_gpu_set_device(&e->log, e->device) != WST_OK ||
        wst_gpu_malloc(&e->log, bytes, &p) != WST_OK)
        goto err;
    /* cudaMemset may return before the poison lands; the agent, another
     * process, is not ordered after it: wait before anyone imports it. */
    if (wst_gpu_memset(&e->log, p, WST_SHM_POISON, bytes) != WST_OK ||
        wst_gpu_stream_sync(&e->log, NULL) != WST_OK ||
        wst_gpu_ipc_export(&e->log, p, handle) != WST_OK ||
        wst_gpu_stream_create(&e->log, &e->stream) != WST_OK)
        goto err_free;
    if (wst_gpu_digest_create(&e->log, 1, &e->dg) != WST_OK)
        goto err_stream;
    hex_encode(handle, sizeof(handle), e->ipc_hex);
    e->live = p;
    return 0;

err_stream:
    wst_gpu_stream_destroy(e->stream);
err_free:
    wst_gpu_free(p);
err:
    fprintf(stderr,
            "standin: cannot create %llu bytes of live device memory on GPU "
            "%d (a CUDA build and a GPU are needed)\n",
            (unsigned long long)bytes, e->device);
    return -1;
}

#define HASH_THREADS_MAX 8

/* One thread's share of a host hash: whole digest chunks from 'start'. */
struct hash_part {
    const unsigned char *live;
    uint64_t start, len;
    struct wst_digest d;
};

static void *hash_part_run(void *arg)
{
    struct hash_part *h = arg;

    h->d.sum = 0;
    h->d.pos = h->start;
    wst_digest_update(&h->d, h->live + h->start, h->len);
    return NULL;
}

/* The digest (common/digest.h) of host live memory on up to one thread per
 * core: its chunk hashes are independent and summed, so ranges cut at
 * chunk boundaries give the digest of the whole. A demo's refit of a few
 * GB would otherwise wait seconds for this check at every BEGIN. */
static uint64_t hash_host(const void *live, uint64_t bytes)
{
    struct hash_part parts[HASH_THREADS_MAX];
    pthread_t threads[HASH_THREADS_MAX];
    int started[HASH_THREADS_MAX] = {0};
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    uint64_t chunks = (bytes + WST_DIGEST_CHUNK - 1) / WST_DIGEST_CHUNK;
    uint64_t n = cores < 1 ? 1 : (uint64_t)cores;
    struct wst_digest total = {0, bytes};

    if (n > HASH_THREADS_MAX)
        n = HASH_THREADS_MAX;
    if (n > chunks)
        n = chunks ? chunks : 1;
    for (uint64_t i = 0; i < n; i++) {
        uint64_t c0 = chunks * i / n, c1 = chunks * (i + 1) / n;
        uint64_t start = c0 * WST_DIGEST_CHUNK;
        uint64_t stop =
            c1 * WST_DIGEST_CHUNK < bytes ? c1 * WST_DIGEST_CHUNK : bytes;
        parts[i] = (struct hash_part){live, start, stop - start, {0, 0}};
        /* Part 0 runs here; a thread that cannot start runs here too. */
        started[i] = i > 0 && pthread_create(&threads[i], NULL, hash_part_run,
                                             &parts[i]) == 0;
    }
    for (uint64_t i = 0; i < n; i++) {
        if (started[i])
            pthread_join(threads[i], NULL);
        else
            hash_part_run(&parts[i]);
        total.sum += parts[i].d.sum;
    }
    return wst_digest_final(&total);
}

/* Hash of the live bytes; -1 when device memory cannot be read. */
static int hash_live(struct standin *e, uint64_t *hash_p)
{
    if (e->device < 0) {
        *hash_p = hash_host(e->live, e->set.shm_bytes);
        return 0;
    }
    struct wst_digest_run run = {e->live, e->set.shm_bytes, 0};
    struct wst_digest d;
    wst_digest_init(&d);
    if (wst_gpu_digest_runs(e->dg, &run, 1, e->stream, &d) != WST_OK) {
        fprintf(stderr, "standin: cannot hash the live device memory\n");
        return -1;
    }
    d.pos = e->set.shm_bytes;
    *hash_p = wst_digest_final(&d);
    return 0;
}

/* The agent's text goes into a JSON string: escape what JSON needs. */
static void json_escape(const char *in, char *out, size_t len)
{
    size_t j = 0;

    for (; *in && j + 7 < len; in++) {
        if (*in == '"' || *in == '\\')
            out[j++] = '\\';
        if ((unsigned char)*in < 0x20) {
            j += (size_t)snprintf(out + j, len - j, "\\u%04x",
                                  (unsigned char)*in);
            continue;
        }
        out[j++] = *in;
    }
    out[j] = '\0';
}

/* With device memory: what the agent's layout needs to import it. */
static void write_device(const struct standin *e, FILE *f)
{
    if (e->device < 0)
        return;
    fprintf(f,
            ", \"cuda_ipc\": \"%s\", \"cuda_device\": %d, "
            "\"cuda_bytes\": %llu",
            e->ipc_hex, e->device, (unsigned long long)e->set.shm_bytes);
}

/* Not fsynced (wst_atomic_replace): the file is how the tests observe the
 * engine, and a stand-in that synced its disk before each READY would add
 * its own milliseconds to every refit measured through it. */
static void write_state(const struct standin *e)
{
    char reason[2 * LINE_MAX_BYTES], err[512];
    char *text = NULL;
    size_t len = 0;
    FILE *f;

    if (e->set.state_file[0] == '\0')
        return;
    json_escape(e->reason, reason, sizeof(reason));
    f = open_memstream(&text, &len);
    if (f == NULL) {
        fprintf(stderr, "standin: cannot write %s: %s\n", e->set.state_file,
                strerror(errno));
        return;
    }
    char label[2 * WST_LABEL_MAX], committed_label[2 * WST_LABEL_MAX];
    json_escape(e->label, label, sizeof(label));
    json_escape(e->committed_label, committed_label, sizeof(committed_label));
    fprintf(f,
            "{\"state\": \"%s\", \"committed_version\": %llu, "
            "\"begins\": %llu, \"layers\": %llu, \"refused\": %llu, "
            "\"reason\": \"%s\", \"label\": \"%s\", \"committed_label\": "
            "\"%s\"",
            e->state, e->committed, e->begins, e->layers, e->refused, reason,
            label, committed_label);
    write_device(e, f);
    fputs("}\n", f);
    if (fclose(f) != 0)
        fprintf(stderr, "standin: cannot write %s: %s\n", e->set.state_file,
                strerror(errno));
    else if (wst_atomic_replace(e->set.state_file, text, len, 0644, err,
                                sizeof(err)) != WST_OK)
        fprintf(stderr, "standin: cannot write state: %s\n", err);
    free(text);
}

/* 1: a line in 'line' (no '\n'); 0: EOF; -1: error or overlong line. */
static int read_line(struct standin *e, char *line)
{
    for (;;) {
        char *nl = memchr(e->rbuf, '\n', e->rlen);
        if (nl != NULL) {
            size_t n = (size_t)(nl - e->rbuf);
            memcpy(line, e->rbuf, n);
            line[n] = '\0';
            e->rlen -= n + 1;
            memmove(e->rbuf, nl + 1, e->rlen);
            return 1;
        }
        if (e->rlen >= sizeof(e->rbuf)) {
            fprintf(stderr, "standin: protocol error: line over %d bytes\n",
                    LINE_MAX_BYTES);
            return -1;
        }
        ssize_t n = read(e->fd, e->rbuf + e->rlen, sizeof(e->rbuf) - e->rlen);
        if (n < 0 && errno == EINTR)
            continue;
        /* An agent that dies with our reply unread resets the connection:
         * it is gone, as on EOF. */
        if (n < 0 && errno == ECONNRESET) {
            printf("standin: the agent reset the connection\n");
            e->gone = 1;
            return 0;
        }
        if (n < 0) {
            fprintf(stderr, "standin: read: %s\n", strerror(errno));
            return -1;
        }
        if (n == 0) {
            if (e->rlen > 0)
                fprintf(stderr, "standin: EOF inside a line\n");
            return e->rlen > 0 ? -1 : 0;
        }
        e->rlen += (size_t)n;
    }
}

static int send_line(struct standin *e, const char *line)
{
    size_t len = strlen(line);

    if (send(e->fd, line, len, MSG_NOSIGNAL) != (ssize_t)len) {
        if (errno == EPIPE || errno == ECONNRESET) {
            printf("standin: the agent hung up (%s)\n", strerror(errno));
            e->gone = 1;
        } else {
            fprintf(stderr, "standin: send: %s\n", strerror(errno));
        }
        return -1;
    }
    return 0;
}

static int on_begin(struct standin *e, unsigned long long v)
{
    char reply[64];
    uint64_t before, after;

    e->begins++;
    if (e->set.refuse || (e->set.refuse_version != 0 &&
                          v == (unsigned long long)e->set.refuse_version)) {
        e->refused++;
        snprintf(reply, sizeof(reply), "REFUSE %llu refused by --refuse%s\n", v,
                 e->set.refuse ? "" : "-version");
        return send_line(e, reply);
    }
    e->state = "paused";
    write_state(e);
    before = after = 0;
    if (e->set.ready_check && hash_live(e, &before) != 0)
        return -1;
    sleep_ms(e->set.ready_delay_ms);
    if (e->set.ready_check && hash_live(e, &after) != 0)
        return -1;
    if (before != after) {
        printf("VIOLATION: live memory written before READY (BEGIN %llu)\n", v);
        fflush(stdout);
        exit(3);
    }
    snprintf(reply, sizeof(reply), "READY %llu\n", v);
    return send_line(e, reply);
}

/* "<word> <v>" or "<word> <v> <label>" (a label by common/label.h's
 * rule): 0 with the version and label ("" for none), else -1. */
static int parse_versioned(const char *line, const char *word,
                           unsigned long long *v_p, char *label)
{
    size_t n = strlen(word);
    char *end = NULL;

    if (strncmp(line, word, n) != 0 || line[n] != ' ' || line[n + 1] < '0' ||
        line[n + 1] > '9')
        return -1;
    errno = 0;
    *v_p = strtoull(line + n + 1, &end, 10);
    if (errno != 0)
        return -1;
    label[0] = '\0';
    if (*end == '\0')
        return 0;
    if (*end != ' ' ||
        wst_label_check(end + 1, strlen(end + 1), NULL, 0) != WST_OK ||
        end[1] == '\0')
        return -1;
    memcpy(label, end + 1, strlen(end + 1) + 1);
    return 0;
}

/* Handles one line from the agent; -1 on a protocol error. */
static int on_line(struct standin *e, const char *line)
{
    unsigned long long v, l;
    char reply[96], extra, label[WST_LABEL_MAX];
    int rc = 0;

    printf("standin: got %s\n", line);
    fflush(stdout);
    if (parse_versioned(line, "BEGIN", &v, label) == 0) {
        memcpy(e->label, label, sizeof(e->label));
        rc = on_begin(e, v);
    } else if (sscanf(line, "LAYER %llu %llu %c", &l, &v, &extra) == 2) {
        e->layers++;
        snprintf(reply, sizeof(reply), "FINALIZED %llu %llu\n", l, v);
        rc = send_line(e, reply);
    } else if (parse_versioned(line, "COMMITTED", &v, label) == 0) {
        e->state = "serving";
        e->committed = v;
        memcpy(e->committed_label, label, sizeof(e->committed_label));
        e->reason[0] = '\0';
    } else if (strncmp(line, "UNUSABLE ", 9) == 0) {
        e->state = "unusable";
        snprintf(e->reason, sizeof(e->reason), "%s", line + 9);
    } else {
        fprintf(stderr, "standin: protocol error: unexpected line '%s'\n",
                line);
        return -1;
    }
    write_state(e);
    return rc;
}

/* What the table cannot check; 0 when the settings are usable. */
static int check_settings(struct standin *e)
{
    e->device = parse_device(e->set.cuda_device);
    if (e->device == -2)
        return -1;
    if (e->set.socket[0] == '\0' || e->set.shm_bytes == 0 ||
        (e->device < 0 && e->set.shm[0] == '\0')) {
        fprintf(stderr, "wstream-engine-standin: --socket, --shm-bytes and "
                        "--shm (or --cuda-device) are required\n");
        return -1;
    }
    if (e->device >= 0 && (!e->set.create || e->set.shm[0] != '\0')) {
        fprintf(stderr, "wstream-engine-standin: --cuda-device needs "
                        "--create (the stand-in owns its device memory) and "
                        "no --shm\n");
        return -1;
    }
    return 0;
}

/* The live memory the settings name: device memory, a new shm or an
 * existing one. */
static int open_live(struct standin *e)
{
    if (e->device >= 0)
        return create_device_live(e);
    e->live = e->set.create ? create_live(e->set.shm, e->set.shm_bytes)
                            : map_live(e->set.shm, e->set.shm_bytes);
    return e->live != NULL ? 0 : -1;
}

/* Frees device memory only now, at exit: the agent (and whoever verifies
 * it) imported it and use it until they are done. */
static void close_live(struct standin *e)
{
    if (e->device >= 0) {
        wst_gpu_digest_destroy(e->dg);
        wst_gpu_stream_destroy(e->stream);
        wst_gpu_free((void *)e->live);
        return;
    }
    munmap((void *)e->live, e->set.shm_bytes);
    if (e->set.create)
        shm_unlink(e->set.shm);
}

int main(int argc, char **argv)
{
    struct standin e;
    char line[LINE_MAX_BYTES];
    int code, rc;

    memset(&e, 0, sizeof(e));
    e.fd = -1;
    e.device = -1;
    e.state = "serving";
    wst_logger_init(&e.log, "standin", WST_LOG_WARN);
    wst_config_cli(
        standin_config, &e.set, argc, argv, "wstream-engine-standin",
        "wstream-engine-standin --socket PATH (--shm NAME | "
        "--create --cuda-device N) --shm-bytes N [--create] "
        "[--ready-delay-ms D] [--state-file F] [--refuse] [--refuse-version "
        "V]\n\n"
        "exit codes: 0 EOF from the agent (or it hung up); 1 set-up failed\n"
        "  (no CUDA device, the shm object cannot be opened...); 2 bad usage;\n"
        "  3 live memory written before READY; 4 a protocol error, \"ERROR\n"
        "  busy\" or a failed copy of the live device memory",
        &code);
    if (code < 0 && check_settings(&e) != 0)
        code = 2;
    if (code >= 0)
        goto out_release;
    code = 1;
    if (open_live(&e) != 0)
        goto out_release;
    /* The live memory exists (and its IPC handle is in the state file): the
     * agent may map or import it. */
    write_state(&e);
    e.fd = connect_retry(e.set.socket);
    if (e.fd < 0)
        goto out_close_live;
    write_state(&e);
    while ((rc = read_line(&e, line)) == 1) {
        if (strcmp(line, "ERROR busy") == 0) {
            fprintf(stderr,
                    "standin: the agent has an engine already (busy)\n");
            rc = -1;
            break;
        }
        if (on_line(&e, line) != 0) {
            rc = e.gone ? 0 : -1;
            break;
        }
    }
    code = rc == 0 ? 0 : 4;
    if (rc == 0)
        printf("standin: EOF, exiting\n");
    /* Between READY and COMMITTED the live memory may be half written: an
     * engine that loses its agent then must not serve it. */
    if (strcmp(e.state, "paused") == 0) {
        e.state = "unusable";
        snprintf(e.reason, sizeof(e.reason),
                 "lost the agent during a refit (after READY)");
        write_state(&e);
    }
    close(e.fd);
out_close_live:
    close_live(&e);
out_release:
    wst_config_release(standin_config, &e.set);
    return code;
}
