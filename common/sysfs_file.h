/* sysfs_file.h - reading one small sysfs attribute file. */
#ifndef WST_SYSFS_FILE_H
#define WST_SYSFS_FILE_H

#include <stddef.h>

/* Reads the first line of the file at 'path' into buf[0..len), newline
 * dropped, truncated to fit. 0, or -1 with errno when it cannot be read
 * (ENODATA: empty; EISDIR: a directory). */
int wst_sysfs_read_line(const char *path, char *buf, size_t len);

#endif
