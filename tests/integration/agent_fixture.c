/* agent_fixture.c - a real wstream-agent process and in-process senders for
 * the integration tests (see agent_fixture.h).
 */
#include "agent_fixture.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "auth.h"
#include "clock.h"
#include "cluster.h"
#include "shm.h"

static int create_shm(struct it_agent *a)
{
    static unsigned counter;
    char err[256];
    void *p = NULL;

    snprintf(a->shm_name, sizeof(a->shm_name), "/wstream-it-%d-%u",
             (int)getpid(), counter++);
    if (wst_shm_create(a->shm_name, a->layout.shm_bytes, &p, err,
                       sizeof(err)) != WST_OK) {
        fprintf(stderr, "fixture: %s\n", err);
        a->shm_name[0] = '\0';
        return -1;
    }
    a->shm = p;
    snprintf(a->layout.shm, sizeof(a->layout.shm), "%s", a->shm_name);
    return 0;
}

static int spawn_agent(struct it_agent *a, const char *agent_bin)
{
    a->pid = fork();
    if (a->pid < 0) {
        fprintf(stderr, "fixture: fork: %s\n", strerror(errno));
        a->pid = 0;
        return -1;
    }
    if (a->pid == 0) {
        int fd = open(a->log_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (fd >= 0) {
            dup2(fd, STDOUT_FILENO);
            dup2(fd, STDERR_FILENO);
            close(fd);
        }
        /* --engine-socket "" keeps the default: no engine. */
        /* No secret: --insecure (the flag after it repeats one above). */
        int insecure = a->secret_path[0] == '\0';
        const char *argv[64] = {agent_bin,
                                "--layout",
                                a->layout_path,
                                "--listen",
                                "127.0.0.1:0",
                                "--port-file",
                                a->port_path,
                                "--status-file",
                                a->status_path,
                                "--timeout",
                                "5",
                                "--peer-timeout",
                                "2",
                                "--heartbeat",
                                "0.5",
                                "--log-level",
                                "info",
                                "--engine-socket",
                                a->engine_socket,
                                insecure ? "--insecure=yes"
                                         : "--auth-secret-file",
                                insecure ? "--log-level=info" : a->secret_path};
        size_t n = 21;
        /* Later flags win: the extra ones override those above. */
        for (size_t i = 0;
             a->extra_args != NULL && a->extra_args[i] != NULL && n < 63; i++)
            argv[n++] = a->extra_args[i];
        argv[n] = NULL;
        execv(agent_bin, (char *const *)argv);
        fprintf(stderr, "fixture: exec %s: %s\n", agent_bin, strerror(errno));
        _exit(127);
    }
    return 0;
}

static int wait_port(struct it_agent *a, double timeout_s)
{
    int wstatus = 0;

    if (wst_cluster_wait_port(&a->pid, a->port_path, timeout_s, &a->port,
                              &wstatus) == 0) {
        snprintf(a->addr, sizeof(a->addr), "127.0.0.1:%u", a->port);
        return 0;
    }
    if (a->pid == 0)
        fprintf(stderr,
                "fixture: the agent exited during start-up (status 0x%x)\n",
                wstatus);
    else
        fprintf(stderr, "fixture: the agent did not write %s in %.0f s\n",
                a->port_path, timeout_s);
    return -1;
}

enum { START_ENGINE = 1, START_INSECURE = 2 };

static int start_agent(struct it_agent *a, const char *agent_bin,
                       void (*edit)(struct wst_layout *l), int flags,
                       const char *const *extra);

int it_agent_start_args(struct it_agent *a, const char *agent_bin,
                        const char *const *extra)
{
    return start_agent(a, agent_bin, NULL, 0, extra);
}

int it_agent_start(struct it_agent *a, const char *agent_bin)
{
    return it_agent_start_edited(a, agent_bin, NULL);
}

int it_agent_start_edited(struct it_agent *a, const char *agent_bin,
                          void (*edit)(struct wst_layout *l))
{
    return start_agent(a, agent_bin, edit, 0, NULL);
}

int it_agent_start_engine(struct it_agent *a, const char *agent_bin)
{
    return start_agent(a, agent_bin, NULL, START_ENGINE, NULL);
}

int it_agent_start_insecure(struct it_agent *a, const char *agent_bin)
{
    return start_agent(a, agent_bin, NULL, START_INSECURE, NULL);
}

static int start_agent(struct it_agent *a, const char *agent_bin,
                       void (*edit)(struct wst_layout *l), int flags,
                       const char *const *extra)
{
    char err[512];

    memset(a, 0, sizeof(*a));
    a->extra_args = extra;
    /* Control needs TCP; data may use shared memory (real RMA: put). */
    setenv("UCX_TLS", "sm,tcp", 0);
    setenv("UCX_TCP_CM_REUSEADDR", "y", 0);
    signal(SIGPIPE, SIG_IGN);
    if (agent_bin == NULL || access(agent_bin, X_OK) != 0) {
        fprintf(stderr, "fixture: agent binary '%s' is not executable\n",
                agent_bin ? agent_bin : "(none: pass it as argv[1])");
        return -1;
    }
    snprintf(a->dir, sizeof(a->dir), "/tmp/wstream-it-XXXXXX");
    if (mkdtemp(a->dir) == NULL) {
        fprintf(stderr, "fixture: mkdtemp: %s\n", strerror(errno));
        a->dir[0] = '\0';
        return -1;
    }
    snprintf(a->layout_path, sizeof(a->layout_path), "%s/agent.json", a->dir);
    snprintf(a->port_path, sizeof(a->port_path), "%s/agent.port", a->dir);
    snprintf(a->status_path, sizeof(a->status_path), "%s/agent.status", a->dir);
    snprintf(a->log_path, sizeof(a->log_path), "%s/agent.log", a->dir);
    if (!(flags & START_INSECURE)) {
        snprintf(a->secret_path, sizeof(a->secret_path), "%s/secret", a->dir);
        if (wst_auth_secret_create(a->secret_path, err, sizeof(err)) !=
            WST_OK) {
            fprintf(stderr, "fixture: %s\n", err);
            goto err_stop;
        }
    }
    if (flags & START_ENGINE)
        snprintf(a->engine_socket, sizeof(a->engine_socket), "%s/engine.sock",
                 a->dir);
    if (wst_model_preset("tiny", 1, &a->model, err, sizeof(err)) != WST_OK ||
        wst_model_engine_layout(&a->model, 0, 1, &a->layout, err,
                                sizeof(err)) != WST_OK) {
        fprintf(stderr, "fixture: model: %s\n", err);
        goto err_stop;
    }
    if (edit != NULL)
        edit(&a->layout);
    /* A layout edited into "allocations" names objects its test owns. */
    if (a->layout.n_allocations == 0 && create_shm(a) != 0)
        goto err_stop;
    if (wst_layout_save(a->layout_path, &a->layout, err, sizeof(err)) !=
        WST_OK) {
        fprintf(stderr, "fixture: %s\n", err);
        goto err_stop;
    }
    if (spawn_agent(a, agent_bin) != 0 || wait_port(a, 20.0) != 0)
        goto err_stop;
    return 0;

err_stop:
    it_agent_stop(a);
    return -1;
}

static void print_log(const struct it_agent *a)
{
    char line[1024];
    FILE *f;

    if (a->log_path[0] == '\0' || (f = fopen(a->log_path, "r")) == NULL)
        return;
    fprintf(stderr, "---- agent log %s ----\n", a->log_path);
    while (fgets(line, sizeof(line), f) != NULL)
        fputs(line, stderr);
    fprintf(stderr, "---- end of agent log ----\n");
    fclose(f);
}

static void reap(struct it_agent *a)
{
    double deadline = wst_now_s() + 10.0;
    int wstatus = 0;

    kill(a->pid, SIGTERM);
    while (waitpid(a->pid, &wstatus, WNOHANG) == 0) {
        if (wst_now_s() > deadline) {
            fprintf(stderr,
                    "fixture: agent %d ignored SIGTERM for 10 s; "
                    "killing it\n",
                    (int)a->pid);
            kill(a->pid, SIGKILL);
            waitpid(a->pid, &wstatus, 0);
            break;
        }
        usleep(10000);
    }
    if (!WIFEXITED(wstatus) || WEXITSTATUS(wstatus) != 0)
        fprintf(stderr, "fixture: agent %d ended with wait status 0x%x\n",
                (int)a->pid, wstatus);
    a->pid = 0;
}

void it_agent_stop(struct it_agent *a)
{
    char cmd[PATH_MAX + 16];

    if (a->pid > 0)
        reap(a);
    print_log(a);
    if (a->shm != NULL)
        munmap(a->shm, a->layout.shm_bytes);
    if (a->shm_name[0] != '\0')
        shm_unlink(a->shm_name);
    if (a->dir[0] != '\0') {
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", a->dir);
        if (system(cmd) != 0)
            fprintf(stderr, "fixture: could not remove %s\n", a->dir);
    }
    wst_layout_release(&a->layout);
    wst_model_release(&a->model);
    memset(a, 0, sizeof(*a));
}

int it_agent_kill(struct it_agent *a, int sig)
{
    int wstatus = -1;

    if (a->pid <= 0)
        return -1;
    kill(a->pid, sig);
    for (double end = wst_now_s() + 10.0;
         waitpid(a->pid, &wstatus, WNOHANG) == 0; usleep(10000))
        if (wst_now_s() > end) {
            fprintf(stderr, "fixture: agent %d ignored signal %d for 10 s\n",
                    (int)a->pid, sig);
            kill(a->pid, SIGKILL);
            waitpid(a->pid, &wstatus, 0);
            break;
        }
    a->pid = 0;
    return wstatus;
}

int it_agent_restart(struct it_agent *a, const char *agent_bin, int *wstatus_p)
{
    int wstatus = 0;

    if (a->pid > 0)
        return -1;
    print_log(a);
    unlink(a->port_path);
    if (spawn_agent(a, agent_bin) != 0)
        return -1;
    if (wst_cluster_wait_port(&a->pid, a->port_path, 20.0, &a->port,
                              &wstatus) == 0) {
        snprintf(a->addr, sizeof(a->addr), "127.0.0.1:%u", a->port);
        return 0;
    }
    if (wstatus_p != NULL)
        *wstatus_p = a->pid == 0 ? wstatus : -1;
    if (a->pid > 0)
        fprintf(stderr, "fixture: the restarted agent did not write %s\n",
                a->port_path);
    return -1;
}

int it_agent_alive(struct it_agent *a)
{
    int wstatus;

    if (a->pid <= 0)
        return 0;
    if (waitpid(a->pid, &wstatus, WNOHANG) == 0)
        return 1;
    fprintf(stderr, "fixture: agent %d is gone (wait status 0x%x)\n",
            (int)a->pid, wstatus);
    a->pid = 0;
    return 0;
}

int it_agent_status_text(const struct it_agent *a, char *text, size_t len)
{
    size_t n;
    FILE *f = fopen(a->status_path, "r");

    if (f == NULL || len == 0) {
        if (f != NULL)
            fclose(f);
        return -1;
    }
    n = fread(text, 1, len - 1, f);
    fclose(f);
    text[n] = '\0';
    return 0;
}

int it_agent_status(const struct it_agent *a, uint64_t *committed_p,
                    int *usable_p)
{
    char text[2048];
    unsigned long long v;
    const char *p;

    if (it_agent_status_text(a, text, sizeof(text)) != 0)
        return -1;
    p = strstr(text, "\"committed_version\": ");
    if (p == NULL || sscanf(p, "\"committed_version\": %llu", &v) != 1)
        return -1;
    *committed_p = v;
    if (strstr(text, "\"usable\": true") != NULL)
        *usable_p = 1;
    else if (strstr(text, "\"usable\": false") != NULL)
        *usable_p = 0;
    else
        return -1;
    return 0;
}

int it_agent_wait_status(const struct it_agent *a, uint64_t version,
                         double timeout_s)
{
    double deadline = wst_now_s() + timeout_s;
    uint64_t committed = 0;
    int usable = 0;

    do {
        if (it_agent_status(a, &committed, &usable) == 0 &&
            committed >= version)
            return 0;
        usleep(10000);
    } while (wst_now_s() < deadline);
    fprintf(stderr,
            "fixture: status file says committed_version %llu, "
            "waited for %llu\n",
            (unsigned long long)committed, (unsigned long long)version);
    return -1;
}

int it_agent_shm_untouched(const struct it_agent *a)
{
    const unsigned char *p = a->shm;

    for (uint64_t i = 0; i < a->layout.shm_bytes; i++)
        if (p[i] != IT_POISON) {
            fprintf(stderr, "fixture: shm byte %llu is 0x%02x, not poison\n",
                    (unsigned long long)i, p[i]);
            return 0;
        }
    return 1;
}

/* Lines of the file at 'path' that contain 'needle', counting up to
 * 'max' (0 when it cannot be read). */
static int file_lines(const char *path, const char *needle, int max)
{
    char line[2048];
    int n = 0;
    FILE *f = fopen(path, "r");

    if (f == NULL)
        return 0;
    while (n < max && fgets(line, sizeof(line), f) != NULL)
        n += strstr(line, needle) != NULL;
    fclose(f);
    return n;
}

int it_file_has(const char *path, const char *needle)
{
    return file_lines(path, needle, 1) > 0;
}

int it_agent_log_has(const struct it_agent *a, const char *needle)
{
    return it_file_has(a->log_path, needle);
}

int it_agent_wait_log(const struct it_agent *a, const char *needle,
                      double timeout_s)
{
    return it_agent_wait_log_lines(a, needle, 1, timeout_s);
}

int it_agent_wait_log_lines(const struct it_agent *a, const char *needle, int n,
                            double timeout_s)
{
    for (double waited = 0; file_lines(a->log_path, needle, n) < n;
         waited += 0.01) {
        if (waited >= timeout_s)
            return 0;
        usleep(10000);
    }
    return 1;
}

int it_sender_load(struct it_sender *s, const struct it_agent *a)
{
    memset(s, 0, sizeof(*s));
    return wst_model_trainer_shards(&a->model, 0, 1, &s->haves, &s->n_haves) ==
                   WST_OK
               ? 0
               : -1;
}

static wst_status_t register_one(struct it_sender *s, size_t i,
                                 uint64_t version)
{
    const struct wst_have *h = &s->haves[i];
    uint64_t bytes = wst_model_shard_bytes(h);

    s->bufs[i] = malloc(bytes ? bytes : 1);
    if (s->bufs[i] == NULL)
        return WST_ERR_NO_MEMORY;
    wst_model_fill_shard(h, IT_SEED, version, s->bufs[i]);
    struct wst_shard sh = wst_model_shard(h, s->bufs[i]);
    return wst_sender_register(s->sender, &sh);
}

wst_status_t it_sender_setup(struct it_sender *s, const struct it_agent *a,
                             size_t skip, uint64_t version)
{
    return it_sender_setup_rank(s, a, 0, 1, skip, version);
}

wst_status_t it_sender_setup_rank(struct it_sender *s, const struct it_agent *a,
                                  uint32_t rank, uint32_t world, size_t skip,
                                  uint64_t version)
{
    const char *recv[1] = {a->addr};
    struct wst_sender_params sp = {
        .field_mask = WST_SENDER_PARAM_RANK | WST_SENDER_PARAM_WORLD_SIZE |
                      WST_SENDER_PARAM_RECEIVERS | WST_SENDER_PARAM_TIMEOUT |
                      WST_SENDER_PARAM_LOG | WST_SENDER_PARAM_AUTH,
        .rank = rank,
        .world_size = world,
        .receivers = recv,
        .n_receivers = 1,
        .timeout_s = 10.0,
        .log_level = 1,
        .auth_secret_file = a->secret_path,
    };
    wst_status_t st = wst_sender_create(&sp, &s->sender);

    if (st != WST_OK)
        return st;
    s->bufs = calloc(s->n_haves, sizeof(*s->bufs));
    if (s->bufs == NULL)
        return WST_ERR_NO_MEMORY;
    for (size_t i = 0; i < s->n_haves && st == WST_OK; i++)
        if (i != skip)
            st = register_one(s, i, version);
    return st;
}

void it_sender_fill(struct it_sender *s, uint64_t version)
{
    for (size_t i = 0; i < s->n_haves; i++)
        if (s->bufs[i] != NULL)
            wst_model_fill_shard(&s->haves[i], IT_SEED, version, s->bufs[i]);
}

void it_sender_destroy(struct it_sender *s)
{
    if (s->sender != NULL)
        wst_sender_destroy(s->sender);
    for (size_t i = 0; s->bufs != NULL && i < s->n_haves; i++)
        free(s->bufs[i]);
    free(s->bufs);
    free(s->haves);
    memset(s, 0, sizeof(*s));
}

size_t it_first_matrix(const struct it_sender *s)
{
    for (size_t i = 0; i < s->n_haves; i++)
        if (s->haves[i].tensor.ndim == 2 && !s->haves[i].flat)
            return i;
    return 0;
}

/* GET 'path'; the status code, and the body into body[len]. */
int it_http_get(uint16_t port, const char *path, char *body, size_t len)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
    char req[256], *buf = calloc(1, 1 << 20);
    size_t got = 0;
    int fd = socket(AF_INET, SOCK_STREAM, 0), code = -1;

    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    if (buf == NULL || fd < 0 ||
        connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0)
        goto out;
    snprintf(req, sizeof(req), "GET %s HTTP/1.0\r\nHost: x\r\n\r\n", path);
    if (write(fd, req, strlen(req)) != (ssize_t)strlen(req))
        goto out;
    for (ssize_t r; got + 1 < (1u << 20) &&
                    (r = read(fd, buf + got, (1u << 20) - 1 - got)) > 0;)
        got += (size_t)r;
    if (sscanf(buf, "HTTP/1.%*d %d", &code) != 1)
        code = -1;
    const char *b = strstr(buf, "\r\n\r\n");
    snprintf(body, len, "%s", b != NULL ? b + 4 : "");
out:
    if (fd >= 0)
        close(fd);
    free(buf);
    return code;
}

int it_refit(const struct it_agent *a, uint64_t version)
{
    struct it_sender s = {0};
    wst_status_t st = WST_ERR_INVALID;

    if (it_sender_load(&s, a) == 0 &&
        (st = it_sender_setup(&s, a, SIZE_MAX, version)) == WST_OK &&
        (st = wst_sender_push(s.sender, version)) == WST_OK)
        st = wst_sender_wait(s.sender, 30.0);
    if (st != WST_OK)
        fprintf(stderr, "fixture: refit of version %llu: %s: %s\n",
                (unsigned long long)version, wst_status_string(st),
                s.sender ? wst_sender_last_error(s.sender) : "no sender");
    it_sender_destroy(&s);
    if (st != WST_OK)
        return -1;
    return it_agent_wait_status(a, version, 10.0);
}

int it_agent_setup(void **state, const char *agent_bin)
{
    struct it_agent *a = calloc(1, sizeof(*a));

    if (a == NULL)
        return -1;
    if (it_agent_start(a, agent_bin) != 0) {
        fprintf(stderr, "setup: could not start wstream-agent '%s'\n",
                agent_bin);
        free(a);
        return -1;
    }
    *state = a;
    return 0;
}

int it_agent_teardown(void **state)
{
    struct it_agent *a = *state;

    it_agent_stop(a);
    free(a);
    return 0;
}
