/* refill.h - what the synthetic model's refill costs a CPU, per GiB.
 *
 * Before each push the sender process regenerates its shards for the new
 * version (cluster.h): untimed in the refit, but on the sender's main
 * thread, between the bench's CPU samples. The bench measures the same
 * generator here, on a model of its own, so that row can be read: the
 * main thread's CPU per GiB less this is what push and wait cost it.
 */
#ifndef WST_BENCH_REFILL_H
#define WST_BENCH_REFILL_H

#include <stdint.h>
#include <wstream/status.h>

/* Fills the shards of the model "dense:<mib>" (one trainer rank) once to
 * touch their pages, then again for another version on this thread's CPU
 * clock; *s_per_gib_p gets that CPU time per GiB. WST_ERR_NO_MEMORY or
 * WST_ERR_INVALID (a preset the model refuses) otherwise. */
wst_status_t wst_bench_refill_cost(uint64_t mib, uint64_t seed,
                                   double *s_per_gib_p);

#endif
