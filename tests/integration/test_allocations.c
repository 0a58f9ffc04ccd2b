/* test_allocations.c - a real wstream-agent whose layout spreads the
 * engine's regions over three POSIX shm objects ("allocations",
 * layout_file.h), created by this test as an engine would: two refits
 * from a real sender land every byte in the right object at the right
 * offset, read back from outside the agent (the /dev/shm files) and
 * checked against the model's generator, the gaps between regions still
 * poison. An object that does not exist is refused at start, by name,
 * before the agent listens, and the objects that do exist stay untouched.
 *
 * usage: test_allocations PATH_TO_WSTREAM_AGENT
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agent_fixture.h"
#include "alloc_spread.h"
#include "auth.h"
#include "clock.h"

#define N_PARTS 3

static const char *agent_bin;

/* The objects the edit below creates (it cannot return an error: a
 * missing object fails the agent's start, which the test sees). */
static struct {
    char names[N_PARTS][64];
    int created[N_PARTS];
    int skip; /* index of an object not to create; N_PARTS: none */
} objs;

static void make_object(size_t k, uint64_t bytes)
{
    char err[256];
    void *p = NULL;

    if (wst_shm_create(objs.names[k], bytes, &p, err, sizeof(err)) != WST_OK) {
        fprintf(stderr, "test: %s\n", err);
        return;
    }
    munmap(p, bytes);
    objs.created[k] = 1;
}

/* it_agent_start_edited's edit: the regions over N_PARTS shm objects. */
static void spread_over_shm(struct wst_layout *l)
{
    static unsigned counter;

    if (it_spread(l, N_PARTS) != 0) {
        fprintf(stderr, "test: out of memory\n");
        return;
    }
    for (size_t k = 0; k < N_PARTS; k++) {
        snprintf(objs.names[k], sizeof(objs.names[k]),
                 "/wst-it-alloc-%d-%u-%zu", (int)getpid(), counter, k);
        snprintf(l->allocations[k].shm, sizeof(l->allocations[k].shm), "%s",
                 objs.names[k]);
        if (k != (size_t)objs.skip)
            make_object(k, l->allocations[k].bytes);
    }
    counter++;
}

/* Each case's teardown: whatever it created goes, pass or fail. */
static int unlink_objects(void **state)
{
    (void)state;
    for (size_t k = 0; k < N_PARTS; k++) {
        if (objs.created[k])
            shm_unlink(objs.names[k]);
        objs.created[k] = 0;
    }
    return 0;
}

/* Object k's bytes as a reader outside the agent sees them (malloc'd). */
static unsigned char *read_object(size_t k, uint64_t bytes)
{
    char path[128];
    unsigned char *buf = malloc(bytes);
    uint64_t got = 0;
    ssize_t n;
    int fd;

    assert_non_null(buf);
    snprintf(path, sizeof(path), "/dev/shm%s", objs.names[k]);
    fd = open(path, O_RDONLY);
    if (fd < 0)
        fail_msg("open %s: %s", path, strerror(errno));
    while (got < bytes && (n = read(fd, buf + got, bytes - got)) > 0)
        got += (uint64_t)n;
    close(fd);
    if (got != bytes)
        fail_msg("%s: read %llu of %llu bytes", path, (unsigned long long)got,
                 (unsigned long long)bytes);
    return buf;
}

static void check_version(const struct wst_layout *l, uint64_t version)
{
    unsigned char *contents[N_PARTS];
    char err[512] = "";
    int rc;

    for (size_t k = 0; k < N_PARTS; k++)
        contents[k] = read_object(k, l->allocations[k].bytes);
    rc = it_spread_check(l, (const void *const *)contents, IT_SEED, version,
                         IT_POISON, err, sizeof(err));
    for (size_t k = 0; k < N_PARTS; k++)
        free(contents[k]);
    if (rc != 0)
        fail_msg("version %llu: %s", (unsigned long long)version, err);
}

/* Two refits, each read back whole from the three objects. */
static void test_allocations_refit_into_three_objects(void **state)
{
    struct it_agent a;
    size_t per[N_PARTS] = {0};

    (void)state;
    objs.skip = N_PARTS;
    assert_int_equal(it_agent_start_edited(&a, agent_bin, spread_over_shm), 0);
    assert_int_equal(a.layout.n_allocations, N_PARTS);
    assert_null(a.shm);
    for (size_t i = 0; i < a.layout.n_regions; i++)
        per[a.layout.regions[i].allocation - 1]++;
    for (size_t k = 0; k < N_PARTS; k++)
        assert_true(per[k] > 0);

    assert_int_equal(it_refit(&a, 1), 0);
    check_version(&a.layout, 1);
    assert_int_equal(it_refit(&a, 2), 0);
    check_version(&a.layout, 2);
    it_agent_stop(&a);
}

/* Runs the agent on 'layout' until it exits (at most 20 s): its wait
 * status, its output in 'log'. */
static int run_agent(const char *dir, const char *layout, const char *log)
{
    char secret[256], port[256], err[256];
    double deadline = wst_now_s() + 20.0;
    int wstatus = 0;
    pid_t pid;

    snprintf(secret, sizeof(secret), "%s/secret", dir);
    snprintf(port, sizeof(port), "%s/port", dir);
    assert_int_equal(wst_auth_secret_create(secret, err, sizeof(err)), WST_OK);
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (fd >= 0) {
            dup2(fd, STDOUT_FILENO);
            dup2(fd, STDERR_FILENO);
            close(fd);
        }
        execl(agent_bin, agent_bin, "--layout", layout, "--listen",
              "127.0.0.1:0", "--port-file", port, "--auth-secret-file", secret,
              (char *)NULL);
        _exit(127);
    }
    while (waitpid(pid, &wstatus, WNOHANG) == 0) {
        if (wst_now_s() > deadline) {
            kill(pid, SIGKILL);
            waitpid(pid, &wstatus, 0);
            fail_msg("the agent did not exit in 20 s");
        }
        usleep(10000);
    }
    assert_int_equal(access(port, F_OK), -1); /* it never listened */
    return wstatus;
}

/* The last of three objects is missing: the agent exits at start with
 * WST_ERR_IO, naming the allocation and the object; the two it could map
 * are given back untouched. */
static void test_allocations_missing_object_refused(void **state)
{
    char dir[] = "/tmp/wst-it-alloc-XXXXXX", layout[256], log[256];
    char err[512], needle[1024];
    struct wst_model m;
    struct wst_layout l;
    int wstatus;

    (void)state;
    assert_non_null(mkdtemp(dir));
    snprintf(layout, sizeof(layout), "%s/agent.json", dir);
    snprintf(log, sizeof(log), "%s/agent.log", dir);
    assert_int_equal(wst_model_preset("tiny", 1, &m, err, sizeof(err)), WST_OK);
    assert_int_equal(wst_model_engine_layout(&m, 0, 1, &l, err, sizeof(err)),
                     WST_OK);
    objs.skip = N_PARTS - 1;
    spread_over_shm(&l);
    assert_true(objs.created[0] && objs.created[1] && !objs.created[2]);
    assert_int_equal(wst_layout_save(layout, &l, err, sizeof(err)), WST_OK);

    wstatus = run_agent(dir, layout, log);
    if (!WIFEXITED(wstatus) || WEXITSTATUS(wstatus) != -WST_ERR_IO)
        fail_msg("the agent ended with wait status 0x%x, expected exit %d",
                 wstatus, -WST_ERR_IO);
    snprintf(needle, sizeof(needle),
             "layout %s: allocation \"part2\" (allocations[2]): shm_open %s: "
             "No such file or directory (no /dev/shm/%s: the engine has not "
             "created it yet",
             layout, objs.names[2], objs.names[2] + 1);
    if (!it_file_has(log, needle))
        fail_msg("the agent's log lacks '%s'", needle);

    /* what it mapped before, it did not write */
    for (size_t k = 0; k < 2; k++) {
        unsigned char *p = read_object(k, l.allocations[k].bytes);
        for (uint64_t i = 0; i < l.allocations[k].bytes; i++)
            if (p[i] != IT_POISON)
                fail_msg("%s: byte %llu is 0x%02x", objs.names[k],
                         (unsigned long long)i, p[i]);
        free(p);
    }
    wst_layout_release(&l);
    wst_model_release(&m);
    unlink(log);
    unlink(layout);
    snprintf(layout, sizeof(layout), "%s/secret", dir);
    unlink(layout);
    rmdir(dir);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_allocations_refit_into_three_objects,
                                  unlink_objects),
        cmocka_unit_test_teardown(test_allocations_missing_object_refused,
                                  unlink_objects),
    };

    if (argc != 2) {
        fprintf(stderr, "usage: %s PATH_TO_WSTREAM_AGENT\n", argv[0]);
        return 2;
    }
    agent_bin = argv[1];
    return cmocka_run_group_tests(tests, NULL, NULL);
}
