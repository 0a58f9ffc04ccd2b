/* test_layout_allocs.c - the layout file's "allocations": live memory in
 * many blocks (receiver/agent/layout_file.h, layout_allocs.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "layout_file.h"

/* ---- helpers ------------------------------------------------------------ */

static void tmp_path(char *buf, size_t len, const char *tag)
{
    const char *dir = getenv("TMPDIR");

    snprintf(buf, len, "%s/test_layout_allocs.%ld.%s.json",
             dir != NULL ? dir : "/tmp", (long)getpid(), tag);
}

/* Parses 'text', expecting refusal with 'status' and a message containing
 * 'needle'; the output struct must be left alone. */
static void expect_refused(const char *text, wst_status_t status,
                           const char *needle)
{
    struct wst_layout out, sentinel;
    char err[512] = "";

    memset(&out, 0xa5, sizeof(out));
    memcpy(&sentinel, &out, sizeof(out));
    assert_int_equal(
        wst_layout_parse(text, strlen(text), &out, err, sizeof(err)), status);
    if (strstr(err, needle) == NULL)
        fail_msg("message \"%s\" lacks \"%s\"", err, needle);
    assert_memory_equal(&out, &sentinel, sizeof(out));
}

static void parse_ok(const char *text, struct wst_layout *l)
{
    char err[512] = "";

    if (wst_layout_parse(text, strlen(text), l, err, sizeof(err)) != WST_OK)
        fail_msg("refused: %s", err);
}

/* Two handles that differ in their first byte. */
#define IPC_TAIL                                                               \
    "0102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"           \
    "202122232425262728292a2b2c2d2e2f303132333435363738393a3b3c3d3e3f"
#define IPC_A "00" IPC_TAIL
#define IPC_B "ff" IPC_TAIL

#define HDR "\"format\":1,\"rank\":0,"
#define A_HOST "{\"name\":\"host0\",\"shm\":\"/wst-a\",\"bytes\":4096}"
#define A_GPU0                                                                 \
    "{\"name\":\"gpu0\",\"cuda_ipc\":\"" IPC_A "\",\"bytes\":8192,\"device\":" \
    "1}"
#define A_GPU1 "{\"name\":\"gpu1\",\"cuda_ipc\":\"" IPC_B "\",\"bytes\":4096}"
#define ALLOCS(x) "\"allocations\":[" x "],"
#define REG(name, alloc, off, bytes)                                           \
    "{\"name\":\"" name "\",\"allocation\":\"" alloc "\",\"offset\":" #off     \
    ",\"bytes\":" #bytes "}"
#define REGIONS(x) "\"regions\":[" x "],\"wants\":[]"
/* One region in each of host0 and gpu0, for the refusal cases. */
#define OK_REGIONS                                                             \
    REGIONS(REG("a", "host0", 0, 4096) "," REG("b", "gpu0", 0, 64))

/* ---- parsing ------------------------------------------------------------ */

/* Host and device entries mix; each region lands in the entry it names,
 * one without "allocation" is the agent's; "device" defaults to 0 when
 * the file has no other device entry. */
static void test_layout_allocs_parse(void **state)
{
    static const char text[] = "{" HDR ALLOCS(A_HOST "," A_GPU0)
        REGIONS(REG("a", "gpu0", 4096, 4096) "," REG(
            "b", "host0", 0, 4096) ","
                                   "{\"name\":\"own\",\"bytes\":64}," REG(
                                       "c", "gpu0", 0, 4096)) "}";
    struct wst_layout l;
    struct wst_layout_allocation a;
    uint32_t device = 99;

    (void)state;
    parse_ok(text, &l);
    assert_int_equal(l.n_allocations, 2);
    assert_string_equal(l.allocations[0].name, "host0");
    assert_int_equal(l.allocations[0].kind, WST_LAYOUT_ALLOC_SHM);
    assert_string_equal(l.allocations[0].shm, "/wst-a");
    assert_int_equal(l.allocations[0].bytes, 4096);
    assert_int_equal(l.allocations[0].device, 0);
    assert_string_equal(l.allocations[1].name, "gpu0");
    assert_int_equal(l.allocations[1].kind, WST_LAYOUT_ALLOC_CUDA_IPC);
    assert_int_equal(l.allocations[1].cuda_ipc[0], 0x00);
    assert_int_equal(l.allocations[1].cuda_ipc[1], 0x01);
    assert_int_equal(l.allocations[1].cuda_ipc[63], 0x3f);
    assert_int_equal(l.allocations[1].bytes, 8192);
    assert_int_equal(l.allocations[1].device, 1);
    assert_string_equal(l.shm, "");
    assert_false(l.has_cuda_ipc);

    assert_int_equal(l.regions[0].allocation, 2);
    assert_int_equal(l.regions[0].offset, 4096);
    assert_int_equal(l.regions[1].allocation, 1);
    assert_int_equal(l.regions[2].allocation, 0);
    assert_int_equal(l.regions[3].allocation, 2);

    assert_int_equal(wst_layout_alloc_count(&l), 2);
    assert_int_equal(wst_layout_region_alloc(&l, 0), 1);
    assert_int_equal(wst_layout_region_alloc(&l, 1), 0);
    assert_int_equal(wst_layout_region_alloc(&l, 2), SIZE_MAX);
    wst_layout_alloc_get(&l, 1, &a);
    assert_string_equal(a.name, "gpu0");
    assert_int_equal(a.bytes, 8192);
    assert_true(wst_layout_cuda_device(&l, &device));
    assert_int_equal(device, 1);
    wst_layout_release(&l);

    parse_ok("{" HDR ALLOCS(A_GPU1) REGIONS(REG("a", "gpu1", 0, 64)) "}", &l);
    assert_int_equal(l.allocations[0].device, 0);
    wst_layout_release(&l);
}

/* The list reads the same for the top-level "shm" and "cuda_ipc" (one
 * entry named "", every region in it) and is empty without either. */
static void test_layout_allocs_legacy_view(void **state)
{
    struct wst_layout l;
    struct wst_layout_allocation a;
    uint32_t device = 99;

    (void)state;
    parse_ok("{" HDR "\"shm\":\"/x\",\"shm_bytes\":4096,"
             "\"regions\":[{\"name\":\"a\",\"offset\":64,\"bytes\":64}],"
             "\"wants\":[]}",
             &l);
    assert_int_equal(wst_layout_alloc_count(&l), 1);
    assert_int_equal(wst_layout_region_alloc(&l, 0), 0);
    memset(&a, 0x5a, sizeof(a));
    wst_layout_alloc_get(&l, 0, &a);
    assert_string_equal(a.name, "");
    assert_int_equal(a.kind, WST_LAYOUT_ALLOC_SHM);
    assert_string_equal(a.shm, "/x");
    assert_int_equal(a.bytes, 4096);
    assert_int_equal(a.device, 0);
    assert_false(wst_layout_cuda_device(&l, &device));
    wst_layout_release(&l);

    parse_ok("{" HDR "\"cuda_ipc\":\"" IPC_B "\",\"cuda_bytes\":512,"
             "\"cuda_device\":2,"
             "\"regions\":[{\"name\":\"a\",\"offset\":0,\"bytes\":64}],"
             "\"wants\":[]}",
             &l);
    assert_int_equal(wst_layout_alloc_count(&l), 1);
    wst_layout_alloc_get(&l, 0, &a);
    assert_int_equal(a.kind, WST_LAYOUT_ALLOC_CUDA_IPC);
    assert_int_equal(a.cuda_ipc[0], 0xff);
    assert_int_equal(a.bytes, 512);
    assert_int_equal(a.device, 2);
    assert_true(wst_layout_cuda_device(&l, &device));
    assert_int_equal(device, 2);
    wst_layout_release(&l);

    parse_ok("{" HDR "\"regions\":[{\"name\":\"a\",\"bytes\":64}],"
             "\"wants\":[]}",
             &l);
    assert_int_equal(wst_layout_alloc_count(&l), 0);
    assert_int_equal(wst_layout_region_alloc(&l, 0), SIZE_MAX);
    wst_layout_release(&l);

    /* an empty "allocations": every region is the agent's */
    parse_ok("{" HDR ALLOCS("") REGIONS("{\"name\":\"a\",\"bytes\":64}") "}",
             &l);
    assert_int_equal(wst_layout_alloc_count(&l), 0);
    assert_null(l.allocations);
    wst_layout_release(&l);
}

/* Regions follow the shm rules inside each entry: inside its bytes, no
 * overlap with the regions of that entry -- but the same offsets in two
 * entries are fine. */
static void test_layout_allocs_region_rules(void **state)
{
    struct wst_layout l;

    (void)state;
    parse_ok("{" HDR ALLOCS(A_HOST "," A_GPU1) REGIONS(
                 REG("a", "host0", 0, 4096) "," REG("b", "gpu1", 0, 4096)) "}",
             &l);
    wst_layout_release(&l);
    expect_refused("{" HDR ALLOCS(A_HOST "," A_GPU0)
                       REGIONS(REG("a", "host0", 0,
                                   64) "," REG("b", "gpu0", 4096, 4097)) "}",
                   WST_ERR_CONFIG,
                   "regions[1] (\"b\"): offset + bytes = 8193 is beyond "
                   "allocation \"gpu0\" bytes 8192");
    expect_refused(
        "{" HDR ALLOCS(A_HOST "," A_GPU0)
            REGIONS(REG("a", "gpu0", 0, 64) "," REG(
                "b", "host0", 0, 64) "," REG("c", "gpu0", 63, 64)) "}",
        WST_ERR_CONFIG,
        "regions \"a\" and \"c\" overlap in allocation \"gpu0\"");
    expect_refused("{" HDR ALLOCS(A_HOST) REGIONS(REG("a", "gpu0", 0, 64)) "}",
                   WST_ERR_CONFIG,
                   "regions[0] (\"a\"): unknown allocation \"gpu0\"");
    expect_refused("{" HDR REGIONS(REG("a", "host0", 0, 64)) "}",
                   WST_ERR_CONFIG,
                   "regions[0] (\"a\"): field \"allocation\" without a "
                   "top-level \"allocations\"");
    expect_refused("{" HDR "\"shm\":\"/x\",\"shm_bytes\":4096," REGIONS(
                       REG("a", "host0", 0, 64)) "}",
                   WST_ERR_CONFIG,
                   "regions[0] (\"a\"): field \"allocation\" without a "
                   "top-level \"allocations\"");
    expect_refused("{" HDR ALLOCS(A_HOST)
                       REGIONS("{\"name\":\"a\",\"allocation\":7,\"offset\":0,"
                               "\"bytes\":64}") "}",
                   WST_ERR_CONFIG,
                   "regions[0]: field \"allocation\" must be a string");
    expect_refused("{" HDR ALLOCS(A_HOST)
                       REGIONS("{\"name\":\"a\",\"allocation\":\"host0\","
                               "\"bytes\":64}") "}",
                   WST_ERR_CONFIG, "regions[0]: missing field \"offset\"");
}

/* "allocations" replaces the top-level block; it is an array of at most
 * WST_LAYOUT_ALLOC_MAX objects. */
static void test_layout_allocs_bad_array(void **state)
{
    (void)state;
    expect_refused("{" HDR "\"shm\":\"/x\",\"shm_bytes\":4096," ALLOCS(A_HOST)
                       OK_REGIONS "}",
                   WST_ERR_CONFIG,
                   "layout: field \"allocations\" and the top-level \"shm\" "
                   "are exclusive (make it an entry of \"allocations\")");
    expect_refused("{" HDR "\"cuda_ipc\":\"" IPC_B
                   "\",\"cuda_bytes\":4096," ALLOCS(A_HOST) OK_REGIONS "}",
                   WST_ERR_CONFIG,
                   "layout: field \"allocations\" and the top-level "
                   "\"cuda_ipc\" are exclusive");
    expect_refused("{" HDR "\"allocations\":{}," OK_REGIONS "}", WST_ERR_CONFIG,
                   "layout: field \"allocations\" must be an array");
    expect_refused("{" HDR ALLOCS(A_HOST ",7") OK_REGIONS "}", WST_ERR_CONFIG,
                   "allocations[1]: must be an object");
}

/* Builds a file of 'n' shm entries and one region in the last. */
static char *many_allocations(size_t n)
{
    size_t cap = 128 + n * 64, len = 0, i;
    char *text = malloc(cap);

    assert_non_null(text);
    len += (size_t)snprintf(text + len, cap - len, "{" HDR "\"allocations\":[");
    for (i = 0; i < n; i++)
        len += (size_t)snprintf(text + len, cap - len,
                                "%s{\"name\":\"a%zu\",\"shm\":\"/s%zu\","
                                "\"bytes\":64}",
                                i ? "," : "", i, i);
    snprintf(text + len, cap - len,
             "],\"regions\":[{\"name\":\"r\",\"allocation\":\"a%zu\","
             "\"offset\":0,\"bytes\":64}],\"wants\":[]}",
             n - 1);
    return text;
}

static void test_layout_allocs_count_bound(void **state)
{
    struct wst_layout l;
    char *text;

    (void)state;
    text = many_allocations(WST_LAYOUT_ALLOC_MAX);
    parse_ok(text, &l);
    assert_int_equal(l.n_allocations, WST_LAYOUT_ALLOC_MAX);
    assert_int_equal(l.regions[0].allocation, WST_LAYOUT_ALLOC_MAX);
    wst_layout_release(&l);
    free(text);
    text = many_allocations(WST_LAYOUT_ALLOC_MAX + 1);
    expect_refused(text, WST_ERR_CONFIG,
                   "layout: field \"allocations\" has 65537 entries, at most "
                   "65536 allowed");
    free(text);
}

/* One entry's fields: a name, exactly one of shm and cuda_ipc, bytes, and
 * device only with cuda_ipc. */
static void test_layout_allocs_bad_entry(void **state)
{
    static const char name63[] =
        "123456789012345678901234567890123456789012345678901234567890123";
    struct wst_layout l;

    (void)state;
    expect_refused("{" HDR ALLOCS("{\"shm\":\"/x\",\"bytes\":64}") OK_REGIONS
                   "}",
                   WST_ERR_CONFIG, "allocations[0]: missing field \"name\"");
    expect_refused(
        "{" HDR ALLOCS("{\"name\":\"\",\"shm\":\"/x\",\"bytes\":64}") OK_REGIONS
        "}",
        WST_ERR_CONFIG,
        "allocations[0]: field \"name\" must be a non-empty string shorter "
        "than 64 bytes");
    expect_refused("{" HDR ALLOCS(A_HOST ",{\"name\":\"4" /* 64 bytes */
                                         "123456789012345678901234567890123"
                                         "456789012345678901234567890123\","
                                         "\"shm\":\"/y\",\"bytes\":64}")
                       OK_REGIONS "}",
                   WST_ERR_CONFIG,
                   "allocations[1]: field \"name\" must be a non-empty string "
                   "shorter than 64 bytes");
    parse_ok("{" HDR ALLOCS("{\"name\":\"" /* 63 bytes: the longest */
                            "1234567890123456789012345678901234567890123456789"
                            "01234567890123\",\"shm\":\"/x\",\"bytes\":64}")
                 REGIONS("{\"name\":\"a\",\"allocation\":\"" /* same name */
                         "12345678901234567890123456789012345678901234567890"
                         "1234567890123\",\"offset\":0,\"bytes\":64}") "}",
             &l);
    assert_string_equal(l.allocations[0].name, name63);
    assert_int_equal(l.regions[0].allocation, 1);
    wst_layout_release(&l);
    expect_refused("{" HDR ALLOCS("{\"name\":\"h\",\"bytes\":64}") OK_REGIONS
                   "}",
                   WST_ERR_CONFIG,
                   "allocations[0] (\"h\"): needs field \"shm\" or "
                   "\"cuda_ipc\"");
    expect_refused("{" HDR ALLOCS("{\"name\":\"h\",\"shm\":\"/x\",\"cuda_ipc\":"
                                  "\"" IPC_A "\",\"bytes\":64}") OK_REGIONS "}",
                   WST_ERR_CONFIG,
                   "allocations[0] (\"h\"): fields \"shm\" and \"cuda_ipc\" "
                   "are exclusive");
    expect_refused(
        "{" HDR ALLOCS("{\"name\":\"h\",\"shm\":\"/x\"}") OK_REGIONS "}",
        WST_ERR_CONFIG, "allocations[0] (\"h\"): missing field \"bytes\"");
    expect_refused("{" HDR ALLOCS("{\"name\":\"h\",\"shm\":\"/x\",\"bytes\":0}")
                       OK_REGIONS "}",
                   WST_ERR_CONFIG,
                   "allocations[0] (\"h\"): field \"bytes\" is 0");
    expect_refused("{" HDR ALLOCS("{\"name\":\"h\",\"cuda_ipc\":\"" IPC_A
                                  "\",\"bytes\":-5}") OK_REGIONS "}",
                   WST_ERR_CONFIG,
                   "allocations[0] (\"h\"): field \"bytes\" is negative (-5)");
    expect_refused(
        "{" HDR ALLOCS("{\"name\":\"h\",\"shm\":\"\",\"bytes\":64}") OK_REGIONS
        "}",
        WST_ERR_CONFIG,
        "allocations[0] (\"h\"): field \"shm\" must be a non-empty string");
    /* even device 0: a shm object is on no device */
    expect_refused("{" HDR ALLOCS("{\"name\":\"h\",\"shm\":\"/x\",\"bytes\":64,"
                                  "\"device\":0}") OK_REGIONS "}",
                   WST_ERR_CONFIG,
                   "allocations[0] (\"h\"): field \"device\" is for "
                   "\"cuda_ipc\" entries, not \"shm\"");
    expect_refused("{" HDR ALLOCS("{\"name\":\"g\",\"cuda_ipc\":\"" IPC_A
                                  "\",\"bytes\":64,\"device\":2147483648}")
                       OK_REGIONS "}",
                   WST_ERR_CONFIG,
                   "allocations[0] (\"g\"): field \"device\" is too large");
    expect_refused(
        "{" HDR ALLOCS("{\"name\":\"g\",\"cuda_ipc\":\"" IPC_A
                       "\",\"bytes\":64,\"device\":-1}") OK_REGIONS "}",
        WST_ERR_CONFIG, "allocations[0] (\"g\"): field \"device\" is negative");
    expect_refused("{" HDR ALLOCS(A_HOST
                                  ",{\"name\":\"g\",\"cuda_ipc\":\"0A" IPC_TAIL
                                  "\",\"bytes\":64}") OK_REGIONS "}",
                   WST_ERR_CONFIG,
                   "allocations[1] (\"g\"): field \"cuda_ipc\": character 1 "
                   "(byte 0x41) is not a lowercase hex digit");
    expect_refused("{" HDR ALLOCS("{\"name\":\"g\",\"cuda_ipc\":\"00\","
                                  "\"bytes\":64}") OK_REGIONS "}",
                   WST_ERR_CONFIG,
                   "allocations[0] (\"g\"): field \"cuda_ipc\" has 2 "
                   "characters, expected 128 hex digits");
}

/* Across entries: unique names, no shm object or handle twice, one GPU. */
static void test_layout_allocs_cross_rules(void **state)
{
    (void)state;
    expect_refused(
        "{" HDR ALLOCS(A_HOST
                       "," A_GPU0
                       ",{\"name\":\"host0\",\"shm\":\"/other\",\"bytes\":64}")
            OK_REGIONS "}",
        WST_ERR_CONFIG,
        "allocations[2]: duplicate allocation name \"host0\" (first in "
        "allocations[0])");
    expect_refused(
        "{" HDR ALLOCS(A_HOST
                       "," A_GPU0
                       ",{\"name\":\"again\",\"shm\":\"/wst-a\",\"bytes\":64}")
            OK_REGIONS "}",
        WST_ERR_CONFIG,
        "allocations[2] (\"again\"): shm \"/wst-a\" is already "
        "allocations[0] (\"host0\")");
    expect_refused(
        "{" HDR ALLOCS(A_HOST "," A_GPU0
                              ",{\"name\":\"again\",\"cuda_ipc\":\"" IPC_A
                              "\",\"bytes\":64,\"device\":1}") OK_REGIONS "}",
        WST_ERR_CONFIG,
        "allocations[2] (\"again\"): the same cuda_ipc handle as "
        "allocations[1] (\"gpu0\"); CUDA opens a handle once per "
        "process");
    /* gpu0 is on device 1, gpu1 on the default 0 */
    expect_refused("{" HDR ALLOCS(A_HOST "," A_GPU0 "," A_GPU1) OK_REGIONS "}",
                   WST_ERR_CONFIG,
                   "allocations[2] (\"gpu1\"): device 0, but allocations[1] "
                   "(\"gpu0\") is on device 1; one agent serves one GPU");
}

/* wst_layout_load names the file before the entry. */
static void test_layout_allocs_load_names_file(void **state)
{
    static const char text[] =
        "{" HDR ALLOCS(A_HOST ",{\"name\":\"h\",\"shm\":\"/x\",\"bytes\":0}")
            OK_REGIONS "}";
    struct wst_layout l;
    char path[256], err[512] = "", want[512];
    FILE *f;

    (void)state;
    tmp_path(path, sizeof(path), "bad");
    f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
    assert_int_equal(wst_layout_load(path, &l, err, sizeof(err)),
                     WST_ERR_CONFIG);
    snprintf(want, sizeof(want),
             "%s: allocations[1] (\"h\"): field "
             "\"bytes\" is 0",
             path);
    assert_string_equal(err, want);
    unlink(path);
}

/* ---- writing ------------------------------------------------------------ */

static void set_alloc(struct wst_layout_allocation *a, const char *name,
                      enum wst_layout_alloc_kind kind, uint64_t bytes,
                      unsigned char tag)
{
    memset(a, 0, sizeof(*a));
    snprintf(a->name, sizeof(a->name), "%s", name);
    a->kind = kind;
    a->bytes = bytes;
    if (kind == WST_LAYOUT_ALLOC_SHM)
        snprintf(a->shm, sizeof(a->shm), "/wst-test-%s", name);
    else
        for (size_t i = 0; i < WST_LAYOUT_CUDA_IPC_BYTES; i++)
            a->cuda_ipc[i] = (unsigned char)(tag + 7 * i);
}

static void set_region(struct wst_layout_region *r, const char *name,
                       uint32_t allocation, uint64_t offset, uint64_t bytes)
{
    memset(r, 0, sizeof(*r));
    snprintf(r->name, sizeof(r->name), "%s", name);
    r->allocation = allocation;
    r->offset = offset;
    r->bytes = bytes;
}

/* Three entries (two device, one host), regions in each and one the
 * agent allocates: save then load gives the same layout, and a second
 * save of what was loaded writes the same bytes. */
static void test_layout_allocs_round_trip(void **state)
{
    struct wst_layout_allocation allocs[3];
    struct wst_layout_region regions[5];
    struct wst_layout l, got, again;
    char path[256], path2[256], err[512] = "", *t1, *t2;
    size_t i, n1, n2;
    FILE *f;

    (void)state;
    set_alloc(&allocs[0], "gpu.seg0", WST_LAYOUT_ALLOC_CUDA_IPC, 1 << 20, 3);
    allocs[0].device = 5;
    set_alloc(&allocs[1], "host", WST_LAYOUT_ALLOC_SHM, 8192, 0);
    set_alloc(&allocs[2], "gpu.seg1", WST_LAYOUT_ALLOC_CUDA_IPC, 4096, 200);
    allocs[2].device = 5;
    set_region(&regions[0], "layer0.qkv", 1, 4096, 8192);
    set_region(&regions[1], "layer0.o", 3, 0, 4096);
    set_region(&regions[2], "norm", 2, 0, 8192);
    set_region(&regions[3], "scratch", 0, 0, 100);
    set_region(&regions[4], "layer1.qkv", 1, 12288, 1000);
    memset(&l, 0, sizeof(l));
    l.rank = 2;
    l.n_allocations = 3;
    l.allocations = allocs;
    l.n_regions = 5;
    l.regions = regions;

    tmp_path(path, sizeof(path), "rt");
    assert_int_equal(wst_layout_save(path, &l, err, sizeof(err)), WST_OK);
    assert_int_equal(wst_layout_load(path, &got, err, sizeof(err)), WST_OK);
    assert_int_equal(got.rank, 2);
    assert_string_equal(got.shm, "");
    assert_false(got.has_cuda_ipc);
    assert_int_equal(got.n_allocations, 3);
    for (i = 0; i < 3; i++) {
        assert_string_equal(got.allocations[i].name, allocs[i].name);
        assert_int_equal(got.allocations[i].kind, allocs[i].kind);
        assert_string_equal(got.allocations[i].shm, allocs[i].shm);
        assert_memory_equal(got.allocations[i].cuda_ipc, allocs[i].cuda_ipc,
                            WST_LAYOUT_CUDA_IPC_BYTES);
        assert_int_equal(got.allocations[i].device, allocs[i].device);
        assert_int_equal(got.allocations[i].bytes, allocs[i].bytes);
    }
    assert_int_equal(got.n_regions, 5);
    for (i = 0; i < 5; i++) {
        assert_string_equal(got.regions[i].name, regions[i].name);
        assert_int_equal(got.regions[i].allocation, regions[i].allocation);
        assert_int_equal(got.regions[i].offset, regions[i].offset);
        assert_int_equal(got.regions[i].bytes, regions[i].bytes);
    }
    /* save(parse(save(x))) is byte for byte save(x) */
    tmp_path(path2, sizeof(path2), "rt2");
    assert_int_equal(wst_layout_save(path2, &got, err, sizeof(err)), WST_OK);
    f = fopen(path, "r");
    assert_non_null(f);
    t1 = calloc(1, 1 << 16);
    t2 = calloc(1, 1 << 16);
    n1 = fread(t1, 1, (1 << 16) - 1, f);
    fclose(f);
    f = fopen(path2, "r");
    assert_non_null(f);
    n2 = fread(t2, 1, (1 << 16) - 1, f);
    fclose(f);
    assert_int_equal(n1, n2);
    assert_memory_equal(t1, t2, n1);
    assert_non_null(strstr(t1, "\"allocations\""));
    assert_non_null(strstr(t1, "\"allocation\":\"gpu.seg1\""));
    assert_null(strstr(t1, "\"shm_bytes\""));
    /* the shm entry carries no "device" */
    assert_int_equal(wst_layout_load(path2, &again, err, sizeof(err)), WST_OK);
    assert_int_equal(again.allocations[1].device, 0);
    wst_layout_release(&again);
    free(t1);
    free(t2);
    wst_layout_release(&got);
    unlink(path);
    unlink(path2);
}

static void expect_save_refused(const struct wst_layout *l, const char *needle)
{
    char path[256], err[512] = "";

    tmp_path(path, sizeof(path), "refused");
    unlink(path);
    assert_int_equal(wst_layout_save(path, l, err, sizeof(err)),
                     WST_ERR_INVALID);
    if (strstr(err, needle) == NULL)
        fail_msg("message \"%s\" lacks \"%s\"", err, needle);
    assert_int_equal(access(path, F_OK), -1);
}

/* The writer refuses what the parser would. */
static void test_layout_allocs_save_refuses(void **state)
{
    struct wst_layout_allocation allocs[2];
    struct wst_layout_region region;
    struct wst_layout l;

    (void)state;
    memset(&l, 0, sizeof(l));
    l.n_allocations = 2;
    l.allocations = allocs;
    l.n_regions = 1;
    l.regions = &region;

#define RESET()                                                                \
    do {                                                                       \
        set_alloc(&allocs[0], "a", WST_LAYOUT_ALLOC_SHM, 64, 0);               \
        set_alloc(&allocs[1], "b", WST_LAYOUT_ALLOC_CUDA_IPC, 64, 9);          \
        set_region(&region, "r", 2, 0, 64);                                    \
        l.shm[0] = '\0';                                                       \
        l.has_cuda_ipc = 0;                                                    \
    } while (0)

    RESET();
    snprintf(l.shm, sizeof(l.shm), "/x");
    l.shm_bytes = 64;
    expect_save_refused(&l, "layout: allocations and the top-level shm");
    RESET();
    l.has_cuda_ipc = 1;
    l.cuda_bytes = 64;
    expect_save_refused(&l, "layout: allocations and the top-level cuda_ipc");
    RESET();
    region.allocation = 3;
    expect_save_refused(&l, "regions[0] (\"r\"): allocation 3 out of range (2 "
                            "allocations)");
    RESET();
    snprintf(allocs[1].name, sizeof(allocs[1].name), "a");
    expect_save_refused(&l, "allocations[1]: duplicate allocation name \"a\"");
    RESET();
    allocs[1].name[0] = '\0';
    expect_save_refused(&l, "allocations[1]: name must be 1..63 bytes");
    RESET();
    memset(allocs[0].name, 'x', sizeof(allocs[0].name));
    expect_save_refused(&l, "allocations[0]: name must be 1..63 bytes");
    RESET();
    allocs[0].kind = (enum wst_layout_alloc_kind)0;
    expect_save_refused(&l, "allocations[0]: unknown kind 0");
    RESET();
    allocs[0].shm[0] = '\0';
    expect_save_refused(&l, "allocations[0]: shm name must be 1..255 bytes");
    RESET();
    allocs[0].device = 1;
    expect_save_refused(&l, "allocations[0]: field \"device\" is for "
                            "\"cuda_ipc\" entries, not \"shm\"");
    RESET();
    allocs[1].bytes = 0;
    expect_save_refused(&l, "allocations[1]: field \"bytes\" is 0");
    RESET();
    allocs[1].bytes = INT64_MAX;
    expect_save_refused(&l, "allocations[1]: field \"bytes\" is too large");
    RESET();
    allocs[1].device = (uint32_t)INT32_MAX + 1;
    expect_save_refused(&l, "allocations[1]: field \"device\" is too large");
    RESET();
    set_alloc(&allocs[0], "a", WST_LAYOUT_ALLOC_CUDA_IPC, 64, 9);
    expect_save_refused(&l, "allocations[1] (\"b\"): the same cuda_ipc handle "
                            "as allocations[0] (\"a\")");
    RESET();
    set_alloc(&allocs[1], "b", WST_LAYOUT_ALLOC_SHM, 64, 0);
    snprintf(allocs[1].shm, sizeof(allocs[1].shm), "%s", allocs[0].shm);
    expect_save_refused(&l, "allocations[1] (\"b\"): shm \"/wst-test-a\" is "
                            "already allocations[0] (\"a\")");
    RESET();
    set_alloc(&allocs[0], "a", WST_LAYOUT_ALLOC_CUDA_IPC, 64, 1);
    allocs[0].device = 3;
    expect_save_refused(&l, "allocations[1] (\"b\"): device 0, but "
                            "allocations[0] (\"a\") is on device 3");
    /* a region naming an allocation in a layout without any */
    RESET();
    l.n_allocations = 0;
    l.allocations = NULL;
    region.allocation = 1;
    expect_save_refused(&l, "allocation 1 out of range (0 allocations)");
#undef RESET
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_layout_allocs_parse),
        cmocka_unit_test(test_layout_allocs_legacy_view),
        cmocka_unit_test(test_layout_allocs_region_rules),
        cmocka_unit_test(test_layout_allocs_bad_array),
        cmocka_unit_test(test_layout_allocs_count_bound),
        cmocka_unit_test(test_layout_allocs_bad_entry),
        cmocka_unit_test(test_layout_allocs_cross_rules),
        cmocka_unit_test(test_layout_allocs_load_names_file),
        cmocka_unit_test(test_layout_allocs_round_trip),
        cmocka_unit_test(test_layout_allocs_save_refuses),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
