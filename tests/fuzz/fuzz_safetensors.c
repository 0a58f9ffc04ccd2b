/* fuzz_safetensors.c - libFuzzer harness for wstream-send's safetensors
 * parser (tools/send/safetensors.h), on whole files in a buffer.
 *
 * What parses must hold what the header promises the sender: at most
 * WST_ST_MAX_TENSORS tensors, sorted by their first byte, none
 * overlapping, each inside the file with its bytes matching its shape and
 * dtype, no name twice.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtype.h"
#include "safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(int ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "fuzz_safetensors: a parsed file has %s\n", what);
        abort();
    }
}

static void check_tensor(const struct wst_safetensors *f,
                         const struct wst_st_tensor *t, const uint8_t *data)
{
    uint64_t bytes = wst_dtype_size(t->dtype);
    const uint8_t *region = data + 8 + f->header_len;

    check(t->name != NULL && t->name[0] != '\0' &&
              strlen(t->name) < WST_NAME_MAX,
          "a bad name");
    check(t->ndim <= WST_MAX_DIMS, "too many dimensions");
    for (uint32_t d = 0; d < t->ndim; d++)
        bytes *= t->shape[d];
    check(bytes == t->end - t->begin, "bytes that disagree with the shape");
    check(t->begin <= t->end && t->end <= f->size - 8 - f->header_len,
          "a tensor outside the file");
    check((const uint8_t *)t->data == region + t->begin,
          "a tensor's data pointer elsewhere");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct wst_safetensors f;
    uint64_t sum = 0, reach = 0;
    char err[1024];

    if (wst_safetensors_parse("fuzz", data, size, &f, err, sizeof(err)) !=
        WST_OK)
        return 0;
    check(f.n_tensors <= WST_ST_MAX_TENSORS, "too many tensors");
    check(f.header_len <= WST_ST_HEADER_MAX && f.header_len <= size - 8,
          "a header past its limit");
    for (size_t i = 0; i < f.n_tensors; i++) {
        const struct wst_st_tensor *t = &f.tensors[i];
        check_tensor(&f, t, data);
        check(i == 0 || f.tensors[i - 1].begin <= t->begin,
              "tensors out of order");
        check(t->begin == t->end || t->begin >= reach, "overlapping tensors");
        if (t->end > reach)
            reach = t->end;
        sum += t->end - t->begin;
        for (size_t j = 0; j < i; j++)
            check(strcmp(f.tensors[j].name, t->name) != 0, "a name twice");
    }
    check(sum == f.tensor_bytes, "a wrong byte total");
    wst_safetensors_close(&f);
    return 0;
}
