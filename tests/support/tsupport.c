#include "tsupport.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

uint64_t
ts_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

char *
ts_tempdir(const char *tag)
{
    const char *base = getenv("TMPDIR");
    char *path = malloc(4096);
    ck_assert_ptr_nonnull(path);
    snprintf(path, 4096, "%s/troupe-%s-XXXXXX", base ? base : "/tmp", tag);
    ck_assert_msg(mkdtemp(path) != NULL, "mkdtemp: %s", strerror(errno));
    return path;
}

static int
rm_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(p);
}

void
ts_rmtree(const char *path)
{
    if (path != NULL)
        nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static uint64_t
file_hash(const char *path)
{
    uint64_t h = 1469598103934665603ull;
    int fd = open(path, O_RDONLY);
    ck_assert_int_ge(fd, 0);
    unsigned char buf[8192];
    ssize_t n;
    while ((n = read(fd, buf, sizeof(buf))) > 0) {
        for (ssize_t i = 0; i < n; i++)
            h = (h ^ buf[i]) * 1099511628211ull;
    }
    close(fd);
    return h;
}

static int
cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

void
ts_list_dir(const char *dir, ts_listing *l)
{
    char *names[256];
    int n = 0;
    DIR *d = opendir(dir);
    ck_assert_ptr_nonnull(d);
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        ck_assert_int_lt(n, 256);
        names[n++] = strdup(e->d_name);
    }
    closedir(d);
    qsort(names, (size_t)n, sizeof(names[0]), cmp_str);
    size_t off = 0;
    l->text[0] = '\0';
    for (int i = 0; i < n; i++) {
        char path[1024];
        snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
        struct stat st;
        ck_assert_int_eq(stat(path, &st), 0);
        ck_assert(S_ISREG(st.st_mode)); /* a db directory holds files */
        off += (size_t)snprintf(
            l->text + off, sizeof(l->text) - off, "%s %lld %lld.%09ld %llx\n",
            names[i], (long long)st.st_size, (long long)st.st_mtim.tv_sec,
            st.st_mtim.tv_nsec, (unsigned long long)file_hash(path));
        ck_assert_uint_lt(off, sizeof(l->text));
        free(names[i]);
    }
    l->files = n;
}

bool
ts_run_until(uv_loop_t *loop, bool (*pred)(void *), void *arg,
             uint64_t timeout_ms)
{
    uint64_t end = ts_now_ms() + timeout_ms;
    while (!pred(arg)) {
        if (ts_now_ms() > end)
            return pred(arg);
        /* NOWAIT keeps the deadline honest when nothing is pending; yield
         * so other threads (schedulers, workers) get the core. */
        if (uv_run(loop, UV_RUN_NOWAIT) == 0)
            sched_yield();
    }
    return true;
}

bool
ts_wait_until(bool (*pred)(void *), void *arg, uint64_t timeout_ms)
{
    uint64_t end = ts_now_ms() + timeout_ms;
    while (!pred(arg)) {
        if (ts_now_ms() > end)
            return pred(arg);
        struct timespec ts = {0, 200000};
        nanosleep(&ts, NULL);
    }
    return true;
}

uint64_t
ts_seed(const char *suite)
{
    const char *s = getenv("TROUPE_SEED");
    uint64_t seed =
        s ? strtoull(s, NULL, 0) : (uint64_t)time(NULL) ^ (uint64_t)getpid();
    if (seed == 0)
        seed = 0x9E3779B97F4A7C15ull;
    fprintf(stderr, "%s: seed %llu (set TROUPE_SEED to replay)\n", suite,
            (unsigned long long)seed);
    return seed;
}

uint64_t
ts_rand(uint64_t *state)
{
    uint64_t x = *state;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *state = x;
    return x * 0x2545F4914F6CDD1Dull;
}

static void
close_walk(uv_handle_t *h, void *arg)
{
    (void)arg;
    if (!uv_is_closing(h))
        uv_close(h, NULL);
}

int
ts_loop_close(uv_loop_t *loop)
{
    uv_walk(loop, close_walk, NULL);
    uv_run(loop, UV_RUN_DEFAULT);
    return uv_loop_close(loop);
}

int
ts_run_suites(Suite **suites, int n)
{
    SRunner *sr = srunner_create(suites[0]);
    for (int i = 1; i < n; i++)
        srunner_add_suite(sr, suites[i]);
    if (getenv("CK_FORK") == NULL) /* CK_FORK=no for gdb */
        srunner_set_fork_status(sr, CK_FORK);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? 0 : 1;
}
