/* shm.c - create and poison, or map, a POSIX shared-memory object. */
#include "shm.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "errbuf.h"

static wst_status_t shm_fail(char *err, size_t errlen, const char *name,
                             const char *step, int saved_errno)
{
    wst_errf(err, errlen, "%s %s: %s", step, name, strerror(saved_errno));
    return WST_ERR_IO;
}

/* A missing object is the usual start-up race or a naming slip: say where
 * it was looked for and what to check. */
const char *wst_shm_open_hint(const char *name, int err, char *buf, size_t len)
{
    if (err != ENOENT || len == 0)
        return "";
    snprintf(buf, len,
             " (no /dev/shm/%s: the engine has not created it yet, or runs "
             "in another IPC namespace; check the name in the layout and "
             "start the agent after the engine)",
             name[0] == '/' ? name + 1 : name);
    return buf;
}

static wst_status_t shm_missing(char *err, size_t errlen, const char *name)
{
    char hint[320];

    wst_errf(err, errlen, "shm_open %s: %s%s", name, strerror(ENOENT),
             wst_shm_open_hint(name, ENOENT, hint, sizeof(hint)));
    return WST_ERR_IO;
}

wst_status_t wst_shm_create(const char *name, uint64_t bytes, void **map_p,
                            char *err, size_t errlen)
{
    wst_status_t status;
    void *p;
    int fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600);

    if (fd < 0)
        return shm_fail(err, errlen, name, "shm_open", errno);
    if (ftruncate(fd, (off_t)bytes) != 0) {
        status = shm_fail(err, errlen, name, "ftruncate", errno);
        goto err_unlink;
    }
    p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
        status = shm_fail(err, errlen, name, "mmap", errno);
        goto err_unlink;
    }
    close(fd);
    memset(p, WST_SHM_POISON, bytes);
    *map_p = p;
    return WST_OK;

err_unlink:
    close(fd);
    shm_unlink(name);
    return status;
}

wst_status_t wst_shm_map(const char *name, uint64_t bytes, int writable,
                         void **map_p, char *err, size_t errlen)
{
    void *p;
    int saved_errno;
    int fd = shm_open(name, writable ? O_RDWR : O_RDONLY, 0);

    if (fd < 0 && errno == ENOENT)
        return shm_missing(err, errlen, name);
    if (fd < 0)
        return shm_fail(err, errlen, name, "shm_open", errno);
    p = mmap(NULL, bytes, writable ? PROT_READ | PROT_WRITE : PROT_READ,
             MAP_SHARED, fd, 0);
    saved_errno = errno;
    close(fd);
    if (p == MAP_FAILED)
        return shm_fail(err, errlen, name, "mmap", saved_errno);
    *map_p = p;
    return WST_OK;
}
