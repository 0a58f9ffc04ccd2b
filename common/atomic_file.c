/* atomic_file.c - temporary file, (fsync,) rename, (fsync the directory). */
#include "atomic_file.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "errbuf.h"

/* Tells temporary files of one process apart when threads write at once. */
static atomic_uint tmp_counter;

/* The one place errno becomes a status: reports STEP on FILE and why. */
static wst_status_t io_fail(char *err, size_t errlen, const char *file,
                            const char *step, int saved_errno)
{
    wst_errf(err, errlen, "%s: %s: %s", file, step, strerror(saved_errno));
    if (saved_errno == ENOMEM)
        return WST_ERR_NO_MEMORY;
    return WST_ERR_IO;
}

static wst_status_t write_all(int fd, const char *p, size_t len, char *err,
                              size_t errlen, const char *file)
{
    while (len > 0) {
        ssize_t n = write(fd, p, len);

        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return io_fail(err, errlen, file, "write", n < 0 ? errno : EIO);
        p += n;
        len -= (size_t)n;
    }
    return WST_OK;
}

/* Makes the rename itself durable. A file system that cannot fsync a
 * directory (EINVAL) has nothing more to give. */
static wst_status_t sync_dir(const char *path, char *err, size_t errlen)
{
    char *copy = strdup(path);
    const char *dir;
    wst_status_t status = WST_OK;
    int fd;

    if (copy == NULL)
        return io_fail(err, errlen, path, "directory", ENOMEM);
    dir = dirname(copy);
    fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) {
        status = io_fail(err, errlen, dir, "open directory", errno);
        goto out_free_copy;
    }
    if (fsync(fd) != 0 && errno != EINVAL)
        status = io_fail(err, errlen, dir, "fsync directory", errno);
    close(fd);
out_free_copy:
    free(copy);
    return status;
}

static wst_status_t replace(const char *path, const void *data, size_t len,
                            mode_t mode, int durable, char *err, size_t errlen)
{
    size_t tmplen;
    char *tmp = NULL;
    wst_status_t status;
    int fd;

    if (path == NULL || path[0] == '\0' || (data == NULL && len > 0)) {
        wst_errf(err, errlen, "atomic write: no path or no data");
        return WST_ERR_INVALID;
    }
    tmplen = strlen(path) + 48;
    tmp = malloc(tmplen);
    if (tmp == NULL)
        return io_fail(err, errlen, path, "temporary name", ENOMEM);
    snprintf(tmp, tmplen, "%s.tmp.%ld.%u", path, (long)getpid(),
             atomic_fetch_add(&tmp_counter, 1));
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
    if (fd < 0) {
        status = io_fail(err, errlen, tmp, "create", errno);
        goto out_free_tmp;
    }
    status = write_all(fd, data, len, err, errlen, tmp);
    if (status == WST_OK && durable && fsync(fd) != 0)
        status = io_fail(err, errlen, tmp, "fsync", errno);
    if (close(fd) != 0 && status == WST_OK)
        status = io_fail(err, errlen, tmp, "close", errno);
    if (status != WST_OK)
        goto err_unlink_tmp;
    if (rename(tmp, path) != 0) {
        status = io_fail(err, errlen, path, "rename", errno);
        goto err_unlink_tmp;
    }
    status = durable ? sync_dir(path, err, errlen) : WST_OK;
    goto out_free_tmp;

err_unlink_tmp:
    unlink(tmp);
out_free_tmp:
    free(tmp);
    return status;
}

wst_status_t wst_atomic_write(const char *path, const void *data, size_t len,
                              mode_t mode, char *err, size_t errlen)
{
    return replace(path, data, len, mode, 1, err, errlen);
}

wst_status_t wst_atomic_replace(const char *path, const void *data, size_t len,
                                mode_t mode, char *err, size_t errlen)
{
    return replace(path, data, len, mode, 0, err, errlen);
}
