/* test_atomic_file.c - whole-file writes by temporary file and rename
 * (common/atomic_file.h): each case runs for wst_atomic_write and for
 * wst_atomic_replace, which differ only in the fsyncs a test here cannot
 * see (they matter after a crash). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "atomic_file.h"

typedef wst_status_t (*writer_fn)(const char *path, const void *data,
                                  size_t len, mode_t mode, char *err,
                                  size_t errlen);

struct dir_fixture {
    char dir[256];
    char path[300];
    writer_fn write;
};

static int setup_with(void **state, writer_fn write)
{
    struct dir_fixture *f = calloc(1, sizeof(*f));
    const char *base = getenv("TMPDIR");

    if (f == NULL)
        return -1;
    snprintf(f->dir, sizeof(f->dir), "%s/test_atomic_file.XXXXXX",
             base != NULL ? base : "/tmp");
    if (mkdtemp(f->dir) == NULL) {
        free(f);
        return -1;
    }
    snprintf(f->path, sizeof(f->path), "%s/state.json", f->dir);
    f->write = write;
    *state = f;
    return 0;
}

static int setup(void **state)
{
    return setup_with(state, wst_atomic_write);
}

static int setup_replace(void **state)
{
    return setup_with(state, wst_atomic_replace);
}

static int teardown(void **state)
{
    struct dir_fixture *f = *state;
    struct dirent *e;
    DIR *d = opendir(f->dir);
    char p[600];

    chmod(f->dir, 0700);
    while (d != NULL && (e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        snprintf(p, sizeof(p), "%s/%s", f->dir, e->d_name);
        unlink(p);
    }
    if (d != NULL)
        closedir(d);
    rmdir(f->dir);
    free(f);
    return 0;
}

static void read_back(const char *path, char *buf, size_t len)
{
    FILE *fp = fopen(path, "r");
    size_t n;

    assert_non_null(fp);
    n = fread(buf, 1, len - 1, fp);
    buf[n] = '\0';
    fclose(fp);
}

/* Files in the directory besides the target: temporaries left behind. */
static int count_others(const struct dir_fixture *f)
{
    struct dirent *e;
    DIR *d = opendir(f->dir);
    int n = 0;

    assert_non_null(d);
    while ((e = readdir(d)) != NULL)
        if (e->d_name[0] != '.' && strcmp(e->d_name, "state.json") != 0)
            n++;
    closedir(d);
    return n;
}

static void test_atomic_file_content(void **state)
{
    struct dir_fixture *f = *state;
    char buf[64], err[256] = "";

    assert_int_equal(f->write(f->path, "first\n", 6, 0644, err, sizeof(err)),
                     WST_OK);
    read_back(f->path, buf, sizeof(buf));
    assert_string_equal(buf, "first\n");
    /* replacing a longer file with a shorter one leaves nothing of it */
    assert_int_equal(f->write(f->path, "2", 1, 0644, err, sizeof(err)), WST_OK);
    read_back(f->path, buf, sizeof(buf));
    assert_string_equal(buf, "2");
    assert_int_equal(f->write(f->path, NULL, 0, 0644, err, sizeof(err)),
                     WST_OK);
    read_back(f->path, buf, sizeof(buf));
    assert_string_equal(buf, "");
    assert_int_equal(count_others(f), 0);
}

static void test_atomic_file_mode(void **state)
{
    struct dir_fixture *f = *state;
    struct stat st;

    assert_int_equal(f->write(f->path, "x", 1, 0600, NULL, 0), WST_OK);
    assert_int_equal(stat(f->path, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0600);
    assert_int_equal(f->write(f->path, "x", 1, 0640, NULL, 0), WST_OK);
    assert_int_equal(stat(f->path, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0640);
    /* the umask applies, as for open(2) */
    assert_int_equal(f->write(f->path, "x", 1, 0666, NULL, 0), WST_OK);
    assert_int_equal(stat(f->path, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0644);
}

/* A write that cannot happen leaves the old file whole and says why. */
static void test_atomic_file_failure_keeps_old(void **state)
{
    struct dir_fixture *f = *state;
    char buf[64], err[256] = "", missing[400];

    assert_int_equal(f->write(f->path, "old", 3, 0644, NULL, 0), WST_OK);
    /* a directory where the target should be: the rename fails */
    snprintf(missing, sizeof(missing), "%s/sub", f->dir);
    assert_int_equal(mkdir(missing, 0700), 0);
    assert_int_equal(f->write(missing, "new", 3, 0644, err, sizeof(err)),
                     WST_ERR_IO);
    assert_non_null(strstr(err, "rename"));
    assert_non_null(strstr(err, missing));
    rmdir(missing);
    assert_int_equal(count_others(f), 0);

    /* a directory that does not exist: the temporary file cannot be made */
    snprintf(missing, sizeof(missing), "%s/no/such/file", f->dir);
    err[0] = '\0';
    assert_int_equal(f->write(missing, "new", 3, 0644, err, sizeof(err)),
                     WST_ERR_IO);
    assert_non_null(strstr(err, "create"));
    assert_non_null(strstr(err, "No such file"));

    /* a read-only directory (unless root, who may write anyway) */
    if (geteuid() != 0) {
        assert_int_equal(chmod(f->dir, 0500), 0);
        assert_int_equal(f->write(f->path, "new", 3, 0644, err, sizeof(err)),
                         WST_ERR_IO);
        assert_int_equal(chmod(f->dir, 0700), 0);
    }
    read_back(f->path, buf, sizeof(buf));
    assert_string_equal(buf, "old");
    assert_int_equal(count_others(f), 0);
}

static void test_atomic_file_invalid(void **state)
{
    static const writer_fn writers[] = {wst_atomic_write, wst_atomic_replace};

    (void)state;
    for (size_t i = 0; i < 2; i++) {
        char err[128] = "";
        assert_int_equal(writers[i](NULL, "x", 1, 0644, err, sizeof(err)),
                         WST_ERR_INVALID);
        assert_true(err[0] != '\0');
        assert_int_equal(writers[i]("", "x", 1, 0644, NULL, 0),
                         WST_ERR_INVALID);
        assert_int_equal(writers[i]("/tmp/x", NULL, 1, 0644, NULL, 0),
                         WST_ERR_INVALID);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_atomic_file_content, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_atomic_file_mode, setup, teardown),
        cmocka_unit_test_setup_teardown(test_atomic_file_failure_keeps_old,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_atomic_file_content, setup_replace,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_atomic_file_mode, setup_replace,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_atomic_file_failure_keeps_old,
                                        setup_replace, teardown),
        cmocka_unit_test(test_atomic_file_invalid),
    };

    umask(022); /* the modes above are checked under this umask */
    return cmocka_run_group_tests(tests, NULL, NULL);
}
