/*
 * The admin endpoint (tools/admin*.c) served in-process over a real
 * database, tables, queues and a kv actor, and spoken to over loopback
 * TCP with a raw HTTP/1.1 client, so that malformed requests can be sent
 * as they are. A scrape of /metrics under load (a writer thread upserting
 * rows, a publisher and a queue worker) must pass `promtool check
 * metrics`; every route is tried with bad input (unknown names, malformed
 * JSON, wrong method, missing or wrong token, a body over the cap).
 */
#include <arpa/inet.h>
#include <jansson.h>
#include <math.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "admin.h"
#include "admin_route.h"
#include "troupe/catalog.h"
#include "troupe/kv.h"
#include "troupe/pack.h"
#include "tsupport.h"

#define TOKEN "0123456789abcdef-token"

static char *dir;
static troupe_db *db;
static troupe_commit *commit;
static troupe_runtime *rt;
static troupe_catalog *cat;
static troupe_tables *tables;
static troupe_queues *queues;
static troupe_addr kv;
static admin *ep;
static int port;

static void
open_all(void)
{
    dir = ts_tempdir("admin");
    ck_assert_ok(troupe_db_open(dir, NULL, &db));
    ck_assert_ok(troupe_commit_create(db, NULL, &commit));
    troupe_runtime_opts ro = {.schedulers = 2, .workers = 2};
    ck_assert_ok(troupe_runtime_create(&rt, &ro));
    troupe_catalog_opts co = {.rt = rt, .db = db};
    ck_assert_ok(troupe_catalog_open(&co, &cat));
    troupe_tables_opts to = {.catalog = cat, .commit = commit};
    ck_assert_ok(troupe_tables_open(&to, &tables));
    troupe_queues_opts qo = {.catalog = cat, .commit = commit};
    ck_assert_ok(troupe_queues_open(&qo, &queues));
    troupe_index_field f = {.path = "age", .type = TROUPE_FIELD_INT};
    troupe_index_spec ix = {.name = "by_age", .fields = &f, .n_fields = 1};
    ck_assert_ok(troupe_tables_create_wait(tables, "users", &ix, 1));
    troupe_queue_spec qs = {.name = "jobs", .partitions = 2};
    ck_assert_ok(troupe_queues_create_wait(queues, &qs));
    troupe_kv_opts ko = {.db = db, .commit = commit, .cf = "kv"};
    ck_assert_ok(troupe_kv_spawn(rt, &ko, NULL, &kv));
}

static admin_ctx
ctx_all(void)
{
    return (admin_ctx){.rt = rt,
                       .db = db,
                       .commit = commit,
                       .tables = tables,
                       .queues = queues,
                       .kv = kv};
}

static void
setup(void)
{
    signal(SIGPIPE, SIG_IGN);
    open_all();
    admin_ctx c = ctx_all();
    ck_assert_ok(admin_create(&c, "127.0.0.1:0", NULL, 0, &ep));
    port = admin_port(ep);
    ck_assert_int_gt(port, 0);
}

static void
teardown(void)
{
    admin_destroy(ep);
    ep = NULL;
    ck_assert_ok(troupe_queues_stop_wait(queues));
    troupe_queues_destroy(queues);
    ck_assert_ok(troupe_tables_stop_wait(tables));
    troupe_tables_destroy(tables);
    ck_assert_ok(troupe_catalog_stop_wait(cat));
    troupe_catalog_destroy(cat);
    ck_assert_ok(troupe_runtime_shutdown_wait(rt));
    troupe_runtime_destroy(rt);
    troupe_commit_destroy(commit);
    ck_assert_ok(troupe_db_close(db));
    ts_rmtree(dir);
    free(dir);
}

/* ---- a raw HTTP/1.1 client ---- */

typedef struct resp {
    int status;
    char *raw; /* headers and body, NUL-terminated */
    const char *body;
    json_t *json; /* the body parsed, when it is JSON */
} resp;

static void
resp_free(resp *r)
{
    json_decref(r->json);
    free(r->raw);
    memset(r, 0, sizeof(*r));
}

/* Sends `req` as it is and reads the answer until the server closes or
 * the body of its Content-Length is in; NUL-terminated, malloc'd. */
static char *
raw_bytes(const void *req, size_t len)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    ck_assert_int_ge(fd, 0);
    struct timeval tv = {.tv_sec = 20};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    struct sockaddr_in sa = {.sin_family = AF_INET,
                             .sin_port = htons((uint16_t)port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ck_assert_int_eq(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    for (size_t off = 0; off < len;) {
        ssize_t n = write(fd, (const char *)req + off, len - off);
        if (n <= 0)
            break; /* the server may close on a refused body */
        off += (size_t)n;
    }
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    for (;;) {
        if (cap - n < 4096)
            buf = realloc(buf, cap *= 2);
        ssize_t k = read(fd, buf + n, cap - n - 1);
        if (k <= 0)
            break;
        n += (size_t)k;
        /* done once the body of Content-Length is in: the server keeps
         * some connections open (its own refusals) */
        buf[n] = '\0';
        char *end = strstr(buf, "\r\n\r\n");
        char *cl = strcasestr(buf, "\r\nContent-Length: ");
        if (end != NULL && cl != NULL && cl < end &&
            n >= (size_t)(end + 4 - buf) + strtoul(cl + 18, NULL, 10))
            break;
    }
    close(fd);
    buf[n] = '\0';
    return buf;
}

static resp
raw_request(const void *req, size_t len)
{
    char *buf = raw_bytes(req, len);
    resp r = {.raw = buf};
    ck_assert_msg(sscanf(buf, "HTTP/1.1 %d", &r.status) == 1,
                  "no status line in '%.200s'", buf);
    char *b = strstr(buf, "\r\n\r\n");
    r.body = b ? b + 4 : "";
    r.json = json_loads(r.body, JSON_DECODE_ANY, NULL);
    return r;
}

static resp
request(const char *method, const char *path, const char *headers,
        const char *body)
{
    size_t bl = body ? strlen(body) : 0;
    char *req = NULL;
    int n =
        asprintf(&req,
                 "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: "
                 "close\r\n%sContent-Length: %zu\r\n\r\n%s",
                 method, path, headers ? headers : "", bl, body ? body : "");
    ck_assert_int_gt(n, 0);
    resp r = raw_request(req, (size_t)n);
    free(req);
    return r;
}

static resp
get(const char *path)
{
    return request("GET", path, NULL, NULL);
}

/* The error body's code, asserting the error shape. */
static const char *
err_code(const resp *r)
{
    json_t *e = json_object_get(r->json, "error");
    ck_assert_msg(json_is_object(e), "no error object in '%.300s'", r->body);
    ck_assert_int_eq(json_integer_value(json_object_get(e, "status")),
                     r->status);
    ck_assert(json_is_string(json_object_get(e, "message")));
    return json_string_value(json_object_get(e, "code"));
}

static void
expect_error(const char *method, const char *path, const char *body, int status,
             const char *code)
{
    resp r = request(method, path, NULL, body);
    ck_assert_msg(r.status == status, "%s %s: got %d, want %d: %s", method,
                  path, r.status, status, r.body);
    ck_assert_str_eq(err_code(&r), code);
    resp_free(&r);
}

/* A 404 of a library call: the kind of missing name in troupe_error, and
 * the call's detail naming it in the message. */
static void
expect_missing(const char *path, const char *terr, const char *detail)
{
    resp r = request("GET", path, NULL, NULL);
    ck_assert_msg(r.status == 404, "GET %s: got %d: %s", path, r.status,
                  r.body);
    ck_assert_str_eq(err_code(&r), "not_found");
    json_t *e = json_object_get(r.json, "error");
    ck_assert_str_eq(json_string_value(json_object_get(e, "troupe_error")),
                     terr);
    ck_assert_msg(
        strstr(json_string_value(json_object_get(e, "message")), detail),
        "GET %s: no '%s' in %s", path, detail, r.body);
    resp_free(&r);
}

static int64_t
jint(json_t *o, const char *path)
{
    char *p = strdup(path), *save = NULL;
    json_t *v = o;
    for (char *k = strtok_r(p, ".", &save); k; k = strtok_r(NULL, ".", &save))
        v = json_object_get(v, k);
    ck_assert_msg(json_is_integer(v), "%s is not an integer", path);
    free(p);
    return json_integer_value(v);
}

/* ---- load: a writer, a publisher and a queue worker ---- */

typedef struct load {
    atomic_bool stop;
    atomic_uint_fast64_t rows, published, handled;
    pthread_t writer, publisher;
    troupe_queue_worker *worker;
} load;

static size_t
doc(uint8_t *out, size_t cap, uint64_t i)
{
    troupe_packer p;
    troupe_pack_init(&p);
    troupe_pack_map(&p, 2);
    troupe_pack_cstr(&p, "name");
    char name[32];
    snprintf(name, sizeof(name), "user %llu", (unsigned long long)i);
    troupe_pack_cstr(&p, name);
    troupe_pack_cstr(&p, "age");
    troupe_pack_uint(&p, i % 90);
    size_t n = 0;
    const void *d = troupe_pack_data(&p, &n);
    ck_assert(d != NULL && n <= cap);
    memcpy(out, d, n);
    troupe_pack_fini(&p);
    return n;
}

static void *
writer_main(void *arg)
{
    load *l = arg;
    for (uint64_t i = 0; !atomic_load(&l->stop); i++) {
        uint8_t d[64];
        size_t n = doc(d, sizeof(d), i);
        char key[32];
        int kl = snprintf(key, sizeof(key), "u%04llu",
                          (unsigned long long)(i % 500));
        if (troupe_table_upsert_wait(tables, "users", key, (size_t)kl, d, n,
                                     NULL) == TROUPE_OK)
            atomic_fetch_add(&l->rows, 1);
    }
    return NULL;
}

static const unsigned char payload[] = {0x81, 0xa3, 'q', 't', 'y', 0x02};

static void *
publisher_main(void *arg)
{
    load *l = arg;
    for (uint64_t i = 0; !atomic_load(&l->stop); i++) {
        char id[32];
        int n = snprintf(id, sizeof(id), "job-%llu", (unsigned long long)i);
        troupe_queue_event ev = {.id = id,
                                 .id_len = (size_t)n,
                                 .key = id,
                                 .key_len = (size_t)n,
                                 .payload = payload,
                                 .payload_len = sizeof(payload),
                                 .time_ms = troupe_now_ms()};
        if (troupe_queue_publish_wait(queues, "jobs", &ev, TROUPE_SYNC_OFF) ==
            TROUPE_OK)
            atomic_fetch_add(&l->published, 1);
    }
    return NULL;
}

static troupe_err
ack_handler(const troupe_queue_delivery *d, troupe_queue_outcome *out,
            void *arg)
{
    load *l = arg;
    atomic_fetch_add(&l->handled, 1);
    out->kind = TROUPE_QUEUE_ACK;
    return TROUPE_OK;
}

static void
load_start(load *l)
{
    memset(l, 0, sizeof(*l));
    troupe_queue_worker_opts wo = {.queue = "jobs",
                                   .first = 0,
                                   .last = 1,
                                   .credit = 16,
                                   .handler = ack_handler,
                                   .arg = l};
    ck_assert_ok(troupe_queue_worker_create(queues, &wo, &l->worker));
    ck_assert_int_eq(pthread_create(&l->writer, NULL, writer_main, l), 0);
    ck_assert_int_eq(pthread_create(&l->publisher, NULL, publisher_main, l), 0);
}

static void
load_stop(load *l)
{
    atomic_store(&l->stop, true);
    pthread_join(l->writer, NULL);
    pthread_join(l->publisher, NULL);
    ck_assert_ok(troupe_queue_worker_stop_wait(l->worker));
    troupe_queue_worker_destroy(l->worker);
}

/* The value of the sample `line` starts (name and labels), -1 if none. */
static double
metric(const char *text, const char *line)
{
    size_t n = strlen(line);
    for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : p)
        if (strncmp(p, line, n) == 0 && p[n] == ' ')
            return strtod(p + n + 1, NULL);
    return -1;
}

/* promtool's verdict on a scrape: its exit status, its output printed. */
static int
promtool(const char *text, size_t len)
{
    const char *tmp = getenv("TMPDIR");
    char path[4096];
    snprintf(path, sizeof(path), "%s/admin-scrape-XXXXXX", tmp ? tmp : "/tmp");
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    FILE *f = fdopen(fd, "w");
    ck_assert(f != NULL);
    ck_assert_uint_eq(fwrite(text, 1, len, f), len);
    fclose(f);
    char cmd[8300];
    snprintf(cmd, sizeof(cmd), "promtool check metrics < '%s' 2>&1", path);
    int st = system(cmd);
    unlink(path);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

START_TEST(test_metrics_under_load_pass_promtool)
{
    load l;
    load_start(&l);
    /* Scrape until the figures show the load at work: rows committed,
     * jobs handled and completed (each scrape checked by promtool). */
    uint64_t t0 = ts_now_ms();
    int scrapes = 0;
    double batches = -1, completed = -1, prev_batches = -1;
    do {
        uint64_t rows_before = atomic_load(&l.rows);
        resp r = get("/metrics");
        ck_assert_int_eq(r.status, 200);
        ck_assert_ptr_nonnull(
            strstr(r.raw, "Content-Type: text/plain; version=0.0.4"));
        ck_assert_int_eq(promtool(r.body, strlen(r.body)), 0);
        batches = metric(r.body, "troupe_commit_batches_total");
        completed = metric(r.body, "troupe_queue_completed{queue=\"jobs\"}");
        /* a counter never goes back, and counts the rows already done */
        ck_assert(batches >= prev_batches);
        ck_assert(batches >= (double)rows_before);
        ck_assert(metric(r.body, "troupe_scheduler_actors{scheduler=\"0\"}") >=
                  0);
        ck_assert(metric(r.body, "troupe_db_family_keys{family=\"kv\"}") >= 0);
        ck_assert(metric(r.body, "troupe_queue_partitions{queue=\"jobs\"}") ==
                  2);
        ck_assert(metric(r.body,
                         "troupe_table_version_records{table=\"users\"}") >= 0);
        prev_batches = batches;
        scrapes++;
        resp_free(&r);
    } while (
        (batches < 100 || completed < 10 || atomic_load(&l.handled) < 10) &&
        ts_now_ms() - t0 < 30000);
    load_stop(&l);
    ck_assert_msg(batches >= 100 && completed >= 10,
                  "after %d scrapes: batches %.0f completed %.0f", scrapes,
                  batches, completed);
    /* and once more at rest: the handled jobs are all completed */
    resp r = get("/metrics");
    ck_assert_int_eq(promtool(r.body, strlen(r.body)), 0);
    ck_assert(metric(r.body, "troupe_queue_completed{queue=\"jobs\"}") +
                  metric(r.body, "troupe_queue_pending{queue=\"jobs\"}") ==
              (double)atomic_load(&l.published));
    /* the histograms agree with the counters at rest: one write per
     * group, and the groups' batches add up */
    double groups = metric(r.body, "troupe_commit_groups_total");
    ck_assert(groups > 0);
    ck_assert(metric(r.body, "troupe_commit_write_seconds_count") == groups);
    ck_assert(metric(r.body, "troupe_commit_group_batches_count") == groups);
    ck_assert(metric(r.body, "troupe_commit_group_batches_sum") ==
              metric(r.body, "troupe_commit_batches_total"));
    ck_assert(
        metric(r.body, "troupe_commit_write_seconds_bucket{le=\"+Inf\"}") ==
        groups);
    ck_assert(metric(r.body, "troupe_commit_write_seconds_sum") > 0);
    /* every handler call counted once, each an ack (the worker stopped:
     * its outcomes are committed), and at its attempt */
    double handled = (double)atomic_load(&l.handled);
    ck_assert(handled >= 10);
    ck_assert(metric(r.body, "troupe_queue_deliveries_total{queue=\"jobs\"}") ==
              handled);
    ck_assert(metric(r.body, "troupe_queue_outcomes_total{queue=\"jobs\","
                             "outcome=\"ack\"}") == handled);
    ck_assert(metric(r.body, "troupe_queue_outcomes_total{queue=\"jobs\","
                             "outcome=\"error\"}") == 0);
    ck_assert(metric(r.body,
                     "troupe_queue_delivery_attempts_count{queue=\"jobs\"}") ==
              handled);
    ck_assert(metric(r.body, "troupe_queue_delivery_attempts_bucket{queue=\""
                             "jobs\",le=\"+Inf\"}") == handled);
    /* every upsert the writer made is in the write latencies */
    double writes = metric(r.body, "troupe_table_write_seconds_count");
    ck_assert(writes >= (double)atomic_load(&l.rows));
    ck_assert(
        metric(r.body, "troupe_table_write_seconds_bucket{le=\"+Inf\"}") ==
        writes);
    ck_assert(metric(r.body, "troupe_table_write_seconds_sum") > 0);
    ck_assert(
        metric(r.body, "troupe_txn_commit_outcomes_total{result=\"ok\"}") >= 0);
    resp_free(&r);
}
END_TEST

START_TEST(test_promtool_rejects_a_broken_scrape)
{
    /* the check above can fail: promtool refuses a counter without
     * _total and a sample before its TYPE line */
    static const char bad[] = "# TYPE x counter\nx 1\n";
    ck_assert_int_ne(promtool(bad, sizeof(bad) - 1), 0);
}
END_TEST

/* ---- figures ---- */

START_TEST(test_figures_routes_answer_json)
{
    resp r = get("/v1/runtime");
    ck_assert_int_eq(r.status, 200);
    json_t *s = json_object_get(r.json, "schedulers");
    ck_assert_uint_eq(json_array_size(s), 2);
    int64_t actors = 0;
    for (size_t i = 0; i < 2; i++)
        actors += jint(json_array_get(s, i), "actors");
    /* the users table's actors, 2 queue partitions, the kv actor... */
    ck_assert_int_ge(actors, 4);
    resp_free(&r);

    ck_assert_ok(troupe_table_upsert_wait(tables, "users", "k", 1,
                                          "\x81\xa1"
                                          "a\x01",
                                          4, NULL));
    r = get("/v1/commit");
    ck_assert_int_eq(r.status, 200);
    ck_assert_int_ge(jint(r.json, "batches"), 1);
    resp_free(&r);

    r = get("/v1/db");
    ck_assert_int_eq(r.status, 200);
    bool have_kv = false;
    json_t *fam = json_object_get(r.json, "families");
    for (size_t i = 0; i < json_array_size(fam); i++)
        have_kv |= strcmp(json_string_value(
                              json_object_get(json_array_get(fam, i), "name")),
                          "kv") == 0;
    ck_assert(have_kv);
    resp_free(&r);

    r = get("/v1/tables");
    ck_assert_int_eq(r.status, 200);
    ck_assert_str_eq(
        json_string_value(json_object_get(
            json_array_get(json_object_get(r.json, "tables"), 0), "name")),
        "users");
    resp_free(&r);

    r = get("/v1/tables/users/indexes/by_age");
    ck_assert_int_eq(r.status, 200);
    ck_assert_str_eq(json_string_value(json_object_get(r.json, "state")),
                     "ready");
    resp_free(&r);

    r = get("/v1/queues");
    ck_assert_int_eq(r.status, 200);
    json_t *q0 = json_array_get(json_object_get(r.json, "queues"), 0);
    ck_assert_str_eq(json_string_value(json_object_get(q0, "name")), "jobs");
    ck_assert_int_eq(jint(q0, "partitions"), 2);
    resp_free(&r);

    /* no node in this context */
    expect_error("GET", "/v1/node", NULL, 404, "not_found");
}
END_TEST

/* ---- bad input ---- */

START_TEST(test_unknown_names_are_404)
{
    expect_error("GET", "/v2/runtime", NULL, 404, "not_found");
    expect_error("GET", "/v1/runtime/extra", NULL, 404, "not_found");
    expect_error("GET", "/v1/queues/nope", NULL, 404, "not_found");
    expect_error("GET", "/v1/queues/nope/pending", NULL, 404, "not_found");
    expect_error("GET", "/v1/queues/nope/events?id=x", NULL, 404, "not_found");
    expect_error("POST", "/v1/queues/nope/pause", NULL, 404, "not_found");
    expect_error("POST", "/v1/queues/nope/resume", NULL, 404, "not_found");
    expect_error("POST", "/v1/queues/nope/ack", "{\"skey\":\"00\"}", 404,
                 "not_found");
    expect_error("POST", "/v1/queues/nope/delete-by-owner",
                 "{\"kind\":\"a\",\"id\":\"b\"}", 404, "not_found");
    expect_error("GET", "/v1/tables/nope/row?key=a", NULL, 404, "not_found");
    expect_error("GET", "/v1/tables/users/row?key=absent", NULL, 404,
                 "not_found");
    expect_error("GET", "/v1/tables/nope/scan", NULL, 404, "not_found");
    expect_error("GET", "/v1/tables/users/indexes/nope", NULL, 404,
                 "not_found");
    expect_error("POST", "/v1/tables/users/indexes/nope/rebuild", NULL, 404,
                 "not_found");
    expect_error("GET", "/v1/kv?key=absent", NULL, 404, "not_found");
    /* this endpoint has no coordinator: its routes say so
     * (tests/integration/gtx_cli.sh runs them on a node's) */
    expect_error("GET", "/v1/gtx", NULL, 404, "not_found");
    expect_error("GET", "/v1/gtx/g-1", NULL, 404, "not_found");
    expect_error("POST", "/v1/gtx/g-1/retry", NULL, 404, "not_found");
    expect_missing("/v1/tables/nope/row?key=a", "ENOTABLE",
                   "no table \"nope\"");
    expect_missing("/v1/tables/users/row?key=absent", "ENOENT", "no live row");
    expect_missing("/v1/queues/nope", "ENOQUEUE", "nope");
    /* segments that do not decode, or decode to NUL */
    expect_error("GET", "/v1/queues/a%00b", NULL, 404, "not_found");
    expect_error("GET", "/v1/queues/a%zz", NULL, 404, "not_found");
    expect_error("GET", "/v1/queues/a%4", NULL, 404, "not_found");
    /* the 404 names the queue as given, decoded */
    resp r = get("/v1/queues/a%2Fb");
    ck_assert_int_eq(r.status, 404);
    ck_assert_ptr_nonnull(strstr(r.body, "a/b"));
    resp_free(&r);
}
END_TEST

START_TEST(test_malformed_json_is_400_naming_the_fault)
{
    expect_error("PUT", "/v1/kv", "", 400, "bad_json");
    expect_error("PUT", "/v1/kv", "{\"key\":", 400, "bad_json");
    expect_error("PUT", "/v1/kv", "[1,2]", 400, "bad_json");
    expect_error("PUT", "/v1/kv", "{\"key\":\"a\",\"key\":\"b\"}", 400,
                 "bad_json");
    expect_error("PUT", "/v1/kv", "{\"key\":5,\"value\":\"v\"}", 400,
                 "bad_field");
    expect_error("PUT", "/v1/kv", "{\"key\":\"\",\"value\":\"v\"}", 400,
                 "bad_field");
    expect_error("PUT", "/v1/kv", "{\"key\":{\"hex\":\"zz\"},\"value\":\"v\"}",
                 400, "bad_field");
    expect_error("PUT", "/v1/kv", "{\"key\":\"a\",\"value\":\"v\",\"sync\":1}",
                 400, "bad_field");
    expect_error("POST", "/v1/queues/jobs/ack", "{}", 400, "bad_field");
    expect_error("POST", "/v1/queues/jobs/ack", "{\"skey\":\"abc\"}", 400,
                 "bad_field");
    expect_error("POST", "/v1/queues/jobs/retry", "{\"skey\":7}", 400,
                 "bad_field");
    expect_error("POST", "/v1/queues/jobs/ack", "{\"skey\":\"00\"}", 400,
                 "bad_request"); /* not a pending key: the library's EINVAL */
    expect_error("POST", "/v1/queues/jobs/delete-by-owner", "{\"kind\":\"a\"}",
                 400, "bad_field");
    /* the message says where */
    resp r = request("PUT", "/v1/kv", NULL, "{\"key\": tru}");
    ck_assert_int_eq(r.status, 400);
    ck_assert_ptr_nonnull(strstr(r.body, "line 1 column"));
    resp_free(&r);
    /* bad queries */
    expect_error("GET", "/v1/queues/jobs/pending?limit=0", NULL, 400,
                 "bad_query");
    expect_error("GET", "/v1/queues/jobs/pending?limit=x", NULL, 400,
                 "bad_query");
    expect_error("GET", "/v1/queues/jobs/pending?after=xyz", NULL, 400,
                 "bad_query");
    expect_error("GET", "/v1/queues/jobs/pending?after=0011", NULL, 400,
                 "bad_cursor");
    expect_error("GET", "/v1/queues/jobs/events", NULL, 400, "bad_query");
    expect_error("GET", "/v1/queues/jobs/events?id=a&id_hex=61", NULL, 400,
                 "bad_query");
    expect_error("GET", "/v1/tables/users/row", NULL, 400, "bad_query");
    expect_error("GET", "/v1/tables/users/row?key_hex=1", NULL, 400,
                 "bad_query");
    expect_error("GET", "/v1/tables/users/scan?limit=10001", NULL, 400,
                 "bad_query");
    expect_error("GET", "/v1/tables/users/scan?after=0102", NULL, 400,
                 "bad_cursor");
    expect_error("GET", "/v1/kv?key=%zz", NULL, 400, "bad_query");
}
END_TEST

START_TEST(test_wrong_method_is_405_with_allow)
{
    resp r = request("DELETE", "/v1/kv", NULL, NULL);
    ck_assert_int_eq(r.status, 405);
    ck_assert_str_eq(err_code(&r), "method_not_allowed");
    ck_assert_ptr_nonnull(strstr(r.raw, "Allow: GET, PUT\r\n"));
    resp_free(&r);
    expect_error("POST", "/v1/runtime", "{}", 405, "method_not_allowed");
    expect_error("GET", "/v1/queues/jobs/pause", NULL, 405,
                 "method_not_allowed");
    expect_error("PUT", "/metrics", "{}", 405, "method_not_allowed");
}
END_TEST

START_TEST(test_body_over_cap_is_refused_unread)
{
    /* The Content-Length alone decides: the body is never read (sending
     * it whole would race the server's close, which resets a connection
     * with unread bytes). */
    char head[256];
    int hl = snprintf(head, sizeof(head),
                      "PUT /v1/kv HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                      "Content-Length: %u\r\n\r\n{\"key\":",
                      ADMIN_BODY_MAX + 1);
    resp r = raw_request(head, (size_t)hl);
    ck_assert_int_eq(r.status, 400);
    ck_assert_str_eq(err_code(&r), "refused");
    resp_free(&r);
    size_t n = ADMIN_BODY_MAX + 1;
    char *big = malloc(n + 1);
    memset(big, ' ', n);
    big[n] = '\0';
    big[0] = '{';
    /* at the cap it is read (and then the JSON is judged) */
    big[n - 2] = '}';
    big[n - 1] = '\0';
    r = request("PUT", "/v1/kv", NULL, big);
    ck_assert_int_eq(r.status, 400);
    ck_assert_str_eq(err_code(&r), "bad_field");
    resp_free(&r);
    free(big);
    /* the endpoint still serves */
    r = get("/v1/runtime");
    ck_assert_int_eq(r.status, 200);
    resp_free(&r);
    /* a request that is not HTTP is dropped unanswered by nng, and the
     * endpoint goes on serving */
    static const char junk[] = "\x01\x02 garbage\r\n\r\n";
    char *b = raw_bytes(junk, sizeof(junk) - 1);
    ck_assert_msg(strstr(b, " 200 ") == NULL, "%s", b);
    free(b);
    r = get("/v1/commit");
    ck_assert_int_eq(r.status, 200);
    resp_free(&r);
}
END_TEST

START_TEST(test_token_missing_or_wrong_is_refused)
{
    admin_destroy(ep);
    admin_ctx c = ctx_all();
    ck_assert_ok(admin_create(&c, "127.0.0.1:0", TOKEN, strlen(TOKEN), &ep));
    port = admin_port(ep);
    static const char *const paths[] = {"/v1/runtime", "/metrics",
                                        "/v1/queues/jobs/pause"};
    for (size_t i = 0; i < 3; i++) {
        const char *m = i == 2 ? "POST" : "GET";
        resp r = request(m, paths[i], NULL, NULL);
        ck_assert_int_eq(r.status, 401);
        ck_assert_str_eq(err_code(&r), "unauthorized");
        resp_free(&r);
        r = request(m, paths[i], "Authorization: Bearer nope\r\n", NULL);
        ck_assert_int_eq(r.status, 403);
        resp_free(&r);
        r = request(m, paths[i], "Authorization: Bearer " TOKEN "x\r\n", NULL);
        ck_assert_int_eq(r.status, 403);
        resp_free(&r);
        r = request(m, paths[i], "Authorization: Basic " TOKEN "\r\n", NULL);
        ck_assert_int_eq(r.status, 401);
        resp_free(&r);
        r = request(m, paths[i], "Authorization: Bearer " TOKEN "\r\n", NULL);
        ck_assert_msg(r.status == 200, "%s: %d %s", paths[i], r.status, r.body);
        resp_free(&r);
    }
}
END_TEST

START_TEST(test_create_bad_arguments)
{
    admin_ctx c = ctx_all();
    admin *a = NULL;
    /* not loopback: a token is required */
    ck_assert_err(admin_create(&c, "0.0.0.0:0", NULL, 0, &a), TROUPE_EAUTH);
    ck_assert_err(admin_create(&c, "10.1.2.3:0", NULL, 0, &a), TROUPE_EAUTH);
    ck_assert_err(admin_create(&c, "127.0.0.1:0", "short", 5, &a),
                  TROUPE_EINVAL);
    static const char *const bad[] = {
        "127.0.0.1",    "127.0.0.1:", ":80",       "127.0.0.1:99999",
        "127.0.0.1:8x", "[::1:80",    "host/x:80", "[]:80"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        ck_assert_msg(admin_create(&c, bad[i], NULL, 0, &a) == TROUPE_EINVAL,
                      "%s", bad[i]);
    ck_assert_err(admin_create(NULL, "127.0.0.1:0", NULL, 0, &a),
                  TROUPE_EINVAL);
    c.db = NULL;
    ck_assert_err(admin_create(&c, "127.0.0.1:0", NULL, 0, &a), TROUPE_EINVAL);
    ck_assert_ptr_null(a);
    ck_assert(admin_host_is_loopback("127.0.0.1"));
    ck_assert(admin_host_is_loopback("127.9.8.7"));
    ck_assert(admin_host_is_loopback("::1"));
    ck_assert(admin_host_is_loopback("localhost"));
    ck_assert(!admin_host_is_loopback("128.0.0.1"));
    ck_assert(!admin_host_is_loopback("127.0.0.1.evil"));
    ck_assert(!admin_host_is_loopback("0.0.0.0"));
    ck_assert(!admin_host_is_loopback("::"));
    admin_destroy(NULL);
}
END_TEST

/* ---- acting routes ---- */

static void
publish_owned(const char *id, int64_t t)
{
    troupe_queue_event ev = {.id = id,
                             .id_len = strlen(id),
                             .key = id,
                             .key_len = strlen(id),
                             .payload = payload,
                             .payload_len = sizeof(payload),
                             .time_ms = t,
                             .owner_kind = "customer",
                             .owner_kind_len = 8,
                             .owner_id = "alice",
                             .owner_id_len = 5};
    ck_assert_ok(
        troupe_queue_publish_wait(queues, "jobs", &ev, TROUPE_SYNC_DEFAULT));
}

static resp
post(const char *path, const char *body)
{
    return request("POST", path, NULL, body);
}

START_TEST(test_queue_routes_act_on_the_queue)
{
    int64_t later = troupe_now_ms() + 3600 * 1000;
    publish_owned("a", later);
    publish_owned("b", later);
    publish_owned("c", later);

    resp r = get("/v1/queues/jobs");
    ck_assert_int_eq(r.status, 200);
    ck_assert_int_eq(jint(r.json, "pending"), 3);
    ck_assert_int_eq(jint(r.json, "oldest_due_ms"), later);
    ck_assert(json_is_string(json_object_get(r.json, "oldest_due")));
    /* due in the future: no lag */
    ck_assert_int_eq(jint(r.json, "lag_ms"), 0);
    resp_free(&r);

    /* a page of one, then the rest through the cursor */
    r = get("/v1/queues/jobs/pending?limit=1");
    ck_assert_int_eq(r.status, 200);
    json_t *items = json_object_get(r.json, "items");
    ck_assert_uint_eq(json_array_size(items), 1);
    ck_assert(json_is_true(json_object_get(r.json, "more")));
    json_t *it = json_array_get(items, 0);
    /* the payload {"qty": 2} as JSON, the time as ISO 8601 */
    ck_assert_int_eq(jint(it, "payload.qty"), 2);
    const char *iso = json_string_value(json_object_get(it, "time"));
    ck_assert(iso != NULL && strlen(iso) == 24 && iso[23] == 'Z');
    ck_assert_str_eq(
        json_string_value(json_object_get(json_object_get(it, "owner"), "id")),
        "alice");
    char *skey = strdup(json_string_value(json_object_get(it, "skey")));
    char path[512];
    snprintf(path, sizeof(path), "/v1/queues/jobs/pending?limit=10&after=%s",
             json_string_value(json_object_get(r.json, "cursor")));
    resp_free(&r);
    r = get(path);
    ck_assert_int_eq(r.status, 200);
    ck_assert_uint_eq(json_array_size(json_object_get(r.json, "items")), 2);
    ck_assert(json_is_false(json_object_get(r.json, "more")));
    resp_free(&r);

    /* retry: rescheduled to now, so it is due (still 3 pending, one
     * completed invocation) */
    char body[1024];
    snprintf(body, sizeof(body), "{\"skey\":\"%s\"}", skey);
    r = post("/v1/queues/jobs/retry", body);
    ck_assert_msg(r.status == 200, "%s", r.body);
    resp_free(&r);
    r = get("/v1/queues/jobs");
    ck_assert_int_eq(jint(r.json, "pending"), 3);
    ck_assert_int_eq(jint(r.json, "completed"), 1);
    ck_assert_int_lt(jint(r.json, "oldest_due_ms"), later);
    resp_free(&r);

    /* the retried invocation's new key, through the events lookup */
    r = get("/v1/queues/jobs/events?id=a");
    ck_assert_int_eq(r.status, 200);
    items = json_object_get(r.json, "items");
    ck_assert_uint_eq(json_array_size(items), 2);
    const char *pending_skey = NULL;
    for (size_t i = 0; i < 2; i++) {
        json_t *x = json_array_get(items, i);
        if (strcmp(json_string_value(json_object_get(x, "state")), "pending") ==
            0)
            pending_skey = json_string_value(json_object_get(x, "skey"));
        else
            ck_assert(json_is_string(json_object_get(x, "processed")));
    }
    ck_assert_ptr_nonnull(pending_skey);
    snprintf(body, sizeof(body), "{\"skey\":\"%s\"}", pending_skey);
    resp_free(&r);

    /* pause before the ack so no worker races it (none runs anyway) */
    r = post("/v1/queues/jobs/pause", NULL);
    ck_assert_int_eq(r.status, 200);
    resp_free(&r);
    r = get("/v1/queues");
    ck_assert(json_is_true(json_object_get(
        json_array_get(json_object_get(r.json, "queues"), 0), "paused")));
    resp_free(&r);

    r = post("/v1/queues/jobs/ack", body);
    ck_assert_msg(r.status == 200, "%s", r.body);
    resp_free(&r);
    r = get("/v1/queues/jobs");
    ck_assert_int_eq(jint(r.json, "pending"), 2);
    ck_assert_int_eq(jint(r.json, "completed"), 2);
    resp_free(&r);

    r = post("/v1/queues/jobs/resume", NULL);
    ck_assert_int_eq(r.status, 200);
    resp_free(&r);
    r = get("/v1/queues");
    ck_assert(json_is_false(json_object_get(
        json_array_get(json_object_get(r.json, "queues"), 0), "paused")));
    resp_free(&r);

    /* delete by owner: every invocation of alice's, both states */
    r = post("/v1/queues/jobs/delete-by-owner",
             "{\"kind\":\"customer\",\"id\":{\"hex\":\"616c696365\"}}");
    ck_assert_msg(r.status == 200, "%s", r.body);
    ck_assert_int_eq(jint(r.json, "deleted"), 4);
    resp_free(&r);
    r = get("/v1/queues/jobs");
    ck_assert_int_eq(jint(r.json, "pending"), 0);
    ck_assert_int_eq(jint(r.json, "completed"), 0);
    ck_assert(json_is_null(json_object_get(r.json, "lag_ms")));
    resp_free(&r);
    free(skey);
}
END_TEST

static troupe_err
failing(const troupe_queue_delivery *d, troupe_queue_outcome *out, void *arg)
{
    (void)d;
    (void)arg;
    out->error = "upstream said no";
    return TROUPE_EFAILED;
}

static bool
flaky_parked(void *arg)
{
    resp r = get("/v1/queues/flaky");
    bool ok = r.status == 200 && jint(r.json, "parked") == *(int *)arg;
    resp_free(&r);
    return ok;
}

static troupe_queue_worker *
flaky_worker(void)
{
    troupe_queue_worker_opts o = {.queue = "flaky",
                                  .first = 0,
                                  .last = 0,
                                  .credit = 1,
                                  .handler = failing};
    troupe_queue_worker *w = NULL;
    ck_assert_ok(troupe_queue_worker_create(queues, &o, &w));
    return w;
}

START_TEST(test_parked_routes_list_retry_and_delete)
{
    troupe_queue_spec qs = {
        .name = "flaky", .partitions = 1, .max_attempts = 1};
    ck_assert_ok(troupe_queues_create_wait(queues, &qs));
    troupe_queue_event e = {.id = "z",
                            .id_len = 1,
                            .key = "k",
                            .key_len = 1,
                            .payload = "\x07",
                            .payload_len = 1,
                            .time_ms = 0};
    ck_assert_ok(troupe_queue_publish_wait(queues, "flaky", &e, 0));
    troupe_queue_worker *w = flaky_worker();
    int one = 1, zero = 0;
    ck_assert(ts_wait_until(flaky_parked, &one, 10000));
    ck_assert_ok(troupe_queue_worker_stop_wait(w));
    troupe_queue_worker_destroy(w);

    resp r = get("/v1/queues");
    json_t *q1 = json_array_get(json_object_get(r.json, "queues"), 0);
    ck_assert_str_eq(json_string_value(json_object_get(q1, "name")), "flaky");
    ck_assert_int_eq(jint(q1, "max_attempts"), 1);
    resp_free(&r);
    r = get("/v1/queues/flaky/parked?limit=10");
    ck_assert_int_eq(r.status, 200);
    json_t *items = json_object_get(r.json, "items");
    ck_assert_uint_eq(json_array_size(items), 1);
    json_t *it = json_array_get(items, 0);
    ck_assert_str_eq(json_string_value(json_object_get(it, "state")), "parked");
    ck_assert_int_eq(jint(it, "attempts"), 1);
    ck_assert_str_eq(json_string_value(json_object_get(it, "last_error")),
                     "handler error: upstream said no");
    char body[1024];
    snprintf(body, sizeof(body), "{\"skey\":\"%s\"}",
             json_string_value(json_object_get(it, "skey")));
    resp_free(&r);

    r = post("/v1/queues/flaky/parked/retry", "{\"skey\":\"zz\"}");
    ck_assert_int_eq(r.status, 400);
    resp_free(&r);
    r = post("/v1/queues/nope/parked/retry", body);
    ck_assert_int_eq(r.status, 404);
    resp_free(&r);
    r = post("/v1/queues/flaky/parked/retry", body);
    ck_assert_msg(r.status == 200, "%s", r.body);
    resp_free(&r);
    r = get("/v1/queues/flaky");
    ck_assert_int_eq(jint(r.json, "parked"), 0);
    ck_assert_int_eq(jint(r.json, "pending"), 1);
    resp_free(&r);
    /* pending, not parked: a conflict */
    r = post("/v1/queues/flaky/parked/delete", body);
    ck_assert_int_eq(r.status, 409);
    resp_free(&r);

    /* delivered again from attempt 1: parked again, then deleted */
    w = flaky_worker();
    ck_assert(ts_wait_until(flaky_parked, &one, 10000));
    ck_assert_ok(troupe_queue_worker_stop_wait(w));
    troupe_queue_worker_destroy(w);
    r = post("/v1/queues/flaky/parked/delete", body);
    ck_assert_msg(r.status == 200, "%s", r.body);
    resp_free(&r);
    ck_assert(flaky_parked(&zero));
    r = get("/v1/queues/flaky");
    ck_assert_int_eq(jint(r.json, "pending"), 0);
    ck_assert_int_eq(jint(r.json, "completed"), 0);
    resp_free(&r);
    r = post("/v1/queues/flaky/parked/delete", body);
    ck_assert_int_eq(r.status, 404);
    resp_free(&r);
}
END_TEST

START_TEST(test_table_and_kv_routes)
{
    for (uint64_t i = 0; i < 5; i++) {
        uint8_t d[64];
        size_t n = doc(d, sizeof(d), i);
        char key[8];
        snprintf(key, sizeof(key), "k%llu", (unsigned long long)i);
        ck_assert_ok(troupe_table_upsert_wait(tables, "users", key, strlen(key),
                                              d, n, NULL));
    }
    /* a key that is not text: shown as hex */
    uint8_t d[64];
    size_t dn = doc(d, sizeof(d), 7);
    ck_assert_ok(
        troupe_table_upsert_wait(tables, "users", "\xff\x01", 2, d, dn, NULL));

    resp r = get("/v1/tables/users/row?key=k3");
    ck_assert_int_eq(r.status, 200);
    ck_assert_str_eq(json_string_value(json_object_get(
                         json_object_get(r.json, "doc"), "name")),
                     "user 3");
    ck_assert_int_eq(jint(r.json, "doc.age"), 3);
    ck_assert(json_is_null(json_object_get(r.json, "expires")));
    resp_free(&r);
    r = get("/v1/tables/users/row?key_hex=ff01");
    ck_assert_int_eq(r.status, 200);
    ck_assert_str_eq(json_string_value(json_object_get(
                         json_object_get(r.json, "key"), "hex")),
                     "ff01");
    resp_free(&r);

    /* scan in pages of 4: all 6 rows, once each */
    size_t seen = 0;
    char path[512] = "/v1/tables/users/scan?limit=4";
    for (int page = 0; page < 4; page++) {
        r = get(path);
        ck_assert_msg(r.status == 200, "%s", r.body);
        seen += json_array_size(json_object_get(r.json, "rows"));
        bool more = json_is_true(json_object_get(r.json, "more"));
        if (more)
            snprintf(path, sizeof(path),
                     "/v1/tables/users/scan?limit=4&after=%s",
                     json_string_value(json_object_get(r.json, "cursor")));
        resp_free(&r);
        if (!more)
            break;
    }
    ck_assert_uint_eq(seen, 6);

    r = post("/v1/tables/users/indexes/by_age/rebuild", NULL);
    ck_assert_msg(r.status == 200, "%s", r.body);
    resp_free(&r);

    /* kv: put then get, text and hex keys */
    r = request("PUT", "/v1/kv", NULL,
                "{\"key\":{\"hex\":\"00ff\"},\"value\":\"v1\",\"sync\":false}");
    ck_assert_msg(r.status == 200, "%s", r.body);
    resp_free(&r);
    r = get("/v1/kv?key_hex=00ff");
    ck_assert_int_eq(r.status, 200);
    ck_assert_str_eq(json_string_value(json_object_get(r.json, "value")), "v1");
    resp_free(&r);
    r = request("PUT", "/v1/kv", NULL,
                "{\"key\":\"name with space\",\"value\":{\"hex\":\"0001\"}}");
    ck_assert_int_eq(r.status, 200);
    resp_free(&r);
    r = get("/v1/kv?key=name+with%20space");
    ck_assert_int_eq(r.status, 200);
    ck_assert_str_eq(json_string_value(json_object_get(
                         json_object_get(r.json, "value"), "hex")),
                     "0001");
    resp_free(&r);
}
END_TEST

/* ---- the msgpack converter alone ---- */

static char *
conv(const void *p, size_t n, const char **why)
{
    json_t *j = admin_msgpack_to_json(p, n, why);
    if (j == NULL)
        return NULL;
    char *s = json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENCODE_ANY);
    json_decref(j);
    return s;
}

START_TEST(test_msgpack_to_json_maps_every_type)
{
    troupe_packer p;
    troupe_pack_init(&p);
    troupe_pack_map(&p, 8);
    troupe_pack_cstr(&p, "arr");
    troupe_pack_array(&p, 3);
    troupe_pack_nil(&p);
    troupe_pack_bool(&p, true);
    troupe_pack_int(&p, -5);
    troupe_pack_cstr(&p, "big");
    troupe_pack_uint(&p, UINT64_MAX);
    troupe_pack_cstr(&p, "bin");
    troupe_pack_bin(&p, "\x00\x01", 2);
    troupe_pack_cstr(&p, "bad");
    troupe_pack_str(&p, "\xff", 1);
    troupe_pack_cstr(&p, "f");
    troupe_pack_double(&p, 1.5);
    troupe_pack_cstr(&p, "nan");
    troupe_pack_double(&p, NAN);
    troupe_pack_uint(&p, 7); /* an integer key */
    troupe_pack_cstr(&p, "seven");
    troupe_pack_cstr(&p, "ext");
    troupe_pack_raw(&p, "\xd4\x05\x09", 3); /* fixext1 type 5 */
    size_t n;
    const void *d = troupe_pack_data(&p, &n);
    const char *why = NULL;
    char *s = conv(d, n, &why);
    ck_assert_msg(s != NULL, "%s", why);
    ck_assert_str_eq(s, "{\"7\":\"seven\",\"arr\":[null,true,-5],\"bad\":{"
                        "\"bin\":\"ff\"},\"big\":\"18446744073709551615\","
                        "\"bin\":{\"bin\":\"0001\"},\"ext\":{\"ext\":"
                        "\"d40509\"},\"f\":1.5,\"nan\":\"NaN\"}");
    free(s);
    troupe_pack_fini(&p);
}
END_TEST

START_TEST(test_msgpack_to_json_refuses_hostile_input)
{
    const char *why = NULL;
    /* trailing bytes, truncated, empty */
    ck_assert_ptr_null(conv("\x01\x02", 2, &why));
    ck_assert_ptr_nonnull(why);
    ck_assert_ptr_null(conv("\x92\x01", 2, &why));
    ck_assert_ptr_null(conv("", 0, &why));
    /* an array32 header claiming 4 G elements in 5 bytes */
    ck_assert_ptr_null(conv("\xdd\xff\xff\xff\xff", 5, &why));
    /* nested 40 deep */
    uint8_t deep[41];
    memset(deep, 0x91, 40);
    deep[40] = 0x01;
    ck_assert_ptr_null(conv(deep, sizeof(deep), &why));
    /* 300 Ki nils in one array: over the value budget, refused, not built */
    size_t n = 5 + 300 * 1024;
    uint8_t *many = malloc(n);
    many[0] = 0xdd;
    many[1] = 0;
    many[2] = 0x04;
    many[3] = 0xb0;
    many[4] = 0x00; /* 0x0004b000 = 307200 */
    memset(many + 5, 0xc0, n - 5);
    ck_assert_ptr_null(conv(many, n, &why));
    ck_assert_ptr_nonnull(strstr(why, "too large"));
    /* the same count under the budget converts */
    many[2] = 0x01;
    many[3] = 0x00; /* 65536 */
    char *s = conv(many, 5 + 65536, &why);
    ck_assert_ptr_nonnull(s);
    free(s);
    free(many);
}
END_TEST

int
main(void)
{
    signal(SIGPIPE, SIG_IGN);
    Suite *s = suite_create("admin");
    TCase *tc = tcase_create("endpoint");
    tcase_set_timeout(tc, 90);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_metrics_under_load_pass_promtool);
    tcase_add_test(tc, test_figures_routes_answer_json);
    tcase_add_test(tc, test_unknown_names_are_404);
    tcase_add_test(tc, test_malformed_json_is_400_naming_the_fault);
    tcase_add_test(tc, test_wrong_method_is_405_with_allow);
    tcase_add_test(tc, test_body_over_cap_is_refused_unread);
    tcase_add_test(tc, test_token_missing_or_wrong_is_refused);
    tcase_add_test(tc, test_create_bad_arguments);
    tcase_add_test(tc, test_queue_routes_act_on_the_queue);
    tcase_add_test(tc, test_parked_routes_list_retry_and_delete);
    tcase_add_test(tc, test_table_and_kv_routes);
    suite_add_tcase(s, tc);
    TCase *tj = tcase_create("msgpack_json");
    tcase_add_test(tj, test_msgpack_to_json_maps_every_type);
    tcase_add_test(tj, test_msgpack_to_json_refuses_hostile_input);
    tcase_add_test(tj, test_promtool_rejects_a_broken_scrape);
    suite_add_tcase(s, tj);
    Suite *suites[] = {s};
    return ts_run_suites(suites, 1);
}
