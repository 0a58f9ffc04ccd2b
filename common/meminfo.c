/* meminfo.c - see meminfo.h. */
#include "meminfo.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "errbuf.h"

wst_status_t wst_mem_available(uint64_t *bytes_p, char *why, size_t len)
{
    char line[256];
    uint64_t kb = 0;
    int found = 0;
    FILE *f = fopen("/proc/meminfo", "r");

    if (f == NULL) {
        wst_errf(why, len, "cannot read /proc/meminfo: %s", strerror(errno));
        return WST_ERR_IO;
    }
    while (!found && fgets(line, sizeof(line), f) != NULL)
        found = sscanf(line, "MemAvailable: %" SCNu64 " kB", &kb) == 1;
    fclose(f);
    if (!found) {
        wst_errf(why, len, "/proc/meminfo has no MemAvailable line");
        return WST_ERR_IO;
    }
    *bytes_p = kb * 1024;
    return WST_OK;
}
