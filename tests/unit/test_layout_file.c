/* test_layout_file.c - the agent's layout file
 * (receiver/agent/layout_file.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "layout_file.h"
#include "layout_assert.h"

/* ---- helpers ------------------------------------------------------------ */

static void tmp_path(char *buf, size_t len, const char *tag)
{
    const char *dir = getenv("TMPDIR");

    snprintf(buf, len, "%s/test_layout_file.%ld.%s.json",
             dir != NULL ? dir : "/tmp", (long)getpid(), tag);
}

/* Whether a file "PATH.tmp..." (a write's temporary) is next to PATH. */
static int has_tmp_beside(const char *path)
{
    const char *slash = strrchr(path, '/');
    char dir[256], prefix[256];
    struct dirent *e;
    DIR *d;
    int found = 0;

    snprintf(dir, sizeof(dir), "%.*s", (int)(slash - path), path);
    snprintf(prefix, sizeof(prefix), "%s.tmp", slash + 1);
    d = opendir(dir);
    assert_non_null(d);
    while ((e = readdir(d)) != NULL)
        if (strncmp(e->d_name, prefix, strlen(prefix)) == 0)
            found = 1;
    closedir(d);
    return found;
}

static struct wst_want mk_want(const char *name, enum wst_dtype dt,
                               uint32_t ndim, const uint64_t *shape,
                               const uint64_t *start, const uint64_t *stop,
                               uint32_t region, uint64_t offset, uint64_t pitch)
{
    struct wst_want w;

    memset(&w, 0, sizeof(w));
    snprintf(w.tensor.name, sizeof(w.tensor.name), "%s", name);
    w.tensor.dtype = dt;
    w.tensor.ndim = ndim;
    w.box.ndim = ndim;
    memcpy(w.tensor.shape, shape, ndim * sizeof(*shape));
    memcpy(w.box.start, start, ndim * sizeof(*start));
    memcpy(w.box.stop, stop, ndim * sizeof(*stop));
    w.region = region;
    w.offset = offset;
    w.row_pitch = pitch;
    return w;
}

/* Parses 'text', expecting refusal with 'status' and a message containing
 * 'needle'; checks that the output struct was left alone. */
static void expect_refused(const char *text, wst_status_t status,
                           const char *needle)
{
    struct wst_layout out;
    struct wst_layout sentinel;
    char err[512] = "";

    memset(&out, 0xa5, sizeof(out));
    memcpy(&sentinel, &out, sizeof(out));
    assert_int_equal(
        wst_layout_parse(text, strlen(text), &out, err, sizeof(err)), status);
    if (strstr(err, needle) == NULL)
        fail_msg("message \"%s\" lacks \"%s\"", err, needle);
    assert_memory_equal(&out, &sentinel, sizeof(out));
}

/* A valid base: two 2048-byte regions back to back in a 4096-byte shm. */
#define HDR "\"format\":1,\"rank\":0,\"shm\":\"/x\",\"shm_bytes\":4096,"
#define REGS                                                                   \
    "\"regions\":[{\"name\":\"a\",\"offset\":0,\"bytes\":2048},"               \
    "{\"name\":\"b\",\"offset\":2048,\"bytes\":2048}],"
#define WANTS(w) "\"wants\":[{" w "}]"
#define WT "\"tensor\":\"t\",\"dtype\":\"bf16\","
#define WBOX "\"shape\":[4,256],\"start\":[0,0],\"stop\":[4,256],"
#define WREG "\"region\":\"a\",\"offset\":0"
#define WOK WT WBOX WREG

/* ---- cases -------------------------------------------------------------- */

static void test_layout_file_round_trip(void **state)
{
    struct wst_layout l, got;
    struct wst_layout_region regions[3];
    struct wst_want wants[3];
    uint64_t shape2[2] = {1024, 1024}, s0[2] = {0, 0}, e0[2] = {512, 1024};
    uint64_t s1[2] = {256, 0}, e1[2] = {384, 1024};
    uint64_t shape1[1] = {64}, s2[1] = {0}, e2[1] = {64};
    char path[256], err[512] = "";
    size_t i;

    (void)state;
    memset(&l, 0, sizeof(l));
    memset(regions, 0, sizeof(regions));
    snprintf(regions[0].name, WST_NAME_MAX, "qkv");
    regions[0].offset = 0;
    regions[0].bytes = 2u << 20;
    snprintf(regions[1].name, WST_NAME_MAX, "pitched");
    regions[1].offset = 2u << 20;
    regions[1].bytes = 1u << 20;
    snprintf(regions[2].name, WST_NAME_MAX, "norm");
    regions[2].offset = 3u << 20;
    regions[2].bytes = 256;
    wants[0] = mk_want("q", WST_DTYPE_BF16, 2, shape2, s0, e0, 0, 0, 0);
    wants[1] = mk_want("norm", WST_DTYPE_F32, 1, shape1, s2, e2, 2, 0, 0);
    /* 128 rows of 1024 bf16 (2048 bytes) at a 4096-byte pitch */
    wants[2] = mk_want("k", WST_DTYPE_BF16, 2, shape2, s1, e1, 1, 0, 4096);
    l.rank = 3;
    snprintf(l.shm, sizeof(l.shm), "/wstream-test-r3");
    l.shm_bytes = (3u << 20) + 256;
    l.n_regions = 3;
    l.regions = regions;
    l.n_wants = 3;
    l.wants = wants;

    tmp_path(path, sizeof(path), "rt");
    assert_int_equal(wst_layout_save(path, &l, err, sizeof(err)), WST_OK);
    assert_int_equal(wst_layout_load(path, &got, err, sizeof(err)), WST_OK);
    assert_int_equal(got.rank, 3);
    assert_string_equal(got.shm, "/wstream-test-r3");
    assert_int_equal(got.shm_bytes, (3u << 20) + 256);
    assert_int_equal(got.n_regions, 3);
    assert_int_equal(got.n_wants, 3);
    assert_memory_equal(got.regions, regions, sizeof(regions));
    for (i = 0; i < 3; i++)
        assert_memory_equal(&got.wants[i], &wants[i], sizeof(wants[i]));
    wst_layout_release(&got);
    assert_null(got.regions);
    assert_int_equal(got.n_wants, 0);

    /* no temporary file is left next to the target */
    assert_false(has_tmp_beside(path));
    unlink(path);
}

static void test_layout_file_no_shm(void **state)
{
    static const char text[] =
        "{\"format\":1,\"rank\":7,"
        "\"regions\":[{\"name\":\"r\",\"bytes\":64}],"
        "\"wants\":[{\"tensor\":\"t\",\"dtype\":\"f32\",\"shape\":[16],"
        "\"start\":[0],\"stop\":[16],\"region\":\"r\",\"offset\":0}]}\n";
    struct wst_layout l;
    char err[256] = "";

    (void)state;
    assert_int_equal(wst_layout_parse(text, strlen(text), &l, err, sizeof(err)),
                     WST_OK);
    assert_int_equal(l.rank, 7);
    assert_string_equal(l.shm, "");
    assert_int_equal(l.shm_bytes, 0);
    assert_int_equal(l.regions[0].offset, 0);
    assert_int_equal(l.wants[0].row_pitch, 0);
    assert_int_equal(l.wants[0].tensor.dtype, WST_DTYPE_F32);
    wst_layout_release(&l);
}

static void test_layout_file_spec_example(void **state)
{
    static const char text[] =
        "{\"format\":1,\"rank\":0,\"shm\":\"/wstream-demo-1234-r0\","
        "\"shm_bytes\":2097152,"
        "\"regions\":[{\"name\":\"model.layers.0.self_attn.qkv_proj.weight\","
        "\"offset\":0,\"bytes\":1048576},{\"name\":\"z\",\"offset\":1048576,"
        "\"bytes\":16}],"
        "\"wants\":[{\"tensor\":\"model.layers.0.self_attn.q_proj.weight\","
        "\"dtype\":\"bf16\",\"shape\":[1024,1024],\"start\":[0,0],"
        "\"stop\":[512,1024],\"region\":"
        "\"model.layers.0.self_attn.qkv_proj.weight\",\"offset\":0,"
        "\"row_pitch\":0}]}";
    struct wst_layout l;
    char err[256] = "";

    (void)state;
    assert_int_equal(wst_layout_parse(text, strlen(text), &l, err, sizeof(err)),
                     WST_OK);
    assert_int_equal(l.n_regions, 2);
    assert_int_equal(l.n_wants, 1);
    assert_int_equal(l.wants[0].region, 0);
    assert_int_equal(l.wants[0].box.ndim, 2);
    assert_int_equal(l.wants[0].box.stop[0], 512);
    assert_int_equal(l.wants[0].tensor.shape[1], 1024);
    wst_layout_release(&l);
}

static void test_layout_file_bad_header(void **state)
{
    (void)state;
    expect_refused("{\"format\":2,\"rank\":0," REGS WANTS(WOK) "}",
                   WST_ERR_CONFIG, "unknown format 2");
    expect_refused("{\"format\":1," REGS WANTS(WOK) "}", WST_ERR_CONFIG,
                   "missing field \"rank\"");
    expect_refused("{\"format\":1,\"rank\":\"0\"," REGS WANTS(WOK) "}",
                   WST_ERR_CONFIG, "field \"rank\" must be an integer");
    expect_refused("{\"format\":1,\"rank\":4294967296," REGS WANTS(WOK) "}",
                   WST_ERR_CONFIG, "field \"rank\" is too large");
    expect_refused(
        "{\"format\":1,\"rank\":0,\"shm\":\"/x\"," REGS WANTS(WOK) "}",
        WST_ERR_CONFIG, "missing field \"shm_bytes\"");
    expect_refused(
        "{\"format\":1,\"rank\":0,\"shm\":5,\"shm_bytes\":1," REGS WANTS(
            WOK) "}",
        WST_ERR_CONFIG, "field \"shm\" must be a string");
    expect_refused("{" HDR REGS "\"wants\":{}}", WST_ERR_CONFIG,
                   "field \"wants\" must be an array");
    expect_refused("{" HDR "\"wants\":[]}", WST_ERR_CONFIG,
                   "missing field \"regions\"");
    expect_refused("[1]", WST_ERR_CONFIG, "top level must be an object");
    expect_refused("{\"format\":1,", WST_ERR_CONFIG, "invalid JSON");
    expect_refused("{" HDR REGS WANTS(WOK) "} x", WST_ERR_CONFIG,
                   "trailing data");
}

static void test_layout_file_bad_numbers(void **state)
{
    (void)state;
    expect_refused("{" HDR
                   "\"regions\":[{\"name\":\"a\",\"offset\":-64,\"bytes\":"
                   "2048}]," WANTS(WOK) "}",
                   WST_ERR_CONFIG, "regions[0]: field \"offset\" is negative");
    expect_refused(
        "{" HDR "\"regions\":[{\"name\":\"a\",\"offset\":0,\"bytes\":"
        "2048.0}]," WANTS(WOK) "}",
        WST_ERR_CONFIG, "regions[0]: field \"bytes\" must be an integer");
    expect_refused("{" HDR
                   "\"regions\":[{\"name\":\"a\",\"offset\":0,\"bytes\":"
                   "18446744073709551615}]," WANTS(WOK) "}",
                   WST_ERR_CONFIG, "regions[0]: field \"bytes\" is too large");
    expect_refused("{" HDR REGS WANTS(WT "\"shape\":[4,256],\"start\":[0,0],"
                                         "\"stop\":[4,256.5]," WREG) "}",
                   WST_ERR_CONFIG,
                   "wants[0]: field \"stop[1]\" must be an integer");
    expect_refused("{" HDR REGS WANTS(WT WBOX "\"region\":\"a\"") "}",
                   WST_ERR_CONFIG, "wants[0]: missing field \"offset\"");
}

static void test_layout_file_bad_regions(void **state)
{
    (void)state;
    expect_refused(
        "{" HDR "\"regions\":[{\"name\":\"a\",\"offset\":0,\"bytes\":64},"
        "{\"name\":\"a\",\"offset\":64,\"bytes\":64}]," WANTS(WOK) "}",
        WST_ERR_CONFIG, "regions[1]: duplicate region name \"a\"");
    expect_refused("{" HDR
                   "\"regions\":[{\"name\":\"a\",\"offset\":0,\"bytes\":2048},"
                   "{\"name\":\"b\",\"offset\":2048,\"bytes\":2049}],"
                   "\"wants\":[]}",
                   WST_ERR_CONFIG,
                   "regions[1] (\"b\"): offset + bytes = 4097 is beyond "
                   "shm_bytes 4096");
    expect_refused("{" HDR "\"regions\":[{\"name\":\"a\",\"offset\":"
                   "9223372036854775000,\"bytes\":9223372036854775000}],"
                   "\"wants\":[]}",
                   WST_ERR_CONFIG,
                   "regions[0] (\"a\"): offset + bytes = "
                   "18446744073709550000 is beyond shm_bytes 4096");
    expect_refused("{" HDR
                   "\"regions\":[{\"name\":\"b\",\"offset\":1000,\"bytes\":"
                   "2048},{\"name\":\"a\",\"offset\":0,\"bytes\":1001}],"
                   "\"wants\":[]}",
                   WST_ERR_CONFIG, "regions \"a\" and \"b\" overlap");
    expect_refused("{" HDR
                   "\"regions\":[{\"name\":\"\",\"offset\":0,\"bytes\":64}],"
                   "\"wants\":[]}",
                   WST_ERR_CONFIG,
                   "regions[0]: field \"name\" must be a "
                   "non-empty string");
    expect_refused("{" HDR
                   "\"regions\":[{\"name\":\"a\",\"offset\":0,\"bytes\":0}],"
                   "\"wants\":[]}",
                   WST_ERR_CONFIG, "regions[0] (\"a\"): field \"bytes\" is 0");
    expect_refused("{" HDR "\"regions\":[{\"offset\":0,\"bytes\":1}],"
                   "\"wants\":[]}",
                   WST_ERR_CONFIG, "regions[0]: missing field \"name\"");
}

static void test_layout_file_bad_wants(void **state)
{
    (void)state;
    expect_refused(
        "{" HDR REGS WANTS(WT WBOX "\"region\":\"c\",\"offset\":0") "}",
        WST_ERR_CONFIG, "wants[0] (\"t\"): unknown region \"c\"");
    expect_refused("{" HDR REGS WANTS(
                       "\"tensor\":\"t\",\"dtype\":\"bf17\"," WBOX WREG) "}",
                   WST_ERR_CONFIG,
                   "wants[0] (\"t\"): unknown dtype \"bf17\" (valid: bf16, "
                   "f16, f32, f64, fp8_e4m3, fp8_e5m2, i8, u8, i32, i64)");
    expect_refused("{" HDR REGS WANTS("\"tensor\":\"t\",\"dtype\":\"torch."
                                      "float32\"," WBOX WREG) "}",
                   WST_ERR_CONFIG,
                   "wants[0] (\"t\"): unknown dtype \"torch.float32\" (did "
                   "you mean \"f32\"? valid: bf16, f16,");
    expect_refused("{" HDR REGS WANTS(WT "\"shape\":[4,256],\"start\":[0],"
                                         "\"stop\":[4,256]," WREG) "}",
                   WST_ERR_CONFIG,
                   "wants[0]: field \"start\" has 1 dims, shape has 2");
    expect_refused(
        "{" HDR REGS WANTS(WT "\"shape\":[1,1,1,1,1,1,1,1,1],"
                              "\"start\":[0,0],\"stop\":[1,1]," WREG) "}",
        WST_ERR_CONFIG, "wants[0]: field \"shape\" has 9 dims, expected 1..8");
    expect_refused("{" HDR REGS WANTS(WT "\"shape\":[4,256],\"start\":[0,0],"
                                         "\"stop\":[5,256]," WREG) "}",
                   WST_ERR_CONFIG,
                   "wants[0] (\"t\"): start[0]=0 stop[0]=5 outside shape[0]=4");
    expect_refused("{" HDR REGS WANTS(WT "\"shape\":[4,256],\"start\":[3,0],"
                                         "\"stop\":[2,256]," WREG) "}",
                   WST_ERR_CONFIG, "start[0]=3 stop[0]=2");
    expect_refused(
        "{" HDR REGS WANTS(WT WBOX "\"region\":\"a\",\"offset\":2") "}",
        WST_ERR_CONFIG,
        "wants[0] (\"t\"): offset 2 + span 2048 exceeds region "
        "\"a\" bytes 2048");
    expect_refused("{" HDR REGS WANTS(WT WBOX WREG ",\"row_pitch\":3") "}",
                   WST_ERR_CONFIG, "wants[0] (\"t\"): row_pitch 3");
    expect_refused(
        "{" HDR REGS WANTS(WT WBOX WREG ",\"row_pitch\":256") "}",
        WST_ERR_CONFIG,
        "row_pitch 256 must be a multiple of 2 and >= row bytes 512");
    /* a valid pitch whose span no longer fits the region */
    expect_refused("{" HDR REGS WANTS(WT WBOX WREG ",\"row_pitch\":1024") "}",
                   WST_ERR_CONFIG, "offset 0 + span 3584 exceeds region");
    expect_refused("{" HDR REGS "\"wants\":[5]}", WST_ERR_CONFIG,
                   "wants[0]: must be an object");
}

/* A grouped expert want survives save and load; a dense one stays dense. */
static void test_layout_file_expert_round_trip(void **state)
{
    struct wst_layout l, got;
    struct wst_layout_region regions[2];
    struct wst_want wants[2];
    uint64_t shape3[3] = {128, 768, 2048}, s0[3] = {48, 0, 0};
    uint64_t e0[3] = {64, 768, 2048};
    uint64_t shape2[2] = {128, 2048}, s1[2] = {0, 0}, e1[2] = {128, 2048};
    char path[256], err[512] = "";

    (void)state;
    memset(&l, 0, sizeof(l));
    memset(regions, 0, sizeof(regions));
    snprintf(regions[0].name, WST_NAME_MAX, "w13");
    regions[0].bytes = 16ull * 768 * 2048 * 2;
    snprintf(regions[1].name, WST_NAME_MAX, "router");
    regions[1].bytes = 128ull * 2048 * 2;
    wants[0] = mk_want("model.layers.0.mlp.experts.gate_proj.weight",
                       WST_DTYPE_BF16, 3, shape3, s0, e0, 0, 0, 0);
    wants[0].expert.grouped = 1;
    wants[0].expert.ep_rank = 3;
    wants[0].expert.ep_size = 8;
    wants[1] = mk_want("model.layers.0.mlp.gate.weight", WST_DTYPE_BF16, 2,
                       shape2, s1, e1, 1, 0, 0);
    l.n_regions = 2;
    l.regions = regions;
    l.n_wants = 2;
    l.wants = wants;

    tmp_path(path, sizeof(path), "expert");
    assert_int_equal(wst_layout_save(path, &l, err, sizeof(err)), WST_OK);
    assert_int_equal(wst_layout_load(path, &got, err, sizeof(err)), WST_OK);
    assert_int_equal(got.n_wants, 2);
    assert_memory_equal(&got.wants[0], &wants[0], sizeof(wants[0]));
    assert_memory_equal(&got.wants[1], &wants[1], sizeof(wants[1]));
    assert_int_equal(got.wants[0].expert.ep_rank, 3);
    assert_int_equal(got.wants[1].expert.grouped, 0);
    wst_layout_release(&got);

    /* save refuses what load would refuse */
    wants[0].expert.ep_rank = 8;
    assert_int_equal(wst_layout_save(path, &l, err, sizeof(err)),
                     WST_ERR_INVALID);
    assert_non_null(strstr(err, "wants[0]: bad expert descriptor"));
    unlink(path);
}

#define XWBOX "\"shape\":[8,2,128],\"start\":[2,0,0],\"stop\":[4,2,128],"
#define XWREG "\"region\":\"a\",\"offset\":0,"

static void test_layout_file_expert_parse(void **state)
{
    struct wst_layout got;
    char err[512] = "";
    static const char ok[] = "{" HDR REGS WANTS(
        WT XWBOX XWREG "\"expert\":{\"ep_rank\":1,\"ep_size\":4}") "}";

    (void)state;
    assert_int_equal(wst_layout_parse(ok, strlen(ok), &got, err, sizeof(err)),
                     WST_OK);
    assert_int_equal(got.wants[0].expert.grouped, 1);
    assert_int_equal(got.wants[0].expert.ep_rank, 1);
    assert_int_equal(got.wants[0].expert.ep_size, 4);
    wst_layout_release(&got);

    expect_refused("{" HDR REGS WANTS(WT XWBOX XWREG "\"expert\":3") "}",
                   WST_ERR_CONFIG,
                   "wants[0] (\"t\") expert: must be an object");
    expect_refused(
        "{" HDR REGS WANTS(WT XWBOX XWREG "\"expert\":{\"ep_size\":4}") "}",
        WST_ERR_CONFIG, "wants[0] (\"t\") expert: missing field \"ep_rank\"");
    expect_refused(
        "{" HDR REGS WANTS(WT XWBOX XWREG "\"expert\":{\"ep_rank\":0}") "}",
        WST_ERR_CONFIG, "wants[0] (\"t\") expert: missing field \"ep_size\"");
    expect_refused("{" HDR REGS WANTS(WT XWBOX XWREG
                                      "\"expert\":{\"ep_rank\":4,"
                                      "\"ep_size\":4}") "}",
                   WST_ERR_CONFIG,
                   "wants[0] (\"t\") expert: ep_rank 4 must be < ep_size 4");
    expect_refused("{" HDR REGS WANTS(WT XWBOX XWREG
                                      "\"expert\":{\"ep_rank\":0,"
                                      "\"ep_size\":0}") "}",
                   WST_ERR_CONFIG, "expert: ep_size 0 must be in 1..");
    expect_refused("{" HDR REGS WANTS(WT XWBOX XWREG
                                      "\"expert\":{\"ep_rank\":0,"
                                      "\"ep_size\":4294967296}") "}",
                   WST_ERR_CONFIG, "expert: ep_size 4294967296 must be in 1..");
    expect_refused("{" HDR REGS WANTS(WT XWBOX XWREG
                                      "\"expert\":{\"ep_rank\":-1,"
                                      "\"ep_size\":4}") "}",
                   WST_ERR_CONFIG, "field \"ep_rank\" is negative");
    expect_refused("{" HDR REGS WANTS(WT "\"shape\":[1024],\"start\":[0],"
                                         "\"stop\":[1024]," XWREG
                                         "\"expert\":{\"ep_rank\":0,"
                                         "\"ep_size\":1}") "}",
                   WST_ERR_CONFIG,
                   "expert: a grouped expert tensor needs >= 2 dims");
}

static void test_layout_file_too_many_entries(void **state)
{
    size_t n = ((size_t)1 << 20) + 1, i, len;
    static const char head[] = "{" HDR "\"wants\":[], \"regions\":[";
    char *text = malloc(sizeof(head) + 2 * n + 4);

    (void)state;
    assert_non_null(text);
    len = sizeof(head) - 1;
    memcpy(text, head, len);
    for (i = 0; i < n; i++) {
        text[len++] = '0';
        text[len++] = i + 1 < n ? ',' : ']';
    }
    text[len++] = '}';
    text[len] = '\0';
    expect_refused(text, WST_ERR_CONFIG,
                   "field \"regions\" has 1048577 entries, at most 1048576");
    free(text);
}

static void test_layout_file_load_errors(void **state)
{
    struct wst_layout l;
    char path[256], err[512] = "";
    FILE *f;

    (void)state;
    tmp_path(path, sizeof(path), "missing");
    unlink(path);
    assert_int_equal(wst_layout_load(path, &l, err, sizeof(err)), WST_ERR_IO);
    assert_non_null(strstr(err, "cannot open"));

    tmp_path(path, sizeof(path), "bad");
    f = fopen(path, "w");
    assert_non_null(f);
    fputs("{\"format\":1,\"rank\":0,\"regions\":[],\"wants\":7}", f);
    fclose(f);
    assert_int_equal(wst_layout_load(path, &l, err, sizeof(err)),
                     WST_ERR_CONFIG);
    assert_int_equal(strncmp(err, path, strlen(path)), 0);
    assert_non_null(strstr(err, "field \"wants\" must be an array"));
    unlink(path);
}

static void test_layout_file_save_refuses_bad_index(void **state)
{
    struct wst_layout_region r;
    struct wst_want w;
    struct wst_layout l;
    uint64_t shape[1] = {4}, s[1] = {0}, e[1] = {4};
    char path[256], err[256] = "";

    (void)state;
    memset(&r, 0, sizeof(r));
    snprintf(r.name, sizeof(r.name), "r");
    r.bytes = 8;
    w = mk_want("t", WST_DTYPE_BF16, 1, shape, s, e, 1, 0, 0);
    memset(&l, 0, sizeof(l));
    l.n_regions = 1;
    l.regions = &r;
    l.n_wants = 1;
    l.wants = &w;
    tmp_path(path, sizeof(path), "refused");
    assert_int_equal(wst_layout_save(path, &l, err, sizeof(err)),
                     WST_ERR_INVALID);
    assert_non_null(strstr(err, "wants[0]"));
    assert_int_equal(access(path, F_OK), -1);
}

/* ---- experts ------------------------------------------------------------ */

/* One "experts" entry, field by field so a case can drop or replace one.
 * Every field ends with a comma and EXPERTS closes the object with an
 * unknown key (ignored by the parser) to keep the JSON valid. */
#define XL(n) "\"layer\":" #n ","
#define XLOADER "\"loader\":\"trtllm-bf16\","
#define XDTYPE "\"dtype\":\"bf16\","
#define XE "\"experts\":8,"
#define XRANK "\"ep_rank\":1,"
#define XSIZE "\"ep_size\":4,"
#define XHIDDEN "\"hidden\":64,"
#define XINTER "\"inter\":32,"
#define XW13 "\"w13\":{\"region\":\"a\",\"offset\":0},"
#define XW2 "\"w2\":{\"region\":\"b\",\"offset\":1024},"
#define XDIMS XE XRANK XSIZE XHIDDEN XINTER
#define XOK(n) XL(n) XLOADER XDTYPE XDIMS XW13 XW2
#define XENTRY(e) "{" e "\"z\":0}"
#define EXPERTS(entries) "{" HDR REGS WANTS(WOK) ",\"experts\":[" entries "]}"
#define EXPERT1(e) EXPERTS(XENTRY(e))

/* parse -> save -> load gives back every field, ids and inter_tp included;
 * an entry without them stays linear and unsharded. */
static void test_layout_file_experts_round_trip(void **state)
{
    static const char text[] = EXPERTS(
        XENTRY(XL(7) XLOADER
               "\"dtype\":\"f32\"," XDIMS
               "\"expert_ids\":[2,3],\"inter_tp\":{\"rank\":1,\"size\":2},"
               "\"w13\":{\"region\":\"b\",\"offset\":2048},"
               "\"w2\":{\"region\":\"a\",\"offset\":16},") "," XENTRY(XOK(3)));
    struct wst_layout l, got;
    const struct wst_layout_experts *e;
    char path[256], err[512] = "";
    size_t i;

    (void)state;
    if (wst_layout_parse(text, strlen(text), &l, err, sizeof(err)) != WST_OK)
        fail_msg("parse: %s", err);
    assert_int_equal(l.n_experts, 2);
    e = &l.experts[0];
    assert_int_equal(e->layer, 7);
    assert_string_equal(e->loader, "trtllm-bf16");
    assert_int_equal(e->dtype, WST_DTYPE_F32);
    assert_int_equal(e->n_experts, 8);
    assert_int_equal(e->ep_rank, 1);
    assert_int_equal(e->ep_size, 4);
    assert_int_equal(e->hidden, 64);
    assert_int_equal(e->inter, 32);
    assert_int_equal(e->n_expert_ids, 2);
    assert_int_equal(e->expert_ids[0], 2);
    assert_int_equal(e->expert_ids[1], 3);
    assert_int_equal(e->inter_tp_rank, 1);
    assert_int_equal(e->inter_tp_size, 2);
    assert_int_equal(e->w13_region, 1); /* "b", at the end of the region */
    assert_int_equal(e->w13_offset, 2048);
    assert_int_equal(e->w2_region, 0);
    assert_int_equal(e->w2_offset, 16);
    e = &l.experts[1];
    assert_int_equal(e->layer, 3);
    assert_int_equal(e->dtype, WST_DTYPE_BF16);
    assert_null(e->expert_ids);
    assert_int_equal(e->n_expert_ids, 0);
    assert_int_equal(e->inter_tp_size, 0);
    assert_int_equal(e->w2_region, 1);
    assert_int_equal(e->w2_offset, 1024);

    tmp_path(path, sizeof(path), "experts");
    if (wst_layout_save(path, &l, err, sizeof(err)) != WST_OK)
        fail_msg("save: %s", err);
    if (wst_layout_load(path, &got, err, sizeof(err)) != WST_OK)
        fail_msg("load: %s", err);
    assert_int_equal(got.n_experts, l.n_experts);
    for (i = 0; i < l.n_experts; i++)
        assert_experts_equal(&got.experts[i], &l.experts[i]);
    wst_layout_release(&got);
    assert_null(got.experts);
    assert_int_equal(got.n_experts, 0);
    wst_layout_release(&l);
    unlink(path);
}

/* Without "experts" (or with an empty one) a layout parses as before, and
 * saving it writes no "experts" key. */
static void test_layout_file_experts_absent(void **state)
{
    static const char none[] = "{" HDR REGS WANTS(WOK) "}";
    static const char empty[] = EXPERTS("");
    struct wst_layout l;
    char path[256], err[512] = "", buf[4096];
    FILE *f;
    size_t n;

    (void)state;
    assert_int_equal(wst_layout_parse(none, strlen(none), &l, err, sizeof(err)),
                     WST_OK);
    assert_int_equal(l.n_experts, 0);
    assert_null(l.experts);
    assert_int_equal(l.n_wants, 1);
    tmp_path(path, sizeof(path), "noexperts");
    assert_int_equal(wst_layout_save(path, &l, err, sizeof(err)), WST_OK);
    wst_layout_release(&l);
    f = fopen(path, "r");
    assert_non_null(f);
    n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    assert_null(strstr(buf, "experts"));
    unlink(path);

    assert_int_equal(
        wst_layout_parse(empty, strlen(empty), &l, err, sizeof(err)), WST_OK);
    assert_int_equal(l.n_experts, 0);
    assert_null(l.experts);
    wst_layout_release(&l);
}

/* Edge values the parser accepts: a 63-byte loader, an offset equal to the
 * region size, ep_size not dividing experts when there is no id map. */
static void test_layout_file_experts_limits(void **state)
{
    static const char text[] = EXPERT1(
        XL(0) "\"loader\":\""
              "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"
              "\"," XDTYPE XE "\"ep_rank\":2,\"ep_size\":3," XHIDDEN XINTER
              "\"w13\":{\"region\":\"a\",\"offset\":2048}," XW2);
    struct wst_layout l;
    char err[512] = "";

    (void)state;
    if (wst_layout_parse(text, strlen(text), &l, err, sizeof(err)) != WST_OK)
        fail_msg("parse: %s", err);
    assert_int_equal(strlen(l.experts[0].loader), 63);
    assert_int_equal(l.experts[0].w13_offset, 2048);
    assert_int_equal(l.experts[0].ep_size, 3);
    wst_layout_release(&l);
}

/* Each required key, dropped in turn, is named in the refusal. */
static void test_layout_file_experts_missing_key(void **state)
{
    static const struct {
        const char *key, *field;
    } fields[] = {
        {"layer", XL(0)},    {"loader", XLOADER}, {"dtype", XDTYPE},
        {"experts", XE},     {"ep_rank", XRANK},  {"ep_size", XSIZE},
        {"hidden", XHIDDEN}, {"inter", XINTER},   {"w13", XW13},
        {"w2", XW2},
    };
    static const char head[] = "{" HDR REGS WANTS(WOK) ",\"experts\":[{";
    char text[2048], needle[128];
    size_t i, j;

    (void)state;
    for (i = 0; i < sizeof(fields) / sizeof(fields[0]); i++) {
        snprintf(text, sizeof(text), "%s", head);
        for (j = 0; j < sizeof(fields) / sizeof(fields[0]); j++) {
            if (j != i)
                strncat(text, fields[j].field, sizeof(text) - strlen(text) - 1);
        }
        strncat(text, "\"z\":0}]}", sizeof(text) - strlen(text) - 1);
        snprintf(needle, sizeof(needle), "experts[0]%s: missing field \"%s\"",
                 i == 0 ? "" : " (layer 0)", fields[i].key);
        expect_refused(text, WST_ERR_CONFIG, needle);
    }
    expect_refused(
        EXPERT1(XL(0) XLOADER XDTYPE XDIMS XW13 "\"w2\":{\"region\":\"b\"},"),
        WST_ERR_CONFIG, "experts[0] (layer 0) w2: missing field \"offset\"");
    expect_refused(
        EXPERT1(XL(0) XLOADER XDTYPE XDIMS "\"w13\":{\"offset\":0}," XW2),
        WST_ERR_CONFIG, "experts[0] (layer 0) w13: missing field \"region\"");
}

static void test_layout_file_experts_bad_fields(void **state)
{
    (void)state;
    expect_refused("{" HDR REGS WANTS(WOK) ",\"experts\":{}}", WST_ERR_CONFIG,
                   "layout: field \"experts\" must be an array");
    expect_refused(EXPERTS("5"), WST_ERR_CONFIG,
                   "experts[0]: must be an object");
    expect_refused(
        EXPERT1(XL(0) "\"loader\":\""
                      "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"
                      "xxxxxxxx"
                      "\"," XDTYPE XDIMS XW13 XW2),
        WST_ERR_CONFIG,
        "experts[0] (layer 0): field \"loader\" must be a non-empty string "
        "shorter than 64 bytes");
    expect_refused(
        EXPERT1(XL(0) "\"loader\":\"\"," XDTYPE XDIMS XW13 XW2), WST_ERR_CONFIG,
        "experts[0] (layer 0): field \"loader\" must be a non-empty string");
    expect_refused(EXPERT1(XL(0) XLOADER "\"dtype\":\"bf17\"," XDIMS XW13 XW2),
                   WST_ERR_CONFIG,
                   "experts[0] (layer 0): unknown dtype \"bf17\" (valid: "
                   "bf16, f16, f32, f64, fp8_e4m3, fp8_e5m2, i8, u8, i32, "
                   "i64)");
    expect_refused(
        EXPERT1(XL(0) XLOADER "\"dtype\":\"bfloat16\"," XDIMS XW13 XW2),
        WST_ERR_CONFIG,
        "unknown dtype \"bfloat16\" (did you mean \"bf16\"? valid: bf16, ");
    expect_refused(
        EXPERT1("\"layer\":4294967296," XLOADER XDTYPE XDIMS XW13 XW2),
        WST_ERR_CONFIG, "experts[0]: field \"layer\" is too large");
    expect_refused(EXPERT1(XL(0) XLOADER XDTYPE XE XRANK XSIZE
                           "\"hidden\":4294967296," XINTER XW13 XW2),
                   WST_ERR_CONFIG,
                   "experts[0] (layer 0): field \"hidden\" is too large");
    expect_refused(EXPERT1(XL(0) XLOADER XDTYPE XE XRANK XSIZE
                           "\"hidden\":-1," XINTER XW13 XW2),
                   WST_ERR_CONFIG,
                   "experts[0] (layer 0): field \"hidden\" is negative");
    expect_refused(EXPERT1(XL(0) XLOADER XDTYPE XE
                           "\"ep_rank\":4," XSIZE XHIDDEN XINTER XW13 XW2),
                   WST_ERR_CONFIG,
                   "experts[0] (layer 0): ep_rank 4 must be < ep_size 4");
    expect_refused(EXPERT1(XL(0) XLOADER XDTYPE XE XRANK XSIZE
                           "\"hidden\":0," XINTER XW13 XW2),
                   WST_ERR_CONFIG,
                   "experts[0] (layer 0): field \"hidden\" is 0");
    expect_refused(
        EXPERT1(XL(0) XLOADER XDTYPE
                "\"experts\":0," XRANK XSIZE XHIDDEN XINTER XW13 XW2),
        WST_ERR_CONFIG, "experts[0] (layer 0): field \"experts\" is 0");
    expect_refused(
        EXPERT1(XL(0) XLOADER XDTYPE XE
                "\"ep_rank\":0,\"ep_size\":0," XHIDDEN XINTER XW13 XW2),
        WST_ERR_CONFIG, "experts[0] (layer 0): field \"ep_size\" is 0");
    expect_refused(EXPERT1(XL(0) XLOADER XDTYPE XE XRANK XSIZE XHIDDEN
                           "\"inter\":0," XW13 XW2),
                   WST_ERR_CONFIG,
                   "experts[0] (layer 0): field \"inter\" is 0");
    expect_refused(EXPERT1(XL(0) XLOADER XDTYPE XDIMS "\"w13\":7," XW2),
                   WST_ERR_CONFIG,
                   "experts[0] (layer 0): field \"w13\" must be an object");
}

static void test_layout_file_experts_bad_placement(void **state)
{
    (void)state;
    expect_refused(EXPERT1(XL(2) XLOADER XDTYPE XDIMS XW13
                           "\"w2\":{\"region\":\"c\",\"offset\":0},"),
                   WST_ERR_CONFIG,
                   "experts[0] (layer 2) w2: unknown region \"c\"");
    expect_refused(
        EXPERT1(XL(2) XLOADER XDTYPE XDIMS
                "\"w13\":{\"region\":\"a\",\"offset\":2049}," XW2),
        WST_ERR_CONFIG,
        "experts[0] (layer 2) w13: offset 2049 is past the end of region "
        "\"a\" (2048 bytes)");
    expect_refused(EXPERT1(XL(2) XLOADER XDTYPE XDIMS XW13
                           "\"w2\":{\"region\":\"b\",\"offset\":-1},"),
                   WST_ERR_CONFIG,
                   "experts[0] (layer 2) w2: field \"offset\" is negative");
    /* the second entry names its own index; the first one's ids are freed */
    expect_refused(EXPERTS(XENTRY(XOK(5) "\"expert_ids\":[4,5],") "," XENTRY(
                       XOK(3)) "," XENTRY(XOK(5) "\"expert_ids\":[4,5],")),
                   WST_ERR_CONFIG,
                   "experts[2]: duplicate layer 5 (first in experts[0])");
}

static void test_layout_file_experts_bad_ids(void **state)
{
    (void)state;
    expect_refused(EXPERT1(XOK(1) "\"expert_ids\":[4,5,6],"), WST_ERR_CONFIG,
                   "experts[0] (layer 1): field \"expert_ids\" has 3 entries, "
                   "expected experts/ep_size = 2");
    expect_refused(EXPERT1(XOK(1) "\"expert_ids\":[],"), WST_ERR_CONFIG,
                   "field \"expert_ids\" has 0 entries, expected "
                   "experts/ep_size = 2");
    expect_refused(
        EXPERT1(XL(1) XLOADER XDTYPE XE
                "\"ep_rank\":0,\"ep_size\":3," XHIDDEN XINTER XW13 XW2
                "\"expert_ids\":[0,1],"),
        WST_ERR_CONFIG,
        "experts[0] (layer 1): \"expert_ids\" needs ep_size 3 to divide "
        "experts 8");
    expect_refused(
        EXPERT1(XOK(1) "\"expert_ids\":[4,8],"), WST_ERR_CONFIG,
        "experts[0] (layer 1): expert_ids[1] = 8 is not < experts 8");
    expect_refused(EXPERT1(XOK(1) "\"expert_ids\":[4294967296,5],"),
                   WST_ERR_CONFIG,
                   "expert_ids[0] = 4294967296 is not < experts 8");
    expect_refused(EXPERT1(XOK(1) "\"expert_ids\":[4,\"5\"],"), WST_ERR_CONFIG,
                   "experts[0] (layer 1): field \"expert_ids[1]\" must be an "
                   "integer");
    expect_refused(EXPERT1(XOK(1) "\"expert_ids\":4,"), WST_ERR_CONFIG,
                   "experts[0] (layer 1): field \"expert_ids\" must be an "
                   "array");
}

static void test_layout_file_experts_bad_inter_tp(void **state)
{
    (void)state;
    expect_refused(EXPERT1(XOK(1) "\"inter_tp\":{\"rank\":2,\"size\":2},"),
                   WST_ERR_CONFIG,
                   "experts[0] (layer 1): inter_tp rank 2 must be < size 2");
    expect_refused(EXPERT1(XOK(1) "\"inter_tp\":{\"rank\":0,\"size\":0},"),
                   WST_ERR_CONFIG,
                   "experts[0] (layer 1) inter_tp: size must be >= 1");
    expect_refused(EXPERT1(XOK(1) "\"inter_tp\":{\"size\":2},"), WST_ERR_CONFIG,
                   "experts[0] (layer 1) inter_tp: missing field \"rank\"");
    expect_refused(EXPERT1(XOK(1) "\"inter_tp\":2,"), WST_ERR_CONFIG,
                   "experts[0] (layer 1) inter_tp: must be an object");
}

/* Save refuses (WST_ERR_INVALID) what load would refuse, and writes
 * nothing then. */
static void test_layout_file_experts_save_refuses(void **state)
{
    struct wst_layout_region regions[2];
    struct wst_layout_experts x[2];
    struct wst_layout l;
    uint32_t ids[2] = {4, 5};
    char path[256], err[512] = "";
    size_t i;
    static const struct {
        int what;
        const char *needle;
    } cases[] = {
        {0, "experts[0] (layer 4): ep_rank 4 must be < ep_size 4"},
        {1, "experts[0] (layer 4): expert_ids is NULL but n_expert_ids is 2"},
        {2, "experts[0] (layer 4) w2: region index 2 out of range"},
        {3, "experts[0] (layer 4): inter_tp rank 1 must be < size 0"},
        {4, "experts[1]: duplicate layer 4 (first in experts[0])"},
        {5, "experts[0] (layer 4): loader name must be 1..63 bytes"},
        {6, "experts[0] (layer 4): expert_ids[1] = 8 is not < experts 8"},
        {7, "experts[0] (layer 4): unknown dtype"},
    };

    (void)state;
    memset(regions, 0, sizeof(regions));
    snprintf(regions[0].name, WST_NAME_MAX, "a");
    regions[0].bytes = 4096;
    snprintf(regions[1].name, WST_NAME_MAX, "b");
    regions[1].bytes = 4096;
    memset(&l, 0, sizeof(l));
    l.n_regions = 2;
    l.regions = regions;
    l.n_experts = 2;
    l.experts = x;
    tmp_path(path, sizeof(path), "xrefused");
    unlink(path);
    for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        memset(x, 0, sizeof(x));
        snprintf(x[0].loader, sizeof(x[0].loader), "trtllm-bf16");
        x[0].layer = 4;
        x[0].dtype = WST_DTYPE_BF16;
        x[0].n_experts = 8;
        x[0].ep_rank = 2;
        x[0].ep_size = 4;
        x[0].hidden = 64;
        x[0].inter = 32;
        x[0].expert_ids = ids;
        x[0].n_expert_ids = 2;
        x[0].w2_region = 1;
        x[1] = x[0];
        x[1].layer = 9;
        ids[1] = 5;
        switch (cases[i].what) {
        case 0:
            x[0].ep_rank = 4;
            break;
        case 1:
            x[0].expert_ids = NULL;
            break;
        case 2:
            x[0].w2_region = 2;
            break;
        case 3:
            x[0].inter_tp_rank = 1;
            break;
        case 4:
            x[1].layer = 4;
            break;
        case 5:
            x[0].loader[0] = '\0';
            break;
        case 6:
            ids[1] = 8;
            break;
        case 7:
            x[0].dtype = (enum wst_dtype)999;
            break;
        }
        assert_int_equal(wst_layout_save(path, &l, err, sizeof(err)),
                         WST_ERR_INVALID);
        if (strstr(err, cases[i].needle) == NULL)
            fail_msg("case %zu: message \"%s\" lacks \"%s\"", i, err,
                     cases[i].needle);
        assert_int_equal(access(path, F_OK), -1);
    }
}

/* ---- cuda_ipc ----------------------------------------------------------- */

/* 128 lowercase hex digits: bytes 0x00, 0x01, ... 0x3f. */
#define IPC_HEX                                                                \
    "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"         \
    "202122232425262728292a2b2c2d2e2f303132333435363738393a3b3c3d3e3f"
#define CUDA_HDR(ipc)                                                          \
    "\"format\":1,\"rank\":0,\"cuda_ipc\":\"" ipc "\",\"cuda_bytes\":4096,"

static void test_layout_file_cuda_ipc_parse(void **state)
{
    static const char text[] =
        "{" CUDA_HDR(IPC_HEX) "\"cuda_device\":3," REGS WANTS(WOK) "}";
    struct wst_layout l;
    char err[256] = "";
    unsigned i;

    (void)state;
    assert_int_equal(wst_layout_parse(text, strlen(text), &l, err, sizeof(err)),
                     WST_OK);
    assert_true(l.has_cuda_ipc);
    assert_string_equal(l.shm, "");
    assert_int_equal(l.cuda_bytes, 4096);
    assert_int_equal(l.cuda_device, 3);
    for (i = 0; i < WST_LAYOUT_CUDA_IPC_BYTES; i++)
        assert_int_equal(l.cuda_ipc[i], i);
    assert_int_equal(l.regions[1].offset, 2048);
    wst_layout_release(&l);
}

/* "cuda_device" is optional: GPU 0. */
static void test_layout_file_cuda_ipc_default_device(void **state)
{
    static const char text[] = "{" CUDA_HDR(IPC_HEX) REGS WANTS(WOK) "}";
    struct wst_layout l;
    char err[256] = "";

    (void)state;
    assert_int_equal(wst_layout_parse(text, strlen(text), &l, err, sizeof(err)),
                     WST_OK);
    assert_true(l.has_cuda_ipc);
    assert_int_equal(l.cuda_device, 0);
    wst_layout_release(&l);
}

static void test_layout_file_cuda_ipc_bad_hex(void **state)
{
    (void)state;
    /* an uppercase digit, a non-hex letter, an escaped NUL */
    expect_refused("{" CUDA_HDR("000102030405060708090A0b0c0d0e0f"
                                "101112131415161718191a1b1c1d1e1f"
                                "202122232425262728292a2b2c2d2e2f"
                                "303132333435363738393a3b3c3d3e3f")
                       REGS WANTS(WOK) "}",
                   WST_ERR_CONFIG,
                   "field \"cuda_ipc\": character 21 (byte 0x41) is not a "
                   "lowercase hex digit");
    expect_refused("{" CUDA_HDR("g00102030405060708090a0b0c0d0e0f"
                                "101112131415161718191a1b1c1d1e1f"
                                "202122232425262728292a2b2c2d2e2f"
                                "303132333435363738393a3b3c3d3e3f")
                       REGS WANTS(WOK) "}",
                   WST_ERR_CONFIG, "character 0 (byte 0x67)");
    expect_refused("{" CUDA_HDR("\\u000000102030405060708090a0b0c0d0e0f"
                                "101112131415161718191a1b1c1d1e1f"
                                "202122232425262728292a2b2c2d2e2f"
                                "303132333435363738393a3b3c3d3e3f")
                       REGS WANTS(WOK) "}",
                   WST_ERR_CONFIG, "character 0 (byte 0x00)");
    expect_refused("{\"format\":1,\"rank\":0,\"cuda_ipc\":7,\"cuda_bytes\":"
                   "4096," REGS WANTS(WOK) "}",
                   WST_ERR_CONFIG, "field \"cuda_ipc\" must be a string");
}

static void test_layout_file_cuda_ipc_wrong_length(void **state)
{
    (void)state;
    expect_refused("{" CUDA_HDR(IPC_HEX "0") REGS WANTS(WOK) "}",
                   WST_ERR_CONFIG,
                   "field \"cuda_ipc\" has 129 characters, expected 128 hex "
                   "digits (a 64-byte CUDA IPC handle)");
    expect_refused("{" CUDA_HDR("0001") REGS WANTS(WOK) "}", WST_ERR_CONFIG,
                   "field \"cuda_ipc\" has 4 characters");
    expect_refused("{" CUDA_HDR("") REGS WANTS(WOK) "}", WST_ERR_CONFIG,
                   "field \"cuda_ipc\" has 0 characters");
}

static void test_layout_file_cuda_ipc_exclusive(void **state)
{
    (void)state;
    expect_refused("{" HDR "\"cuda_ipc\":\"" IPC_HEX
                   "\",\"cuda_bytes\":4096," REGS WANTS(WOK) "}",
                   WST_ERR_CONFIG,
                   "fields \"shm\" and \"cuda_ipc\" are exclusive");
}

/* The companions need their handle, and cuda_bytes its value. */
static void test_layout_file_cuda_ipc_bad_fields(void **state)
{
    (void)state;
    expect_refused(
        "{\"format\":1,\"rank\":0,\"cuda_bytes\":4096," REGS WANTS(WOK) "}",
        WST_ERR_CONFIG, "field \"cuda_bytes\" without \"cuda_ipc\"");
    expect_refused(
        "{\"format\":1,\"rank\":0,\"cuda_device\":0," REGS WANTS(WOK) "}",
        WST_ERR_CONFIG, "field \"cuda_device\" without \"cuda_ipc\"");
    expect_refused("{\"format\":1,\"rank\":0,\"cuda_ipc\":\"" IPC_HEX
                   "\"," REGS WANTS(WOK) "}",
                   WST_ERR_CONFIG, "missing field \"cuda_bytes\"");
    expect_refused("{\"format\":1,\"rank\":0,\"cuda_ipc\":\"" IPC_HEX
                   "\",\"cuda_bytes\":0," REGS WANTS(WOK) "}",
                   WST_ERR_CONFIG, "field \"cuda_bytes\" is 0");
    expect_refused(
        "{" CUDA_HDR(IPC_HEX) "\"cuda_device\":-1," REGS WANTS(WOK) "}",
        WST_ERR_CONFIG, "field \"cuda_device\" is negative");
    expect_refused(
        "{" CUDA_HDR(IPC_HEX) "\"cuda_device\":2147483648," REGS WANTS(WOK) "}",
        WST_ERR_CONFIG, "field \"cuda_device\" is too large");
}

/* Regions in the device allocation follow the shm rules: inside it, at an
 * explicit offset, without overlap. */
static void test_layout_file_cuda_ipc_regions(void **state)
{
    (void)state;
    expect_refused(
        "{" CUDA_HDR(
            IPC_HEX) "\"regions\":[{\"name\":\"a\",\"offset\":0,\"bytes\":2048}"
                     ","
                     "{\"name\":\"b\",\"offset\":2048,\"bytes\":2049}],"
                     "\"wants\":[]}",
        WST_ERR_CONFIG,
        "regions[1] (\"b\"): offset + bytes = 4097 is beyond "
        "cuda_bytes 4096");
    expect_refused(
        "{" CUDA_HDR(
            IPC_HEX) "\"regions\":[{\"name\":\"b\",\"offset\":1000,\"bytes\":"
                     "2048},{\"name\":\"a\",\"offset\":0,\"bytes\":1001}],"
                     "\"wants\":[]}",
        WST_ERR_CONFIG,
        "regions \"a\" and \"b\" overlap in the cuda_ipc "
        "allocation");
    expect_refused(
        "{" CUDA_HDR(IPC_HEX) "\"regions\":[{\"name\":\"a\",\"bytes\":64}],"
                              "\"wants\":[]}",
        WST_ERR_CONFIG, "regions[0]: missing field \"offset\"");
}

/* A layout with cuda_ipc is written with the same handle, size and device,
 * and no "shm". */
static void test_layout_file_cuda_ipc_round_trip(void **state)
{
    struct wst_layout l, got;
    struct wst_layout_region region;
    char path[256], err[512] = "";
    FILE *f;
    char text[4096];
    size_t n, i;

    (void)state;
    memset(&l, 0, sizeof(l));
    memset(&region, 0, sizeof(region));
    snprintf(region.name, WST_NAME_MAX, "w");
    region.offset = 512;
    region.bytes = 1024;
    l.rank = 1;
    l.has_cuda_ipc = 1;
    for (i = 0; i < WST_LAYOUT_CUDA_IPC_BYTES; i++)
        l.cuda_ipc[i] = (unsigned char)(255 - 3 * i);
    l.cuda_bytes = 1536;
    l.cuda_device = 2;
    l.n_regions = 1;
    l.regions = &region;

    tmp_path(path, sizeof(path), "cuda");
    assert_int_equal(wst_layout_save(path, &l, err, sizeof(err)), WST_OK);
    f = fopen(path, "r");
    assert_non_null(f);
    n = fread(text, 1, sizeof(text) - 1, f);
    fclose(f);
    text[n] = '\0';
    assert_null(strstr(text, "\"shm"));
    assert_non_null(strstr(text, "\"cuda_ipc\""));
    assert_non_null(strstr(text, "\"fffcf9f6"));
    assert_int_equal(wst_layout_load(path, &got, err, sizeof(err)), WST_OK);
    assert_true(got.has_cuda_ipc);
    assert_memory_equal(got.cuda_ipc, l.cuda_ipc, WST_LAYOUT_CUDA_IPC_BYTES);
    assert_int_equal(got.cuda_bytes, 1536);
    assert_int_equal(got.cuda_device, 2);
    assert_string_equal(got.shm, "");
    assert_memory_equal(got.regions, &region, sizeof(region));
    wst_layout_release(&got);

    /* the writer refuses what the parser would */
    snprintf(l.shm, sizeof(l.shm), "/x");
    l.shm_bytes = 4096;
    assert_int_equal(wst_layout_save(path, &l, err, sizeof(err)),
                     WST_ERR_INVALID);
    assert_non_null(strstr(err, "both shm and cuda_ipc"));
    l.shm[0] = '\0';
    l.cuda_bytes = 0;
    assert_int_equal(wst_layout_save(path, &l, err, sizeof(err)),
                     WST_ERR_INVALID);
    unlink(path);
}

/* The public hex helpers agree with each other and with the parser. */
static void test_layout_file_cuda_ipc_hex_helpers(void **state)
{
    unsigned char h[WST_LAYOUT_CUDA_IPC_BYTES], back[WST_LAYOUT_CUDA_IPC_BYTES];
    char hex[WST_LAYOUT_CUDA_IPC_HEX + 1];
    size_t i;

    (void)state;
    for (i = 0; i < sizeof(h); i++)
        h[i] = (unsigned char)i;
    wst_layout_ipc_encode(h, hex);
    assert_string_equal(hex, IPC_HEX);
    assert_int_equal(wst_layout_ipc_decode(hex, back), WST_OK);
    assert_memory_equal(back, h, sizeof(h));
    memset(back, 0x5a, sizeof(back));
    hex[7] = 'F';
    assert_int_equal(wst_layout_ipc_decode(hex, back), WST_ERR_CONFIG);
    hex[7] = '\0';
    assert_int_equal(wst_layout_ipc_decode(hex, back), WST_ERR_CONFIG);
    assert_int_equal(wst_layout_ipc_decode(IPC_HEX "00", back), WST_ERR_CONFIG);
    for (i = 0; i < sizeof(back); i++)
        assert_int_equal(back[i], 0x5a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_layout_file_round_trip),
        cmocka_unit_test(test_layout_file_no_shm),
        cmocka_unit_test(test_layout_file_spec_example),
        cmocka_unit_test(test_layout_file_bad_header),
        cmocka_unit_test(test_layout_file_bad_numbers),
        cmocka_unit_test(test_layout_file_bad_regions),
        cmocka_unit_test(test_layout_file_bad_wants),
        cmocka_unit_test(test_layout_file_expert_round_trip),
        cmocka_unit_test(test_layout_file_expert_parse),
        cmocka_unit_test(test_layout_file_too_many_entries),
        cmocka_unit_test(test_layout_file_load_errors),
        cmocka_unit_test(test_layout_file_save_refuses_bad_index),
        cmocka_unit_test(test_layout_file_experts_round_trip),
        cmocka_unit_test(test_layout_file_experts_absent),
        cmocka_unit_test(test_layout_file_experts_limits),
        cmocka_unit_test(test_layout_file_experts_missing_key),
        cmocka_unit_test(test_layout_file_experts_bad_fields),
        cmocka_unit_test(test_layout_file_experts_bad_placement),
        cmocka_unit_test(test_layout_file_experts_bad_ids),
        cmocka_unit_test(test_layout_file_experts_bad_inter_tp),
        cmocka_unit_test(test_layout_file_experts_save_refuses),
        cmocka_unit_test(test_layout_file_cuda_ipc_parse),
        cmocka_unit_test(test_layout_file_cuda_ipc_default_device),
        cmocka_unit_test(test_layout_file_cuda_ipc_bad_hex),
        cmocka_unit_test(test_layout_file_cuda_ipc_wrong_length),
        cmocka_unit_test(test_layout_file_cuda_ipc_exclusive),
        cmocka_unit_test(test_layout_file_cuda_ipc_bad_fields),
        cmocka_unit_test(test_layout_file_cuda_ipc_regions),
        cmocka_unit_test(test_layout_file_cuda_ipc_round_trip),
        cmocka_unit_test(test_layout_file_cuda_ipc_hex_helpers),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
