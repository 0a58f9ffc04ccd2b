/* meminfo.h - how much memory this host can still give: MemAvailable of
 * /proc/meminfo. The agent checks its regions against it at start, the
 * bench its refit size. */
#ifndef WST_MEMINFO_H
#define WST_MEMINFO_H

#include <stddef.h>
#include <stdint.h>

#include <wstream/status.h>

/* MemAvailable in bytes into *bytes_p; WST_ERR_IO with why[] when
 * /proc/meminfo cannot be read or has no such line. */
wst_status_t wst_mem_available(uint64_t *bytes_p, char *why, size_t len);

#endif
