/* one_tensor.h - the tensor libs.receive_so moves from send_main.c to
 * receive_main.c: its name, dtype and shape, the same in both programs.
 * Odd sizes, so no row or message boundary falls on a round number. */
#ifndef WST_TESTS_ONE_TENSOR_H
#define WST_TESTS_ONE_TENSOR_H

#include <wstream/status.h>

#define ONE_NAME "model.layers.0.mlp.down_proj.weight"
#define ONE_DTYPE WST_DTYPE_BF16
#define ONE_ROWS 515
#define ONE_COLS 1027
#define ONE_BYTES ((size_t)ONE_ROWS * ONE_COLS * 2)

#endif /* WST_TESTS_ONE_TENSOR_H */
