/* sysfs_file.h - reading sysfs: one small attribute file, the entries of
 * one directory. */
#ifndef WST_SYSFS_FILE_H
#define WST_SYSFS_FILE_H

#include <dirent.h>
#include <stddef.h>

#include <wstream/status.h>

/* Reads the first line of the file at 'path' into buf[0..len), newline
 * dropped, truncated to fit. 0, or -1 with errno when it cannot be read
 * (ENODATA: empty; EISDIR: a directory). */
int wst_sysfs_read_line(const char *path, char *buf, size_t len);

/* wst_sysfs_read_line of attribute 'name' in directory 'dir' (dir/name);
 * ENAMETOOLONG when that path does not fit PATH_MAX. */
int wst_sysfs_read_attr(const char *dir, const char *name, char *buf,
                        size_t len);

/* One entry of a directory being listed: 'dir' and 'name' are borrowed
 * for the call. Anything but WST_OK ends the listing. */
typedef wst_status_t (*wst_sysfs_entry_fn)(void *arg, const char *dir,
                                           const char *name);

/* Calls fn for each entry of 'dir' whose name does not start with '.', in
 * the order of 'compar' (alphasort, versionsort), until one returns other
 * than WST_OK. 0 with that status in *status_p (WST_OK: every call did, or
 * there were none), or -1 with errno when 'dir' cannot be listed (ENOENT:
 * it does not exist), fn never called and *status_p untouched. */
int wst_sysfs_list(const char *dir,
                   int (*compar)(const struct dirent **,
                                 const struct dirent **),
                   wst_sysfs_entry_fn fn, void *arg, wst_status_t *status_p);

#endif
