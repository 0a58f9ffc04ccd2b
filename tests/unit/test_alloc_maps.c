/* test_alloc_maps.c - the layout's allocations mapped into the agent
 * (receiver/agent/alloc_maps.h): every shm object mapped at its bytes, and
 * when one cannot be taken -- at the checks before any is mapped, or at
 * its own mapping after others were -- a message naming it and nothing
 * left mapped (/proc/self/maps is the witness). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include "alloc_maps.h"
#include "layout_file.h"
#include "log.h"
#include "shm.h"

#define N 3
#define LAYOUT_PATH "/etc/engine.json" /* only named in messages */

struct fixture {
    char names[N][64];
    int created[N];
    struct wst_layout_allocation allocs[N];
    struct wst_layout_region regions[N];
    struct wst_layout l;
    struct wst_logger log;
    char lines[4096];
};

static void sink(void *arg, int level, const char *line)
{
    struct fixture *f = arg;
    size_t used = strlen(f->lines);

    (void)level;
    snprintf(f->lines + used, sizeof(f->lines) - used, "%s\n", line);
}

/* Object k, 'bytes' long, filled with 'k + 1'. */
static void create_object(struct fixture *f, size_t k, uint64_t bytes)
{
    char err[256];
    void *p = NULL;

    assert_int_equal(wst_shm_create(f->names[k], bytes, &p, err, sizeof(err)),
                     WST_OK);
    memset(p, (int)k + 1, bytes);
    munmap(p, bytes);
    f->created[k] = 1;
}

/* A layout of N shm entries of 4096 * (k + 1) bytes, one region in each;
 * every object exists. */
static int setup(void **state)
{
    static unsigned counter;
    struct fixture *f = calloc(1, sizeof(*f));

    assert_non_null(f);
    for (size_t k = 0; k < N; k++) {
        snprintf(f->names[k], sizeof(f->names[k]), "/wst-test-maps-%d-%u-%zu",
                 (int)getpid(), counter, k);
        snprintf(f->allocs[k].name, sizeof(f->allocs[k].name), "seg%zu", k);
        f->allocs[k].kind = WST_LAYOUT_ALLOC_SHM;
        snprintf(f->allocs[k].shm, sizeof(f->allocs[k].shm), "%s", f->names[k]);
        f->allocs[k].bytes = 4096 * (k + 1);
        snprintf(f->regions[k].name, sizeof(f->regions[k].name), "r%zu", k);
        f->regions[k].allocation = (uint32_t)k + 1;
        f->regions[k].bytes = 4096;
        create_object(f, k, f->allocs[k].bytes);
    }
    counter++;
    f->l.n_allocations = N;
    f->l.allocations = f->allocs;
    f->l.n_regions = N;
    f->l.regions = f->regions;
    wst_logger_init(&f->log, "test", WST_LOG_INFO);
    f->log.sink = sink;
    f->log.sink_arg = f;
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;

    for (size_t k = 0; k < N; k++)
        if (f->created[k])
            shm_unlink(f->names[k]);
    free(f);
    return 0;
}

/* How many lines of /proc/self/maps map one of the fixture's objects. */
static int mapped(const struct fixture *f)
{
    char line[1024];
    int n = 0;
    FILE *m = fopen("/proc/self/maps", "r");

    assert_non_null(m);
    while (fgets(line, sizeof(line), m) != NULL)
        for (size_t k = 0; k < N; k++)
            n += strstr(line, f->names[k]) != NULL;
    fclose(m);
    return n;
}

static void expect_refused(struct fixture *f, wst_status_t status,
                           const char *needle)
{
    struct wst_alloc_maps out, sentinel;

    memset(&out, 0x5a, sizeof(out));
    sentinel = out;
    assert_int_equal(wst_alloc_maps_import(&f->l, LAYOUT_PATH, &f->log, &out),
                     status);
    if (strstr(f->lines, needle) == NULL)
        fail_msg("the log lacks \"%s\":\n%s", needle, f->lines);
    assert_memory_equal(&out, &sentinel, sizeof(out));
    assert_int_equal(mapped(f), 0);
}

/* Each entry is mapped whole, shared with its object, in the layout's
 * order; release unmaps them all. */
static void test_alloc_maps_three_objects(void **state)
{
    struct fixture *f = *state;
    struct wst_alloc_maps m;
    unsigned char byte;
    int fd;

    assert_int_equal(wst_alloc_maps_import(&f->l, LAYOUT_PATH, &f->log, &m),
                     WST_OK);
    assert_int_equal(m.n, N);
    assert_int_equal(mapped(f), N);
    for (size_t k = 0; k < N; k++) {
        const unsigned char *p = m.maps[k].base;
        assert_int_equal(m.maps[k].bytes, 4096 * (k + 1));
        assert_false(m.maps[k].cuda);
        assert_int_equal(p[0], k + 1);
        assert_int_equal(p[m.maps[k].bytes - 1], k + 1);
    }
    /* a write through the mapping is in the object */
    ((unsigned char *)m.maps[2].base)[5000] = 0x77;
    fd = shm_open(f->names[2], O_RDONLY, 0);
    assert_true(fd >= 0);
    assert_int_equal(pread(fd, &byte, 1, 5000), 1);
    close(fd);
    assert_int_equal(byte, 0x77);
    wst_alloc_maps_release(&m);
    assert_int_equal(m.n, 0);
    assert_null(m.maps);
    assert_int_equal(mapped(f), 0);
    wst_alloc_maps_release(&m); /* zeroed: fine */
}

/* The top-level "shm" is the one allocation; a layout without any maps
 * nothing. */
static void test_alloc_maps_legacy_and_none(void **state)
{
    struct fixture *f = *state;
    struct wst_alloc_maps m;
    struct wst_layout l;

    memset(&l, 0, sizeof(l));
    snprintf(l.shm, sizeof(l.shm), "%s", f->names[1]);
    l.shm_bytes = 8192;
    assert_int_equal(wst_alloc_maps_import(&l, LAYOUT_PATH, &f->log, &m),
                     WST_OK);
    assert_int_equal(m.n, 1);
    assert_int_equal(((unsigned char *)m.maps[0].base)[8191], 2);
    wst_alloc_maps_release(&m);

    memset(&l, 0, sizeof(l));
    memset(&m, 0x5a, sizeof(m));
    assert_int_equal(wst_alloc_maps_import(&l, LAYOUT_PATH, &f->log, &m),
                     WST_OK);
    assert_int_equal(m.n, 0);
    assert_null(m.maps);
    assert_int_equal(mapped(f), 0);
}

/* The last object is missing: named, with the file, and the two before it
 * are not left mapped. */
static void test_alloc_maps_missing_object(void **state)
{
    struct fixture *f = *state;
    char needle[256];

    shm_unlink(f->names[2]);
    f->created[2] = 0;
    snprintf(needle, sizeof(needle),
             "layout " LAYOUT_PATH ": allocation \"seg2\" (allocations[2]): "
             "shm_open %s: No such file or directory",
             f->names[2]);
    expect_refused(f, WST_ERR_IO, needle);
}

/* An object smaller than its entry's bytes. */
static void test_alloc_maps_short_object(void **state)
{
    struct fixture *f = *state;
    char needle[256];

    f->allocs[1].bytes = 8193;
    snprintf(needle, sizeof(needle),
             "layout " LAYOUT_PATH ": allocation \"seg1\" (allocations[1]): "
             "shared memory %s holds 8192 bytes, the layout needs 8193",
             f->names[1]);
    expect_refused(f, WST_ERR_INVALID, needle);
}

#if !defined(__SANITIZE_ADDRESS__)
/* VmSize of this process, from /proc/self/status. */
static uint64_t vm_size(void)
{
    char line[256];
    unsigned long long kb = 0;
    FILE *st = fopen("/proc/self/status", "r");

    assert_non_null(st);
    while (fgets(line, sizeof(line), st) != NULL)
        if (sscanf(line, "VmSize: %llu kB", &kb) == 1)
            break;
    fclose(st);
    assert_true(kb > 0);
    return kb * 1024;
}
#endif

/* Every object passes the checks, but a mapping after the first fails
 * (the address space is capped just above what the first two take): the
 * allocation is named and those mapped before it are given back. */
static void test_alloc_maps_map_fails_midway(void **state)
{
#if defined(__SANITIZE_ADDRESS__)
    (void)state;
    skip(); /* ASan's shadow memory does not live under RLIMIT_AS */
#else
    struct fixture *f = *state;
    struct wst_alloc_maps out, sentinel;
    struct rlimit old, cap;
    wst_status_t st;

    for (size_t k = 0; k < N; k++) {
        shm_unlink(f->names[k]);
        f->allocs[k].bytes = (uint64_t)(k + 1) << 16;
        create_object(f, k, f->allocs[k].bytes);
    }
    memset(&out, 0x5a, sizeof(out));
    sentinel = out;
    assert_int_equal(getrlimit(RLIMIT_AS, &old), 0);
    /* room for 64 + 128 KiB, and 160 KiB to spare: not the 192 KiB of the
     * third (a heap extension may take the spare and stop the second) */
    cap = old;
    cap.rlim_cur = vm_size() + (64 + 128 + 160) * 1024;
    assert_int_equal(setrlimit(RLIMIT_AS, &cap), 0);
    st = wst_alloc_maps_import(&f->l, LAYOUT_PATH, &f->log, &out);
    assert_int_equal(setrlimit(RLIMIT_AS, &old), 0);
    assert_int_equal(st, WST_ERR_IO);
    if (strstr(f->lines, "layout " LAYOUT_PATH ": allocation \"seg2\" "
                         "(allocations[2]): mmap ") == NULL &&
        strstr(f->lines, "layout " LAYOUT_PATH ": allocation \"seg1\" "
                         "(allocations[1]): mmap ") == NULL)
        fail_msg("no mmap failure of seg1 or seg2 in:\n%s", f->lines);
    assert_non_null(strstr(f->lines, "Cannot allocate memory"));
    assert_memory_equal(&out, &sentinel, sizeof(out));
    assert_int_equal(mapped(f), 0);
#endif
}

/* A device entry after two shm ones: here (no GPU) refused before
 * anything is mapped; on a GPU host this handle opens nothing, and the
 * two shm objects mapped before it are given back. */
static void test_alloc_maps_device_entry_fails(void **state)
{
    struct fixture *f = *state;
    struct wst_alloc_maps out;

    f->allocs[2].kind = WST_LAYOUT_ALLOC_CUDA_IPC;
    memset(f->allocs[2].cuda_ipc, 0x3c, sizeof(f->allocs[2].cuda_ipc));
    assert_int_not_equal(
        wst_alloc_maps_import(&f->l, LAYOUT_PATH, &f->log, &out), WST_OK);
    if (strstr(f->lines, "layout " LAYOUT_PATH
                         ": cuda_ipc needs a CUDA build and a GPU: ") == NULL &&
        strstr(f->lines, "layout " LAYOUT_PATH
                         ": allocation \"seg2\" (allocations[2]): cannot "
                         "import the cuda_ipc handle on GPU 0") == NULL)
        fail_msg("the log names neither the missing GPU nor seg2:\n%s",
                 f->lines);
    assert_int_equal(mapped(f), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_alloc_maps_three_objects, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_alloc_maps_legacy_and_none, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_alloc_maps_missing_object, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_alloc_maps_short_object, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_alloc_maps_map_fails_midway, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_alloc_maps_device_entry_fails,
                                        setup, teardown),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
