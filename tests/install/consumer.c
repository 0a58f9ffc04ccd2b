/* consumer.c - install.consumers' program, built out of tree against an
 * installed wstream (pkg-config, or find_package): pushes the bf16 tensor
 * "model.layers.0.mlp.down_proj.weight" [37, 53], read from a file, as
 * VERSION and waits until the agent committed it.
 *
 *     consumer HOST:PORT TENSOR_FILE SECRET_FILE VERSION
 *
 * Exit 0 once committed; otherwise the negated wst_status_t (2: usage). */
#include <stdio.h>
#include <stdlib.h>
#include <wstream/sender.h>
#include <wstream/version.h>

int main(int argc, char **argv)
{
    static unsigned char data[37 * 53 * 2];
    FILE *f = argc == 5 ? fopen(argv[2], "rb") : NULL;
    if (f == NULL || fread(data, 1, sizeof(data), f) != sizeof(data))
        return 2;
    fclose(f);
    const char *receivers[] = {argv[1]};
    struct wst_sender_params p = {
        .field_mask = WST_SENDER_PARAM_RANK | WST_SENDER_PARAM_WORLD_SIZE |
                      WST_SENDER_PARAM_RECEIVERS | WST_SENDER_PARAM_TIMEOUT |
                      WST_SENDER_PARAM_AUTH,
        .world_size = 1,
        .receivers = receivers,
        .n_receivers = 1,
        .timeout_s = 20,
        .auth_secret_file = argv[3],
    };
    uint64_t shape[2] = {37, 53}, start[2] = {0, 0};
    struct wst_shard shard = {.name = "model.layers.0.mlp.down_proj.weight",
                              .data = data,
                              .mem_type = WST_MEM_HOST,
                              .dtype = WST_DTYPE_BF16,
                              .ndim = 2,
                              .shape = shape,
                              .box_start = start,
                              .box_stop = shape};
    wst_sender_t *s = NULL;
    wst_status_t st = wst_sender_create(&p, &s);
    if (st == WST_OK)
        st = wst_sender_register(s, &shard);
    if (st == WST_OK)
        st = wst_sender_push(s, strtoull(argv[4], NULL, 10));
    if (st == WST_OK)
        st = wst_sender_wait(s, 30.0);
    printf("consumer (wstream %s): %s\n", WST_VERSION_STRING,
           wst_status_name(st));
    if (s != NULL)
        wst_sender_destroy(s);
    return st == WST_OK ? 0 : -(int)st;
}
