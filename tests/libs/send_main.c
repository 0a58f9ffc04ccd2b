/* send_main.c - libs.receive_so's sender, a program of its own over
 * libwstream_sender.so: pushes the tensor of one_tensor.h, read from a
 * file, as version 1 and waits until the receiver committed it.
 *
 *     wst-so-send HOST:PORT TENSOR_FILE SECRET_FILE
 *
 * Exit 0 once committed; otherwise the negated wst_status_t, with the
 * sender's last error on stderr (2: bad usage or an unreadable file). */
#include <stdio.h>
#include <stdlib.h>
#include <wstream/sender.h>

#include "one_tensor.h"

/* The whole of 'path' into a buffer of ONE_BYTES the caller frees. */
static void *read_tensor(const char *path)
{
    FILE *f = fopen(path, "rb");
    void *buf = malloc(ONE_BYTES);

    if (f == NULL || buf == NULL || fread(buf, 1, ONE_BYTES, f) != ONE_BYTES) {
        fprintf(stderr, "wst-so-send: cannot read %zu bytes of %s\n",
                (size_t)ONE_BYTES, path);
        free(buf);
        buf = NULL;
    }
    if (f != NULL)
        fclose(f);
    return buf;
}

static wst_status_t push_one(const char *addr, void *data, const char *secret)
{
    const char *receivers[] = {addr};
    struct wst_sender_params p = {
        .field_mask = WST_SENDER_PARAM_RANK | WST_SENDER_PARAM_WORLD_SIZE |
                      WST_SENDER_PARAM_RECEIVERS | WST_SENDER_PARAM_TIMEOUT |
                      WST_SENDER_PARAM_AUTH,
        .rank = 0,
        .world_size = 1,
        .receivers = receivers,
        .n_receivers = 1,
        .timeout_s = 20,
        .auth_secret_file = secret,
    };
    uint64_t shape[2] = {ONE_ROWS, ONE_COLS}, start[2] = {0, 0};
    struct wst_shard shard = {.name = ONE_NAME,
                              .data = data,
                              .mem_type = WST_MEM_HOST,
                              .dtype = ONE_DTYPE,
                              .ndim = 2,
                              .shape = shape,
                              .box_start = start,
                              .box_stop = shape};
    wst_sender_t *s = NULL;
    wst_status_t st = wst_sender_create(&p, &s);

    if (st != WST_OK) {
        fprintf(stderr, "wst-so-send: create: %s\n", wst_status_string(st));
        return st;
    }
    st = wst_sender_register(s, &shard);
    if (st == WST_OK)
        st = wst_sender_push(s, 1);
    if (st == WST_OK)
        st = wst_sender_wait(s, 30.0);
    if (st != WST_OK)
        fprintf(stderr, "wst-so-send: %s: %s\n", wst_status_name(st),
                wst_sender_last_error(s));
    wst_sender_destroy(s);
    return st;
}

int main(int argc, char **argv)
{
    void *data;
    wst_status_t st;

    if (argc != 4) {
        fprintf(stderr, "usage: wst-so-send HOST:PORT TENSOR_FILE "
                        "SECRET_FILE\n");
        return 2;
    }
    data = read_tensor(argv[2]);
    if (data == NULL)
        return 2;
    st = push_one(argv[1], data, argv[3]);
    free(data);
    return st == WST_OK ? 0 : -(int)st;
}
