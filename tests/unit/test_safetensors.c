/* test_safetensors.c - the safetensors parser of wstream-send
 * (tools/send/safetensors.h), on files built in memory. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "safetensors.h"

/* ---- helpers ------------------------------------------------------------ */

/* A file: the header length, 'header' and 'data_len' data bytes (byte i
 * is i & 0xff). Freed by the caller. */
static unsigned char *build(const char *header, size_t data_len, size_t *size_p)
{
    size_t n = strlen(header), size = 8 + n + data_len;
    unsigned char *b = malloc(size);

    assert_non_null(b);
    for (int i = 0; i < 8; i++)
        b[i] = (unsigned char)((uint64_t)n >> (8 * i));
    memcpy(b + 8, header, n);
    for (size_t i = 0; i < data_len; i++)
        b[8 + n + i] = (unsigned char)i;
    *size_p = size;
    return b;
}

/* Parses 'header' + data, expecting 'status' and 'needle' in the message;
 * the output must be left zeroed. */
static void expect_refused(const char *header, size_t data_len,
                           wst_status_t status, const char *needle)
{
    struct wst_safetensors f;
    char err[1024] = "";
    size_t size;
    unsigned char *b = build(header, data_len, &size);

    memset(&f, 0xa5, sizeof(f));
    assert_int_equal(
        wst_safetensors_parse("x.safetensors", b, size, &f, err, sizeof(err)),
        status);
    if (strstr(err, needle) == NULL || strncmp(err, "x.safetensors: ", 15))
        fail_msg("message '%s' lacks '%s' or the file name", err, needle);
    assert_null(f.tensors);
    assert_int_equal(f.n_tensors, 0);
    free(b);
}

/* ---- cases -------------------------------------------------------------- */

static void test_safetensors_parses_entries(void **state)
{
    (void)state;
    /* Out of order in the header, a gap of 2 bytes after "b", padded. */
    const char *h = "{\"__metadata__\":{\"format\":\"pt\"},"
                    "\"b\":{\"dtype\":\"BF16\",\"shape\":[3],"
                    "\"data_offsets\":[24,30]},"
                    "\"a\":{\"dtype\":\"F32\",\"shape\":[2,3],"
                    "\"data_offsets\":[0,24]},"
                    "\"c\":{\"dtype\":\"F8_E4M3\",\"shape\":[1,1,4],"
                    "\"data_offsets\":[32,36]}}    ";
    struct wst_safetensors f;
    char err[512] = "";
    size_t size;
    unsigned char *b = build(h, 36, &size);

    assert_int_equal(wst_safetensors_parse("ok", b, size, &f, err, sizeof(err)),
                     WST_OK);
    assert_int_equal(f.n_tensors, 3);
    assert_int_equal(f.header_len, strlen(h));
    assert_int_equal(f.tensor_bytes, 34);
    assert_string_equal(f.tensors[0].name, "a");
    assert_int_equal(f.tensors[0].dtype, WST_DTYPE_F32);
    assert_int_equal(f.tensors[0].ndim, 2);
    assert_int_equal(f.tensors[0].shape[1], 3);
    assert_ptr_equal(f.tensors[0].data, b + 8 + strlen(h));
    assert_string_equal(f.tensors[1].name, "b");
    assert_string_equal(f.tensors[1].file_dtype, "BF16");
    assert_ptr_equal(f.tensors[1].data, b + 8 + strlen(h) + 24);
    assert_string_equal(f.tensors[2].name, "c");
    assert_int_equal(f.tensors[2].dtype, WST_DTYPE_FP8_E4M3);
    assert_int_equal(((const unsigned char *)f.tensors[2].data)[0], 32);
    wst_safetensors_close(&f);
    assert_null(f.tensors);
    free(b);
}

static void test_safetensors_scalar_and_empty(void **state)
{
    (void)state;
    const char *h = "{\"s\":{\"dtype\":\"I64\",\"shape\":[],"
                    "\"data_offsets\":[0,8]},"
                    "\"e\":{\"dtype\":\"F16\",\"shape\":[0,7],"
                    "\"data_offsets\":[8,8]},"
                    "\"z\":{\"dtype\":\"U8\",\"shape\":[3,0],"
                    "\"data_offsets\":[0,0]}}";
    struct wst_safetensors f;
    char err[512] = "";
    size_t size;
    unsigned char *b = build(h, 8, &size);

    /* Empty tensors hold no bytes, so they overlap nothing. */
    assert_int_equal(wst_safetensors_parse("ok", b, size, &f, err, sizeof(err)),
                     WST_OK);
    assert_int_equal(f.n_tensors, 3);
    for (size_t i = 0; i < 3; i++)
        if (strcmp(f.tensors[i].name, "s") == 0)
            assert_int_equal(f.tensors[i].ndim, 0);
    wst_safetensors_close(&f);
    free(b);
}

static void test_safetensors_refuses_short_files(void **state)
{
    (void)state;
    struct wst_safetensors f;
    char err[512] = "";
    unsigned char b[16] = {8, 0, 0, 0, 0, 0, 0, 0, '{', '}'};

    assert_int_equal(wst_safetensors_parse("t", b, 5, &f, err, sizeof(err)),
                     WST_ERR_INTEGRITY);
    assert_non_null(strstr(err, "t: truncated: 5 bytes"));
    /* Claims 8 header bytes, holds 2. */
    assert_int_equal(wst_safetensors_parse("t", b, 10, &f, err, sizeof(err)),
                     WST_ERR_INTEGRITY);
    assert_non_null(strstr(err, "header length 8 runs past the end"));
    /* A length near 2^64 must not wrap the bounds check. */
    memset(b, 0xff, 8);
    assert_int_equal(wst_safetensors_parse("t", b, 16, &f, err, sizeof(err)),
                     WST_ERR_INTEGRITY);
}

static void test_safetensors_refuses_huge_header(void **state)
{
    (void)state;
    struct wst_safetensors f;
    char err[512] = "";
    uint64_t n = WST_ST_HEADER_MAX + 1;
    unsigned char b[8];

    for (int i = 0; i < 8; i++)
        b[i] = (unsigned char)(n >> (8 * i));
    /* The size is claimed, not backed: the cap is checked before the
     * header is read, which is what this shows. */
    assert_int_equal(wst_safetensors_parse("t", b, n + 8, &f, err, sizeof(err)),
                     WST_ERR_TOO_LARGE);
    assert_non_null(strstr(err, "over the limit"));
}

/* One more tensor than the limit, each empty: refused while counting,
 * with nothing allocated for the tensors (the output stays zeroed). */
static void test_safetensors_refuses_too_many_tensors(void **state)
{
    (void)state;
    /* Each entry is 60 bytes with its comma. */
    size_t n = WST_ST_MAX_TENSORS + 1, cap = n * 64 + 64, at = 0, last = 0;
    char *h = malloc(cap);

    assert_non_null(h);
    at += (size_t)snprintf(h + at, cap - at, "{\"__metadata__\":{},");
    for (size_t i = 0; i < n; i++) {
        last = at; /* where the last entry starts */
        at += (size_t)snprintf(h + at, cap - at,
                               "%s"
                               "\"t%07zu\":{\"dtype\":"
                               "\"U8\",\"shape\":[0],\"data_offsets\":[0,0]}",
                               i ? "," : "", i);
    }
    snprintf(h + at, cap - at, "}");
    expect_refused(h, 0, WST_ERR_TOO_LARGE,
                   "the header lists more than 262144 tensors");
    /* At the limit, with "__metadata__" besides: accepted. */
    snprintf(h + last, cap - last, "}");
    struct wst_safetensors f;
    char err[512] = "";
    size_t size;
    unsigned char *b = build(h, 0, &size);
    assert_int_equal(wst_safetensors_parse("ok", b, size, &f, err, sizeof(err)),
                     WST_OK);
    assert_int_equal(f.n_tensors, WST_ST_MAX_TENSORS);
    wst_safetensors_close(&f);
    free(b);
    free(h);
}

/* json-c keeps one of two equal keys; the parser refuses both. */
static void test_safetensors_refuses_duplicate_names(void **state)
{
    (void)state;
    expect_refused("{\"a\":{\"dtype\":\"U8\",\"shape\":[2],"
                   "\"data_offsets\":[0,2]},\"b\":{\"dtype\":\"U8\","
                   "\"shape\":[2],\"data_offsets\":[2,4]},\"a\":{\"dtype\":"
                   "\"U8\",\"shape\":[0],\"data_offsets\":[4,4]}}",
                   4, WST_ERR_INTEGRITY,
                   "tensor 'a' is listed twice in the header");
    /* The same name spelled with an escape is the same name. */
    expect_refused("{\"a\":{\"dtype\":\"U8\",\"shape\":[2],"
                   "\"data_offsets\":[0,2]},\"\\u0061\":{\"dtype\":\"U8\","
                   "\"shape\":[2],\"data_offsets\":[2,4]}}",
                   4, WST_ERR_INTEGRITY,
                   "tensor 'a' is listed twice in the header");
    expect_refused("{\"__metadata__\":{},\"__metadata__\":{}}", 0,
                   WST_ERR_INTEGRITY, "\"__metadata__\" is listed twice");
    expect_refused("{\"__metadata__\":{},\"\\u005f_metadata__\":{}}", 0,
                   WST_ERR_INTEGRITY, "\"__metadata__\" is listed twice");
}

/* The top level is walked by hand (st_scan.c): its structure errors. */
static void test_safetensors_refuses_bad_structure(void **state)
{
    (void)state;
    expect_refused("{\"a\" {}}", 0, WST_ERR_INTEGRITY, "expected ':'");
    expect_refused("{\"a\":{} \"b\":{}}", 0, WST_ERR_INTEGRITY,
                   "expected ',' or '}'");
    expect_refused("{1:{}}", 0, WST_ERR_INTEGRITY, "expected a string key");
    expect_refused("{\"a\":{\"b\":[}}", 0, WST_ERR_INTEGRITY, "not valid JSON");
    expect_refused("{\"a\":{\"x\":\"}\"", 0, WST_ERR_INTEGRITY,
                   "it ends early");
    expect_refused("{\"a\":tru}", 0, WST_ERR_INTEGRITY,
                   "tensor 'a': entry is not an object");
    expect_refused("{\"a\":}", 0, WST_ERR_INTEGRITY, "expected a value");
}

static void test_safetensors_refuses_bad_json(void **state)
{
    (void)state;
    expect_refused("[]", 0, WST_ERR_INTEGRITY, "does not start with a JSON");
    expect_refused("", 0, WST_ERR_INTEGRITY, "does not start with a JSON");
    expect_refused("{\"a\":", 0, WST_ERR_INTEGRITY, "it ends early");
    expect_refused("{\"a\":{},}", 0, WST_ERR_INTEGRITY, "not valid JSON");
    expect_refused("{} x", 0, WST_ERR_INTEGRITY, "data after its JSON object");
    expect_refused("{\"a\\u0000b\":{}}", 0, WST_ERR_INTEGRITY, "NUL character");
    expect_refused("{\"\xff\":{}}", 0, WST_ERR_INTEGRITY, "not valid JSON");
    expect_refused("{\"__metadata__\":{\"k\":1}}", 0, WST_ERR_INTEGRITY,
                   "\"__metadata__\" entry \"k\" is not a string");
    expect_refused("{\"__metadata__\":[]}", 0, WST_ERR_INTEGRITY,
                   "\"__metadata__\" is not an object");
}

static void test_safetensors_allows_padding(void **state)
{
    (void)state;
    struct wst_safetensors empty;
    size_t padded_size;
    unsigned char *padded = build("{}  \n\t\r ", 0, &padded_size);

    /* Whitespace after the object is padding. */
    assert_int_equal(
        wst_safetensors_parse("ok", padded, padded_size, &empty, NULL, 0),
        WST_OK);
    wst_safetensors_close(&empty);
    free(padded);
}

static void test_safetensors_escaped_backslash_is_fine(void **state)
{
    (void)state;
    /* "a\\u0000" is a backslash followed by the text u0000, not a NUL. */
    const char *h = "{\"__metadata__\":{\"k\":\"a\\\\u0000\"}}";
    struct wst_safetensors f;
    char err[512] = "";
    size_t size;
    unsigned char *b = build(h, 0, &size);

    assert_int_equal(wst_safetensors_parse("ok", b, size, &f, err, sizeof(err)),
                     WST_OK);
    assert_int_equal(f.n_tensors, 0);
    wst_safetensors_close(&f);
    free(b);
}

static void test_safetensors_refuses_bad_entries(void **state)
{
    (void)state;
    expect_refused("{\"a\":[]}", 0, WST_ERR_INTEGRITY,
                   "tensor 'a': entry is not an object");
    expect_refused("{\"a\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
                   WST_ERR_INTEGRITY, "tensor 'a': \"dtype\" is missing");
    expect_refused("{\"a\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", 4,
                   WST_ERR_INTEGRITY, "tensor 'a': \"shape\" is missing");
    expect_refused("{\"a\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4,
                   WST_ERR_INTEGRITY,
                   "tensor 'a': \"data_offsets\" is missing");
    expect_refused(
        "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0]}}", 4,
        WST_ERR_INTEGRITY, "not an array of two integers");
    expect_refused("{\"a\":{\"dtype\":\"F32\",\"shape\":[1.0],"
                   "\"data_offsets\":[0,4]}}",
                   4, WST_ERR_INTEGRITY, "\"shape\" holds a value that is not");
    expect_refused("{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],"
                   "\"data_offsets\":[0,4]}}",
                   4, WST_ERR_INTEGRITY, "negative value (-1)");
    expect_refused("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],"
                   "\"data_offsets\":[4,0]}}",
                   4, WST_ERR_INTEGRITY, "end before they begin");
    expect_refused("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],"
                   "\"data_offsets\":[0,\"4\"]}}",
                   4, WST_ERR_INTEGRITY, "not an integer");
    expect_refused("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],"
                   "\"data_offsets\":[0,99999999999999999999]}}",
                   4, WST_ERR_INTEGRITY, "too large");
}

static void test_safetensors_refuses_bounds_and_sizes(void **state)
{
    (void)state;
    expect_refused("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],"
                   "\"data_offsets\":[0,8]}}",
                   7, WST_ERR_INTEGRITY,
                   "tensor 'a': data_offsets [0, 8] run past the end of the "
                   "file (its data region holds 7 bytes)");
    expect_refused("{\"a\":{\"dtype\":\"F32\",\"shape\":[3],"
                   "\"data_offsets\":[0,8]}}",
                   8, WST_ERR_INTEGRITY,
                   "shape and dtype F32 make 12 bytes, but data_offsets [0, "
                   "8] hold 8");
    /* 2^40 * 2^40 elements: the product overflows. */
    expect_refused("{\"a\":{\"dtype\":\"U8\",\"shape\":[1099511627776,"
                   "1099511627776],\"data_offsets\":[0,0]}}",
                   0, WST_ERR_INTEGRITY, "element count overflows");
    /* 2^62 elements of 8 bytes: the byte count overflows. */
    expect_refused("{\"a\":{\"dtype\":\"I64\",\"shape\":[4611686018427387904],"
                   "\"data_offsets\":[0,0]}}",
                   0, WST_ERR_INTEGRITY, "byte count overflows");
}

static void test_safetensors_refuses_overlaps(void **state)
{
    (void)state;
    expect_refused("{\"a\":{\"dtype\":\"U8\",\"shape\":[8],"
                   "\"data_offsets\":[0,8]},"
                   "\"b\":{\"dtype\":\"U8\",\"shape\":[4],"
                   "\"data_offsets\":[6,10]}}",
                   10, WST_ERR_INTEGRITY,
                   "tensors 'a' [0, 8] and 'b' [6, 10] overlap");
    /* 'c' overlaps 'a', not 'b' just before it. */
    expect_refused("{\"a\":{\"dtype\":\"U8\",\"shape\":[100],"
                   "\"data_offsets\":[0,100]},"
                   "\"b\":{\"dtype\":\"U8\",\"shape\":[10],"
                   "\"data_offsets\":[10,20]},"
                   "\"c\":{\"dtype\":\"U8\",\"shape\":[10],"
                   "\"data_offsets\":[30,40]}}",
                   100, WST_ERR_INTEGRITY, "overlap");
    /* The same bytes twice. */
    expect_refused("{\"a\":{\"dtype\":\"U8\",\"shape\":[4],"
                   "\"data_offsets\":[0,4]},"
                   "\"b\":{\"dtype\":\"I8\",\"shape\":[4],"
                   "\"data_offsets\":[0,4]}}",
                   4, WST_ERR_INTEGRITY, "overlap");
}

static void test_safetensors_refuses_what_wstream_lacks(void **state)
{
    (void)state;
    char h[1024], name[WST_NAME_MAX + 1];

    expect_refused("{\"a\":{\"dtype\":\"BOOL\",\"shape\":[1],"
                   "\"data_offsets\":[0,1]}}",
                   1, WST_ERR_UNSUPPORTED,
                   "tensor 'a': dtype BOOL has no wstream equivalent");
    expect_refused("{\"a\":{\"dtype\":\"bf16\",\"shape\":[1],"
                   "\"data_offsets\":[0,2]}}",
                   2, WST_ERR_UNSUPPORTED,
                   "tensor 'a': unknown dtype \"bf16\"");
    expect_refused("{\"a\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,1],"
                   "\"data_offsets\":[0,1]}}",
                   1, WST_ERR_UNSUPPORTED, "9 dimensions");
    expect_refused("{\"\":{\"dtype\":\"U8\",\"shape\":[1],"
                   "\"data_offsets\":[0,1]}}",
                   1, WST_ERR_UNSUPPORTED, "empty name");
    memset(name, 'n', WST_NAME_MAX);
    name[WST_NAME_MAX] = '\0';
    snprintf(h, sizeof(h),
             "{\"%s\":{\"dtype\":\"U8\",\"shape\":[1],"
             "\"data_offsets\":[0,1]}}",
             name);
    expect_refused(h, 1, WST_ERR_UNSUPPORTED, "its name has 256 bytes");
}

static void test_safetensors_dtype_names(void **state)
{
    (void)state;
    assert_string_equal(wst_safetensors_dtype_name(WST_DTYPE_BF16), "BF16");
    assert_string_equal(wst_safetensors_dtype_name(WST_DTYPE_FP8_E5M2),
                        "F8_E5M2");
    assert_string_equal(wst_safetensors_dtype_name(WST_DTYPE_I64), "I64");
    assert_null(wst_safetensors_dtype_name(WST_DTYPE_INVALID));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_safetensors_parses_entries),
        cmocka_unit_test(test_safetensors_scalar_and_empty),
        cmocka_unit_test(test_safetensors_refuses_short_files),
        cmocka_unit_test(test_safetensors_refuses_huge_header),
        cmocka_unit_test(test_safetensors_refuses_too_many_tensors),
        cmocka_unit_test(test_safetensors_refuses_duplicate_names),
        cmocka_unit_test(test_safetensors_refuses_bad_structure),
        cmocka_unit_test(test_safetensors_refuses_bad_json),
        cmocka_unit_test(test_safetensors_allows_padding),
        cmocka_unit_test(test_safetensors_escaped_backslash_is_fine),
        cmocka_unit_test(test_safetensors_refuses_bad_entries),
        cmocka_unit_test(test_safetensors_refuses_bounds_and_sizes),
        cmocka_unit_test(test_safetensors_refuses_overlaps),
        cmocka_unit_test(test_safetensors_refuses_what_wstream_lacks),
        cmocka_unit_test(test_safetensors_dtype_names),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
