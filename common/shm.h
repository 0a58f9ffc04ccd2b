/* shm.h - POSIX shared-memory objects as an engine's live memory.
 *
 * Whoever owns the live memory (the stand-in engine, the demo, the tests)
 * creates the object and poisons it, so a byte no refit wrote cannot pass
 * for data; whoever reads or checks it maps it by name. The agent imports
 * it itself (receiver/agent/region_import.c), with its own checks.
 */
#ifndef WST_SHM_H
#define WST_SHM_H

#include <stddef.h>
#include <stdint.h>

#include <wstream/status.h>

/* The byte a created object is filled with. */
#define WST_SHM_POISON 0xA5

/* Creates the object NAME (which must not exist), BYTES long, maps it
 * read-write into *map_p and fills it with WST_SHM_POISON. The caller owns
 * the object (shm_unlink) and the mapping (munmap, BYTES). On failure
 * nothing is left behind and err says which step failed and why:
 * WST_ERR_IO. Borrows name for the call. */
wst_status_t wst_shm_create(const char *name, uint64_t bytes, void **map_p,
                            char *err, size_t errlen);

/* What to check when shm_open of the existing object NAME failed with
 * errno ERR: for a missing one, where it was looked for and the usual
 * causes; "" otherwise. Static string, or 'buf' (len bytes, caller's). */
const char *wst_shm_open_hint(const char *name, int err, char *buf, size_t len);

/* Maps BYTES of the existing object NAME into *map_p, read-write when
 * WRITABLE, else read-only; the caller owns the mapping. WST_ERR_IO, with
 * err saying why, when it cannot be opened or mapped. */
wst_status_t wst_shm_map(const char *name, uint64_t bytes, int writable,
                         void **map_p, char *err, size_t errlen);

#endif
