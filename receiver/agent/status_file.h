/* status_file.h - the files wstream-agent writes for whoever started it:
 * its state (--status-file, one JSON object, after every commit or failure)
 * and its bound ports (--port-file, --metrics-port-file).
 *
 * Each file is written whole with wst_atomic_replace() (common/atomic_file.h),
 * so a reader never sees half of one. Not fsynced: the agent writes them
 * again when it starts, and the status file is written inside the commit
 * hook, before the senders hear the commit (the durable record of a
 * version is the state file's, state_store.h).
 */
#ifndef WST_STATUS_FILE_H
#define WST_STATUS_FILE_H

#include <stdint.h>
#include <wstream/status.h>

#include "agent.h"

/* Writes the receiver's state and the last refit's per-layer timeline to
 * a->set.status_file; does nothing without one or before a->receiver
 * exists. A failed write is logged, not returned. Borrows a for the call. */
void wst_status_file_write(struct agent *a);

/* Writes PORT and a newline to PATH ("": not asked for, WST_OK at once);
 * WHAT names the file in the error logged. WST_ERR_IO (WST_ERR_NO_MEMORY
 * when out of memory) when PATH cannot be written. Borrows a and path for the
 * call. */
wst_status_t wst_status_file_write_port(struct agent *a, const char *path,
                                        uint16_t port, const char *what);

#endif
