/* sysfs_file.c - reading one small sysfs attribute file (sysfs_file.h). */
#include "sysfs_file.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

int wst_sysfs_read_line(const char *path, char *buf, size_t len)
{
    FILE *fp = fopen(path, "r");
    int ok, err;

    if (fp == NULL)
        return -1;
    errno = 0;
    ok = fgets(buf, (int)len, fp) != NULL;
    err = errno;
    fclose(fp);
    if (!ok) {
        errno = err != 0 ? err : ENODATA;
        return -1;
    }
    buf[strcspn(buf, "\n")] = '\0';
    return 0;
}
