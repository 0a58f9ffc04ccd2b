/* sysfs_file.c - reading sysfs: one small attribute file, the entries of
 * one directory (sysfs_file.h). */
#include "sysfs_file.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
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

int wst_sysfs_read_attr(const char *dir, const char *name, char *buf,
                        size_t len)
{
    char path[PATH_MAX];
    int n = snprintf(path, sizeof(path), "%s/%s", dir, name);

    if (n < 0 || (size_t)n >= sizeof(path)) {
        errno = ENAMETOOLONG;
        return -1;
    }
    return wst_sysfs_read_line(path, buf, len);
}

static int not_dot(const struct dirent *e)
{
    return e->d_name[0] != '.';
}

int wst_sysfs_list(const char *dir,
                   int (*compar)(const struct dirent **,
                                 const struct dirent **),
                   wst_sysfs_entry_fn fn, void *arg, wst_status_t *status_p)
{
    struct dirent **ents = NULL;
    wst_status_t status = WST_OK;
    int n = scandir(dir, &ents, not_dot, compar);

    if (n < 0)
        return -1;
    for (int i = 0; i < n && status == WST_OK; i++)
        status = fn(arg, dir, ents[i]->d_name);
    for (int i = 0; i < n; i++)
        free(ents[i]);
    free(ents);
    *status_p = status;
    return 0;
}
