/* atomic_file.h - writing a whole file so that a reader never sees half of it.
 *
 * wst_atomic_write() writes the bytes to a temporary file in the target's
 * directory (PATH.tmp.PID.N), fsyncs it, renames it over PATH and fsyncs
 * the directory, so after WST_OK the new contents survive a crash and a
 * reader sees either the old file or the new one, never a mix. On failure
 * the temporary file is removed and PATH is left as it was.
 */
#ifndef WST_ATOMIC_FILE_H
#define WST_ATOMIC_FILE_H

#include <stddef.h>
#include <sys/types.h>

#include <wstream/status.h>

/* Replaces PATH with the LEN bytes at DATA; a new file gets MODE as open(2)
 * gives it (the umask applies). WST_ERR_INVALID for a NULL path (or NULL
 * data with len > 0), WST_ERR_NO_MEMORY when out of memory, WST_ERR_IO
 * for any other failure; err gets the step, the file and the
 * system's reason ("PATH.tmp.1.0: fsync: Input/output error"). Borrows
 * path and data for the call; err may be NULL. Safe from any thread. */
wst_status_t wst_atomic_write(const char *path, const void *data, size_t len,
                              mode_t mode, char *err, size_t errlen);

/* The same for readers (the old file or the new one, never a mix), without
 * the two fsyncs: after a crash PATH may hold either. For files whose
 * writer rewrites them when it starts again (status and port files): on
 * this project's 2-core VM the two cost a refit's commit 1.1-1.8 ms.
 * Same arguments and statuses. */
wst_status_t wst_atomic_replace(const char *path, const void *data, size_t len,
                                mode_t mode, char *err, size_t errlen);

#endif
