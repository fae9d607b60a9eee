/*
 * The log hook (log.h): level filter, records from a real trigger (an
 * actor that fails and restarts), and the default stderr line, captured
 * in a child process and parsed back field by field.
 */
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>

#include "rtest.h"
#include "troupe/log.h"

/* ---- a collecting logger --------------------------------------------- */

#define MAX_RECS 32

typedef struct rec_copy {
    troupe_log_level level;
    char sys[32];
    char msg[512];
    size_t msg_len;
    size_t nfields;
    char keys[4][32];
    char vals[4][128];
    int64_t time_ns;
} rec_copy;

typedef struct collector {
    pthread_mutex_t mu;
    rec_copy recs[MAX_RECS];
    atomic_int n;
} collector;

static void
collect(void *ctx, const troupe_log_record *r)
{
    collector *c = ctx;
    pthread_mutex_lock(&c->mu);
    int i = atomic_load(&c->n);
    if (i < MAX_RECS) {
        rec_copy *k = &c->recs[i];
        k->level = r->level;
        snprintf(k->sys, sizeof(k->sys), "%s", r->sys);
        snprintf(k->msg, sizeof(k->msg), "%s", r->msg);
        k->msg_len = r->msg_len;
        k->nfields = r->nfields;
        for (size_t f = 0; f < r->nfields && f < 4; f++) {
            snprintf(k->keys[f], sizeof(k->keys[f]), "%s", r->fields[f].key);
            snprintf(k->vals[f], sizeof(k->vals[f]), "%s", r->fields[f].value);
        }
        k->time_ns = r->time_ns;
        atomic_store(&c->n, i + 1);
    }
    pthread_mutex_unlock(&c->mu);
}

static void
collector_init(collector *c)
{
    memset(c, 0, sizeof(*c));
    pthread_mutex_init(&c->mu, NULL);
}

static int64_t
now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

START_TEST(test_log_level_filter_passes_only_severe_enough)
{
    collector c;
    collector_init(&c);
    troupe_logger lg = {.fn = collect, .ctx = &c, .level = TROUPE_LOG_INFO};
    int64_t t0 = now_ns();
    troupe_log(&lg, TROUPE_LOG_DEBUG, "t", "debug %d", 1);
    troupe_log(&lg, TROUPE_LOG_INFO, "t", "info %d", 2);
    troupe_log(&lg, TROUPE_LOG_WARN, "t", "warn %d", 3);
    troupe_log(&lg, TROUPE_LOG_ERROR, NULL, "error %s", "four");
    ck_assert_int_eq(atomic_load(&c.n), 3);
    ck_assert_int_eq(c.recs[0].level, TROUPE_LOG_INFO);
    ck_assert_str_eq(c.recs[0].msg, "info 2");
    ck_assert_uint_eq(c.recs[0].msg_len, 6);
    ck_assert_str_eq(c.recs[0].sys, "t");
    ck_assert_int_eq(c.recs[1].level, TROUPE_LOG_WARN);
    ck_assert_int_eq(c.recs[2].level, TROUPE_LOG_ERROR);
    ck_assert_str_eq(c.recs[2].sys, "troupe"); /* NULL sys */
    ck_assert_str_eq(c.recs[2].msg, "error four");
    ck_assert_int_ge(c.recs[0].time_ns, t0 - 1000000);
    ck_assert_int_le(c.recs[0].time_ns, now_ns() + 1000000);

    /* Level 0 is the default threshold: WARN. */
    lg.level = TROUPE_LOG_DEFAULT;
    atomic_store(&c.n, 0);
    troupe_log(&lg, TROUPE_LOG_INFO, "t", "not this");
    troupe_log(&lg, TROUPE_LOG_WARN, "t", "this");
    ck_assert_int_eq(atomic_load(&c.n), 1);
    ck_assert_str_eq(c.recs[0].msg, "this");
    ck_assert(!troupe_log_enabled(&lg, TROUPE_LOG_INFO));
    ck_assert(troupe_log_enabled(&lg, TROUPE_LOG_ERROR));
    ck_assert(troupe_log_enabled(NULL, TROUPE_LOG_WARN));
    ck_assert(!troupe_log_enabled(NULL, TROUPE_LOG_DEBUG));

    /* Not levels: dropped, as is a NULL format. */
    lg.level = TROUPE_LOG_DEBUG;
    atomic_store(&c.n, 0);
    troupe_log(&lg, TROUPE_LOG_DEFAULT, "t", "level 0");
    troupe_log(&lg, (troupe_log_level)99, "t", "level 99");
    troupe_log(&lg, TROUPE_LOG_ERROR, "t", NULL);
    ck_assert_int_eq(atomic_load(&c.n), 0);
}
END_TEST

START_TEST(test_log_fields_and_long_messages_reach_fn)
{
    collector c;
    collector_init(&c);
    troupe_logger lg = {.fn = collect, .ctx = &c};
    troupe_log_field f[] = {{"a", "1"}, {NULL, "skipped by the writer"}};
    troupe_log_fields(&lg, TROUPE_LOG_WARN, "s", f, 2, "m");
    ck_assert_int_eq(atomic_load(&c.n), 1);
    ck_assert_uint_eq(c.recs[0].nfields, 2);
    ck_assert_str_eq(c.recs[0].keys[0], "a");
    ck_assert_str_eq(c.recs[0].vals[0], "1");
    /* A message longer than the stack buffer arrives whole. */
    char big[3000];
    memset(big, 'x', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    troupe_log(&lg, TROUPE_LOG_ERROR, "s", "<%s>", big);
    ck_assert_int_eq(atomic_load(&c.n), 2);
    ck_assert_uint_eq(c.recs[1].msg_len, sizeof(big) + 1);
}
END_TEST

/* ---- a real trigger: an actor that fails and is restarted ---------- */

enum { K_OK, K_FAIL, K_N };

typedef struct fstate {
    int unused;
} fstate;

static atomic_int handled;

static troupe_err
h_ok(troupe_actor *self, void *state, const troupe_msg *m)
{
    atomic_fetch_add(&handled, 1);
    return TROUPE_OK;
}

static troupe_err
h_fail(troupe_actor *self, void *state, const troupe_msg *m)
{
    return TROUPE_EIO;
}

static const troupe_handler_fn fail_handlers[K_N] = {
    [K_OK] = h_ok, [K_FAIL] = h_fail};
/* A name a log line must not let through raw: a newline and a quote. */
#define NASTY_NAME "flaky\nlevel=error msg=\"forged"

static const troupe_actor_def flaky_def = {
    .name = NASTY_NAME,
    .state_size = sizeof(fstate),
    .handlers = fail_handlers,
    .n_handlers = K_N,
};

static bool
handled_one(void *arg)
{
    return atomic_load(&handled) >= 1;
}

START_TEST(test_log_actor_restart_goes_to_runtime_logger)
{
    collector c;
    collector_init(&c);
    atomic_store(&handled, 0);
    rt_fixture f;
    memset(&f, 0, sizeof(f));
    ck_assert_int_eq(uv_loop_init(&f.loop), 0);
    troupe_runtime_opts o = {.loop = &f.loop,
                             .schedulers = 1,
                             .workers = 1,
                             .logger = {.fn = collect, .ctx = &c}};
    ck_assert_ok(troupe_runtime_create(&f.rt, &o));
    const troupe_logger *lg = troupe_runtime_logger(f.rt);
    ck_assert_ptr_eq(lg->fn, collect);
    ck_assert_ptr_eq(lg->ctx, &c);

    troupe_spawn_opts so = TROUPE_SPAWN_OPTS_INIT;
    so.policy = TROUPE_SUPERVISE_RESTART;
    so.scheduler = 0;
    troupe_addr a;
    ck_assert_ok(troupe_actor_spawn(f.rt, &flaky_def, &so, &a));
    troupe_msg *m = mk(K_FAIL);
    ck_assert_ok(troupe_runtime_send(f.rt, a, &m));
    m = mk(K_OK); /* handled by the restarted incarnation */
    ck_assert_ok(troupe_runtime_send(f.rt, a, &m));
    ck_assert(ts_run_until(&f.loop, handled_one, NULL, 10000));

    ck_assert_int_eq(atomic_load(&c.n), 1);
    rec_copy *r = &c.recs[0];
    ck_assert_int_eq(r->level, TROUPE_LOG_WARN);
    ck_assert_str_eq(r->sys, "runtime");
    ck_assert_ptr_nonnull(strstr(r->msg, NASTY_NAME));
    ck_assert_ptr_nonnull(strstr(r->msg, "restarting"));
    ck_assert_uint_eq(r->nfields, 2);
    ck_assert_str_eq(r->keys[0], "actor");
    ck_assert_str_eq(r->vals[0], NASTY_NAME);
    ck_assert_str_eq(r->keys[1], "err");
    ck_assert_str_eq(r->vals[1], "EIO");
    rtf_stop(&f);
}
END_TEST

START_TEST(test_log_runtime_refuses_bad_level_and_null_gives_default)
{
    troupe_runtime *rt = NULL;
    troupe_runtime_opts o = {.schedulers = 1,
                             .logger = {.level = (troupe_log_level)5}};
    ck_assert_err(troupe_runtime_create(&rt, &o), TROUPE_EINVAL);
    ck_assert_ptr_null(rt);
    o.logger.level = (troupe_log_level)-1;
    ck_assert_err(troupe_runtime_create(&rt, &o), TROUPE_EINVAL);
    const troupe_logger *d = troupe_runtime_logger(NULL);
    ck_assert_ptr_nonnull(d);
    ck_assert_ptr_null(d->fn);
    ck_assert_int_eq(d->level, TROUPE_LOG_DEFAULT);
    ck_assert_str_eq(troupe_log_level_name(TROUPE_LOG_DEBUG), "debug");
    ck_assert_str_eq(troupe_log_level_name((troupe_log_level)42), "?");
    char small[16];
    troupe_log_record rec = {.level = TROUPE_LOG_WARN, .msg = "m"};
    ck_assert_uint_eq(troupe_log_format(&rec, small, sizeof(small)), 0);
    ck_assert_uint_eq(troupe_log_format(&rec, NULL, 100), 0);
}
END_TEST

/* ---- the default line ------------------------------------------------ */

/* Runs fn in a child whose stderr is a file; returns the file's bytes
 * (malloc'ed, NUL-terminated). */
static char *
stderr_of(void (*fn)(void), size_t *len)
{
    char path[] = "/tmp/troupe-log-XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    unlink(path);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        dup2(fd, STDERR_FILENO);
        fn();
        _exit(0);
    }
    int status = 0;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    off_t n = lseek(fd, 0, SEEK_END);
    ck_assert_int_ge(n, 0);
    char *buf = malloc((size_t)n + 1);
    ck_assert_ptr_nonnull(buf);
    ck_assert_int_eq(pread(fd, buf, (size_t)n, 0), n);
    buf[n] = '\0';
    close(fd);
    *len = (size_t)n;
    return buf;
}

/* A parsed line: up to 16 key=value pairs, unescaped. */
typedef struct parsed {
    int n;
    char key[16][32];
    char val[16][640];
} parsed;

static int
hexval(char c)
{
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
                                  : -1;
}

/* Parses one line (without its newline) the way a log reader would:
 * key=value separated by single spaces; a value is bare (no space,
 * quote, '=' or backslash) or quoted with \" \\ \n \r \t \xHH escapes.
 * false on anything else. */
static bool
parse_line(const char *s, size_t len, parsed *p)
{
    memset(p, 0, sizeof(*p));
    size_t i = 0;
    while (i < len) {
        if (p->n == 16)
            return false;
        if (p->n > 0) {
            if (s[i] != ' ')
                return false;
            i++;
        }
        size_t k = 0;
        while (i < len && s[i] != '=') {
            if (s[i] == ' ' || s[i] == '"' || k + 1 >= 32)
                return false;
            p->key[p->n][k++] = s[i++];
        }
        if (i == len || k == 0)
            return false;
        i++; /* '=' */
        char *v = p->val[p->n];
        size_t vn = 0;
        if (i < len && s[i] == '"') {
            i++;
            for (;;) {
                if (i >= len || vn + 1 >= 640)
                    return false;
                char c = s[i++];
                if (c == '"')
                    break;
                if ((unsigned char)c < 0x20)
                    return false; /* raw control byte inside quotes */
                if (c == '\\') {
                    if (i >= len)
                        return false;
                    char e = s[i++];
                    if (e == 'n')
                        c = '\n';
                    else if (e == 'r')
                        c = '\r';
                    else if (e == 't')
                        c = '\t';
                    else if (e == '"' || e == '\\')
                        c = e;
                    else if (e == 'x' && i + 1 < len && hexval(s[i]) >= 0 &&
                             hexval(s[i + 1]) >= 0) {
                        c = (char)(hexval(s[i]) * 16 + hexval(s[i + 1]));
                        i += 2;
                    } else
                        return false;
                }
                v[vn++] = c;
            }
        } else {
            while (i < len && s[i] != ' ') {
                char c = s[i++];
                if (c == '"' || c == '=' || c == '\\' ||
                    (unsigned char)c < 0x20 || vn + 1 >= 640)
                    return false;
                v[vn++] = c;
            }
        }
        v[vn] = '\0';
        p->n++;
    }
    return p->n > 0;
}

static const char *
get(const parsed *p, const char *key)
{
    const char *found = NULL;
    for (int i = 0; i < p->n; i++) {
        if (strcmp(p->key[i], key) == 0) {
            if (found != NULL)
                return "<twice>";
            found = p->val[i];
        }
    }
    return found;
}

#define HOSTILE_MSG                                                            \
    "a \"quoted\" name\nlevel=error msg=\"forged\" \\ \x01 tab\t"
#define HOSTILE_VAL "x\" sys=evil \"y"

static void
child_hostile(void)
{
    troupe_log_field f[] = {{"dir", "/data/plain"},
                            {"name", HOSTILE_VAL},
                            {"empty", ""},
                            {"bad key=", "v"}};
    troupe_log_fields(NULL, TROUPE_LOG_WARN, "storage", f, 4, "%s",
                      HOSTILE_MSG);
    troupe_log(NULL, TROUPE_LOG_INFO, "storage", "below the default");
    troupe_log(NULL, TROUPE_LOG_ERROR, "runtime", "second %d", 2);
}

START_TEST(test_log_default_line_cannot_be_split_or_forged)
{
    size_t len = 0;
    int64_t t0 = now_ns() / 1000000000;
    char *out = stderr_of(child_hostile, &len);
    /* Two records passed the default WARN: exactly two lines. */
    ck_assert_uint_gt(len, 0);
    ck_assert_int_eq(out[len - 1], '\n');
    char *nl = memchr(out, '\n', len);
    ck_assert_ptr_nonnull(nl);
    size_t l1 = (size_t)(nl - out);
    char *second = nl + 1;
    size_t l2 = len - l1 - 2;
    ck_assert_ptr_eq(memchr(second, '\n', l2), NULL);

    parsed p;
    ck_assert_msg(parse_line(out, l1, &p), "unparsable: %.*s", (int)l1, out);
    ck_assert_int_eq(p.n, 8);
    ck_assert_str_eq(p.key[0], "ts");
    ck_assert_str_eq(p.key[1], "level");
    ck_assert_str_eq(get(&p, "level"), "warn");
    ck_assert_str_eq(get(&p, "sys"), "storage");
    ck_assert_str_eq(get(&p, "msg"), HOSTILE_MSG);
    ck_assert_str_eq(get(&p, "dir"), "/data/plain");
    ck_assert_str_eq(get(&p, "name"), HOSTILE_VAL);
    ck_assert_str_eq(get(&p, "empty"), "");
    ck_assert_str_eq(get(&p, "bad_key_"), "v");
    /* ts: ISO 8601 UTC with milliseconds, and now. */
    const char *ts = get(&p, "ts");
    struct tm tm;
    memset(&tm, 0, sizeof(tm));
    int msec = -1;
    char z = 0;
    ck_assert_int_eq(sscanf(ts, "%4d-%2d-%2dT%2d:%2d:%2d.%3d%c", &tm.tm_year,
                            &tm.tm_mon, &tm.tm_mday, &tm.tm_hour, &tm.tm_min,
                            &tm.tm_sec, &msec, &z),
                     8);
    ck_assert_uint_eq(strlen(ts), 24);
    ck_assert_int_eq(z, 'Z');
    ck_assert(msec >= 0 && msec <= 999);
    tm.tm_year -= 1900;
    tm.tm_mon -= 1;
    int64_t t = (int64_t)timegm(&tm);
    ck_assert_int_ge(t, t0 - 1);
    ck_assert_int_le(t, now_ns() / 1000000000 + 1);

    ck_assert(parse_line(second, l2, &p));
    ck_assert_int_eq(p.n, 4);
    ck_assert_str_eq(get(&p, "level"), "error");
    ck_assert_str_eq(get(&p, "sys"), "runtime");
    ck_assert_str_eq(get(&p, "msg"), "second 2");
    free(out);
}
END_TEST

static void
child_long(void)
{
    static char big[3 * TROUPE_LOG_LINE_MAX];
    for (size_t i = 0; i + 1 < sizeof(big); i++)
        big[i] = i % 100 == 99 ? '\n' : 'a' + (char)(i % 26);
    troupe_log(NULL, TROUPE_LOG_ERROR, "t", "%s", big);
}

START_TEST(test_log_default_long_line_is_cut_on_one_line)
{
    size_t len = 0;
    char *out = stderr_of(child_long, &len);
    ck_assert_uint_le(len, TROUPE_LOG_LINE_MAX);
    ck_assert_uint_gt(len, TROUPE_LOG_LINE_MAX / 2);
    ck_assert_ptr_eq(memchr(out, '\n', len), out + len - 1);
    ck_assert_int_eq(memcmp(out + len - 4, "...\n", 4), 0);
    free(out);
}
END_TEST

#define THREADS 4
#define PER_THREAD 300

static void *
spam(void *arg)
{
    char pad[300];
    memset(pad, 'p', sizeof(pad) - 1);
    pad[sizeof(pad) - 1] = '\0';
    for (int i = 0; i < PER_THREAD; i++)
        troupe_log_fields(NULL, TROUPE_LOG_WARN, "t",
                          (troupe_log_field[]){{"pad", pad}}, 1, "thread %d %d",
                          (int)(intptr_t)arg, i);
    return NULL;
}

static void
child_threads(void)
{
    pthread_t th[THREADS];
    for (intptr_t i = 0; i < THREADS; i++)
        pthread_create(&th[i], NULL, spam, (void *)i);
    for (int i = 0; i < THREADS; i++)
        pthread_join(th[i], NULL);
}

START_TEST(test_log_default_lines_from_threads_never_interleave)
{
    size_t len = 0;
    char *out = stderr_of(child_threads, &len);
    int seen[THREADS] = {0};
    int lines = 0;
    char *s = out;
    while (s < out + len) {
        char *nl = memchr(s, '\n', (size_t)(out + len - s));
        ck_assert_ptr_nonnull(nl);
        parsed p;
        ck_assert_msg(parse_line(s, (size_t)(nl - s), &p), "line %d torn: %.*s",
                      lines, (int)(nl - s), s);
        int th = -1, i = -1;
        ck_assert_int_eq(sscanf(get(&p, "msg"), "thread %d %d", &th, &i), 2);
        ck_assert(th >= 0 && th < THREADS);
        ck_assert_int_eq(i, seen[th]); /* each thread's lines in order */
        seen[th]++;
        ck_assert_uint_eq(strlen(get(&p, "pad")), 299);
        lines++;
        s = nl + 1;
    }
    ck_assert_int_eq(lines, THREADS * PER_THREAD);
    free(out);
}
END_TEST

Suite *
log_suite(void)
{
    Suite *s = suite_create("log");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_log_level_filter_passes_only_severe_enough);
    tcase_add_test(tc, test_log_fields_and_long_messages_reach_fn);
    tcase_add_test(tc, test_log_actor_restart_goes_to_runtime_logger);
    tcase_add_test(tc,
                   test_log_runtime_refuses_bad_level_and_null_gives_default);
    tcase_add_test(tc, test_log_default_line_cannot_be_split_or_forged);
    tcase_add_test(tc, test_log_default_long_line_is_cut_on_one_line);
    tcase_add_test(tc, test_log_default_lines_from_threads_never_interleave);
    suite_add_tcase(s, tc);
    return s;
}
