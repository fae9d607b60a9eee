/*
 * The DTM HTTP API (tools/dtm_api.c) under load: two-step sagas with http
 * branches submitted over HTTP as DTM's SDKs post them, beside the same
 * sagas submitted through the C API.
 *
 *   bench http_saga_2step <v> sagas/s peer c_saga_2step_http <v> ratio <r>
 *
 * One process holds a coordinator (synced, as a node's), the http
 * branches' target (troupe/httpcall.h), the DTM API on a loopback port and
 * a no-op branch service (nng's HTTP server answering every request 200
 * {"dtm_result":"SUCCESS"} at once). CONC (32) threads each run their share
 * of BENCH_SAGAS (2000) sagas back to back:
 *   http_saga_2step     a POST /api/dtmsvr/submit of dtmcli's TransBase
 *                       (two steps, action and compensate urls on the
 *                       no-op service, payloads "{}"), over one kept-alive
 *                       connection per thread, waiting for its 200;
 *   c_saga_2step_http   troupe_saga_submit_wait of the same two http
 *                       steps (the peer: what the HTTP layer costs).
 * Each figure counts from the first submit to the moment every saga is
 * final (the main thread reads each one's stored status, in order, until
 * all have succeeded): the four branch calls over HTTP are in both.
 * Medians over BENCH_REPS (5), a fresh database per side and rep. The
 * published figures of DTM's own benchmarks are in docs/performance.md.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <nng/nng.h>
#include <nng/supplemental/http/http.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "bench_util.h"
#include "dtm_api.h"
#include "troupe/catalog.h"
#include "troupe/commit.h"
#include "troupe/coordinator.h"
#include "troupe/httpcall.h"
#include "troupe/storage.h"
#include "troupe/table.h"

#define CONC 32

static void
die(const char *what, troupe_err e)
{
    fprintf(stderr, "bench_dtm_http: %s: %s (%s)\n", what, troupe_err_name(e),
            troupe_errmsg(e));
    exit(1);
}

/* ---- the no-op branch service ---- */

static void
noop_handle(nng_aio *aio)
{
    static const char ok[] = "{\"dtm_result\":\"SUCCESS\"}";
    nng_http_res *res = NULL;
    int rv = nng_http_res_alloc(&res);
    if (rv == 0)
        rv = nng_http_res_copy_data(res, ok, sizeof(ok) - 1);
    if (rv != 0) {
        nng_http_res_free(res);
        nng_aio_finish(aio, rv);
        return;
    }
    nng_aio_set_output(aio, 0, res);
    nng_aio_finish(aio, 0);
}

static int
noop_start(nng_http_server **srv)
{
    nng_url *u = NULL;
    nng_http_handler *h = NULL;
    nng_sockaddr sa;
    if (nng_url_parse(&u, "http://127.0.0.1:0") != 0 ||
        nng_http_server_hold(srv, u) != 0 ||
        nng_http_handler_alloc(&h, "/", noop_handle) != 0 ||
        nng_http_handler_set_method(h, NULL) != 0 ||
        nng_http_handler_set_tree(h) != 0 ||
        nng_http_handler_collect_body(h, true, 1 << 16) != 0 ||
        nng_http_server_add_handler(*srv, h) != 0 ||
        nng_http_server_start(*srv) != 0 ||
        nng_http_server_get_addr(*srv, &sa) != 0)
        die("no-op service", TROUPE_ESYS);
    nng_url_free(u);
    return ntohs(sa.s_in.sa_port);
}

/* ---- a node: coordinator, http target, the API ---- */

typedef struct node {
    char dir[4096];
    troupe_runtime *rt;
    troupe_db *db;
    troupe_commit *commit;
    troupe_catalog *cat;
    troupe_tables *tables;
    troupe_httpcall *http;
    troupe_coord *coord;
    dtm_api *api;
} node;

static void
node_open(node *n, bool api)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(n->dir, sizeof(n->dir), "%s/troupe-bench-dtm-XXXXXX",
             tmp ? tmp : "/tmp");
    if (mkdtemp(n->dir) == NULL)
        die("mkdtemp", TROUPE_ESYS);
    troupe_runtime_opts ro = {.schedulers = 2, .workers = 2, .host_workers = 2};
    troupe_err e;
    if ((e = troupe_runtime_create(&n->rt, &ro)) != TROUPE_OK ||
        (e = troupe_db_open(n->dir, NULL, &n->db)) != TROUPE_OK ||
        (e = troupe_commit_create(n->db, NULL, &n->commit)) != TROUPE_OK)
        die("open", e);
    troupe_catalog_opts co = {.rt = n->rt, .db = n->db};
    troupe_tables_opts to = {.commit = n->commit};
    if ((e = troupe_catalog_open(&co, &n->cat)) != TROUPE_OK ||
        (to.catalog = n->cat,
         (e = troupe_tables_open(&to, &n->tables)) != TROUPE_OK) ||
        (e = troupe_httpcall_open(n->rt, NULL, &n->http)) != TROUPE_OK)
        die("open tables", e);
    troupe_coord_opts cop = {.rt = n->rt, .tables = n->tables};
    if ((e = troupe_coord_open_wait(&cop, &n->coord)) != TROUPE_OK)
        die("coord open", e);
    if (api && (e = dtm_api_create(n->rt, n->coord, "127.0.0.1:0", false,
                                   &n->api)) != TROUPE_OK)
        die("dtm api", e);
}

static void
node_close(node *n)
{
    dtm_api_destroy(n->api);
    troupe_coord_stop_wait(n->coord);
    troupe_coord_destroy(n->coord);
    troupe_httpcall_stop_wait(n->http);
    troupe_httpcall_destroy(n->http);
    troupe_tables_stop_wait(n->tables);
    troupe_tables_destroy(n->tables);
    troupe_runtime_shutdown_wait(n->rt);
    troupe_catalog_stop_wait(n->cat);
    troupe_catalog_destroy(n->cat);
    troupe_runtime_destroy(n->rt);
    troupe_commit_destroy(n->commit);
    troupe_db_close(n->db);
    bench_rmtree(n->dir);
    memset(n, 0, sizeof(*n));
}

/* ---- the submitters ---- */

static int noop_port;

typedef struct worker {
    node *n;
    bool over_http;
    int id, count;
    pthread_t th;
} worker;

static void
gid_of(char *buf, size_t cap, int thread, int i)
{
    snprintf(buf, cap, "h-%03d-%06d", thread, i);
}

static int
dial(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET,
                             .sin_port = htons((uint16_t)port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int one = 1;
    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0)
        die("connect to the DTM API", TROUPE_ESYS);
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    return fd;
}

/* One POST over *fd (dialled again when the server closed it): the
 * response's status, or -1 when the connection broke. */
static int
post(int *fd, int port, const char *path, const char *body, size_t len)
{
    char req[4096];
    int n = snprintf(req, sizeof(req),
                     "POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
                     "application/json\r\nContent-Length: %zu\r\n\r\n%s",
                     path, len, body);
    if (*fd < 0)
        *fd = dial(port);
    for (int off = 0; off < n;) {
        ssize_t w = write(*fd, req + off, (size_t)(n - off));
        if (w <= 0)
            return -1;
        off += (int)w;
    }
    char buf[8192];
    buf[0] = '\0';
    size_t have = 0;
    char *end = NULL;
    while ((end = strstr(buf, "\r\n\r\n")) == NULL) {
        ssize_t r = read(*fd, buf + have, sizeof(buf) - 1 - have);
        if (r <= 0)
            return -1;
        have += (size_t)r;
        buf[have] = '\0';
    }
    int status = 0;
    sscanf(buf, "HTTP/1.1 %d", &status);
    size_t clen = 0;
    for (char *h = strstr(buf, "\r\n"); h != NULL && h < end;
         h = strstr(h + 2, "\r\n"))
        if (strncasecmp(h + 2, "Content-Length:", 15) == 0)
            clen = strtoul(h + 17, NULL, 10);
    bool closing = strcasestr(buf, "Connection: close") != NULL;
    size_t got = have - (size_t)(end + 4 - buf);
    while (got < clen) {
        ssize_t r = read(*fd, buf, sizeof(buf));
        if (r <= 0)
            return -1;
        got += (size_t)r;
    }
    if (closing) {
        close(*fd);
        *fd = -1;
    }
    return status;
}

static void *
worker_main(void *arg)
{
    worker *w = arg;
    char a1[128], c1[128], a2[128], c2[128];
    snprintf(a1, sizeof(a1), "http://127.0.0.1:%d/TransOut", noop_port);
    snprintf(c1, sizeof(c1), "http://127.0.0.1:%d/TransOutRevert", noop_port);
    snprintf(a2, sizeof(a2), "http://127.0.0.1:%d/TransIn", noop_port);
    snprintf(c2, sizeof(c2), "http://127.0.0.1:%d/TransInRevert", noop_port);
    int fd = -1, port = w->over_http ? dtm_api_port(w->n->api) : 0;
    troupe_packer p[4];
    troupe_saga_step st[2];
    if (!w->over_http) {
        const char *urls[4] = {a1, c1, a2, c2};
        for (int i = 0; i < 4; i++) {
            troupe_pack_init(&p[i]);
            troupe_httpcall_payload_pack(&p[i], urls[i], "{}", 2);
        }
        for (int i = 0; i < 2; i++) {
            st[i].action = (troupe_gtx_call){.target = "http"};
            st[i].action.payload =
                troupe_pack_data(&p[2 * i], &st[i].action.payload_len);
            st[i].compensate = (troupe_gtx_call){.target = "http"};
            st[i].compensate.payload =
                troupe_pack_data(&p[2 * i + 1], &st[i].compensate.payload_len);
        }
    }
    for (int i = 0; i < w->count; i++) {
        char gid[32];
        gid_of(gid, sizeof(gid), w->id, i);
        if (!w->over_http) {
            troupe_err e = troupe_saga_submit_wait(w->n->coord, gid,
                                                   strlen(gid), st, 2, NULL);
            if (e != TROUPE_OK)
                die("submit", e);
            continue;
        }
        char body[2048];
        int n = snprintf(
            body, sizeof(body),
            "{\"gid\":\"%s\",\"trans_type\":\"saga\",\"steps\":[{\"action\":"
            "\"%s\",\"compensate\":\"%s\"},{\"action\":\"%s\",\"compensate\":"
            "\"%s\"}],\"payloads\":[\"{}\",\"{}\"],\"concurrent\":false,"
            "\"protocol\":\"\"}",
            gid, a1, c1, a2, c2);
        int status = post(&fd, port, "/api/dtmsvr/submit", body, (size_t)n);
        if (status < 0) { /* a resubmit of the gid is harmless */
            if (fd >= 0)
                close(fd);
            fd = -1;
            status = post(&fd, port, "/api/dtmsvr/submit", body, (size_t)n);
        }
        if (status != 200)
            die("POST submit", TROUPE_EFAILED);
    }
    if (fd >= 0)
        close(fd);
    if (!w->over_http)
        for (int i = 0; i < 4; i++)
            troupe_pack_fini(&p[i]);
    return NULL;
}

static void
wait_final(troupe_coord *c, const char *gid)
{
    for (;;) {
        troupe_gtx_info in;
        troupe_err e = troupe_gtx_query_wait(c, gid, strlen(gid), &in);
        if (e != TROUPE_OK)
            die("query", e);
        if (in.status == TROUPE_GTX_SUCCEED)
            return;
        if (in.status == TROUPE_GTX_FAILED)
            die("a saga failed", TROUPE_EFAILED);
        usleep(200);
    }
}

/* Sagas per second, over HTTP or through the C API. */
static double
rep(bool over_http, int total)
{
    static node n;
    node_open(&n, over_http);
    static worker w[CONC];
    int each = total / CONC;
    double t0 = bench_now();
    for (int i = 0; i < CONC; i++) {
        w[i] =
            (worker){.n = &n, .over_http = over_http, .id = i, .count = each};
        if (pthread_create(&w[i].th, NULL, worker_main, &w[i]) != 0)
            die("thread", TROUPE_ESYS);
    }
    for (int i = 0; i < CONC; i++)
        pthread_join(w[i].th, NULL);
    for (int t = 0; t < CONC; t++)
        for (int i = 0; i < each; i++) {
            char gid[32];
            gid_of(gid, sizeof(gid), t, i);
            wait_final(n.coord, gid);
        }
    double s = bench_now() - t0;
    node_close(&n);
    return (each * CONC) / s;
}

int
main(void)
{
    const char *env = getenv("BENCH_SAGAS");
    int total = env ? atoi(env) : 2000;
    if (total < CONC)
        total = CONC;
    int reps = bench_reps(5);
    nng_http_server *srv = NULL;
    noop_port = noop_start(&srv);
    double h[64], c[64];
    for (int r = 0; r < reps; r++) {
        h[r] = rep(true, total);
        c[r] = rep(false, total);
    }
    bench_line_peer("http_saga_2step", bench_median(h, reps), "sagas/s",
                    "c_saga_2step_http", bench_median(c, reps));
    nng_http_server_stop(srv);
    nng_http_server_release(srv);
    return 0;
}
