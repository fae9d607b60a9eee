/*
 * Helpers for the transport and security suites (tnode.h).
 */
#include "tnode.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <nng/protocol/pair1/pair.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "troupe/alloc.h"
#include "troupe/pack.h"

struct st {
    struct shared *sh;
};

static troupe_err
st_init(troupe_actor *self, void *state, void *arg)
{
    ((struct st *)state)->sh = arg;
    return TROUPE_OK;
}

static troupe_err
on_echo(troupe_actor *self, void *state, const troupe_msg *msg)
{
    troupe_msg *r = NULL;
    troupe_err e = troupe_msg_create(&r, msg->kind, troupe_msg_data(msg),
                                     troupe_msg_len(msg));
    if (e != TROUPE_OK)
        return e;
    return troupe_reply(self, msg, &r) == TROUPE_OK ? TROUPE_OK : TROUPE_OK;
}

/* Counts messages whose body is a uint sequence number; checks order. */
static troupe_err
on_sink(troupe_actor *self, void *state, const troupe_msg *msg)
{
    struct shared *sh = ((struct st *)state)->sh;
    troupe_reader r;
    uint64_t seq = 0;
    troupe_reader_init_msg(&r, msg);
    troupe_read_uint(&r, &seq);
    if (troupe_read_end(&r) != TROUPE_OK || seq != sh->next_seq)
        atomic_fetch_add(&sh->out_of_order, 1);
    sh->next_seq = seq + 1;
    atomic_fetch_add(&sh->count, 1);
    return TROUPE_OK;
}

/* Asks sh->target with the GO message's body; the reply lands in K_REPLY. */
static troupe_err
on_go(troupe_actor *self, void *state, const troupe_msg *msg)
{
    struct shared *sh = ((struct st *)state)->sh;
    troupe_msg *m = NULL;
    troupe_err e = troupe_msg_create(&m, K_ECHO, troupe_msg_data(msg),
                                     troupe_msg_len(msg));
    if (e == TROUPE_OK)
        e = troupe_ask(self, sh->target, &m, 3000, K_REPLY, NULL);
    if (e != TROUPE_OK) {
        sh->err = e;
        atomic_store(&sh->done, 1);
    }
    return TROUPE_OK;
}

static troupe_err
on_reply(troupe_actor *self, void *state, const troupe_msg *msg)
{
    struct shared *sh = ((struct st *)state)->sh;
    sh->err = msg->err;
    sh->len = troupe_msg_len(msg);
    if (sh->len > 0 && sh->len <= sizeof(sh->body))
        memcpy(sh->body, troupe_msg_data(msg), sh->len);
    atomic_store(&sh->done, 1);
    return TROUPE_OK;
}

static troupe_err
on_count(troupe_actor *self, void *state, const troupe_msg *msg)
{
    struct shared *sh = ((struct st *)state)->sh;
    const uint8_t *p = troupe_msg_data(msg);
    size_t len = troupe_msg_len(msg);
    uint64_t sum = sh->body_sum;
    for (size_t i = 0; i < len; i++)
        sum = sum * 31 + p[i];
    sh->body_sum = sum;
    sh->last_from = msg->from;
    atomic_fetch_add(&sh->bytes, len);
    atomic_fetch_add(&sh->count, 1); /* last: readers wait for it */
    return TROUPE_OK;
}

static const troupe_handler_fn handlers[] = {on_echo, on_sink, on_go, on_reply,
                                             on_count};
static const troupe_actor_def test_actor = {
    .name = "test",
    .state_size = sizeof(struct st),
    .init = st_init,
    .handlers = handlers,
    .n_handlers = 5,
    .remote_kinds = TROUPE_KIND_BIT(K_ECHO) | TROUPE_KIND_BIT(K_SINK) |
                    TROUPE_KIND_BIT(K_COUNT),
};

/* ---- nodes in this process ---- */

troupe_err
side_try_open(struct side *s, uint32_t id, const troupe_node_opts *o,
              const char *listen)
{
    memset(s, 0, sizeof(*s));
    troupe_runtime_opts ro = {.schedulers = 2, .workers = 1, .node_id = id};
    if (getenv("TROUPE_TEST_LOG_DEBUG") != NULL) /* to read a failure */
        ro.logger.level = TROUPE_LOG_DEBUG;
    ck_assert_ok(troupe_runtime_create(&s->rt, &ro));
    troupe_err e = troupe_node_create(&s->node, s->rt, o);
    if (e != TROUPE_OK)
        return e;
    if (listen != NULL)
        ck_assert_ok(troupe_node_listen(s->node, listen));
    troupe_spawn_opts so = TROUPE_SPAWN_OPTS_INIT;
    so.arg = &s->sh;
    so.name = "test";
    ck_assert_ok(troupe_actor_spawn(s->rt, &test_actor, &so, &s->actor));
    return TROUPE_OK;
}

void
side_open(struct side *s, uint32_t id, const troupe_node_opts *o,
          const char *listen)
{
    ck_assert_ok(side_try_open(s, id, o, listen));
}

void
side_close(struct side *s)
{
    if (s->rt == NULL)
        return;
    ck_assert_ok(troupe_runtime_shutdown_wait(s->rt));
    if (s->node != NULL) /* side_try_open's refused node */
        ck_assert_ok(troupe_node_stop_wait(s->node));
    troupe_node_destroy(s->node);
    troupe_runtime_destroy(s->rt);
    s->rt = NULL;
    s->node = NULL;
}

void
connect_pair(struct side *a, struct side *b)
{
    uint32_t peer = 0;
    ck_assert_ok(troupe_node_connect_wait(a->node, troupe_node_url(b->node),
                                          10000, &peer));
    ck_assert_uint_eq(peer, troupe_runtime_node_id(b->rt));
    ck_assert(troupe_node_peer_up(a->node, peer));
    ck_assert_ok(
        troupe_node_wait_peer(a->node, troupe_runtime_node_id(b->rt), 10000));
    ck_assert_ok(
        troupe_node_wait_peer(b->node, troupe_runtime_node_id(a->rt), 10000));
}

char *
unique_url(const char *scheme, const char *tag)
{
    static int seq;
    char *u = malloc(256);
    if (strcmp(scheme, "tcp") == 0)
        snprintf(u, 256, "tcp://127.0.0.1:0");
    else if (strcmp(scheme, "ipc") == 0)
        snprintf(u, 256, "ipc:///tmp/troupe-%s-%d-%d.ipc", tag, (int)getpid(),
                 seq++);
    else
        snprintf(u, 256, "inproc://troupe-%s-%d-%d", tag, (int)getpid(), seq++);
    return u;
}

/* Host ask with a blocking wait. */

void
ask_cb(troupe_runtime *rt, troupe_err err, troupe_msg *reply, void *arg)
{
    struct ask_res *r = arg;
    r->err = err;
    if (reply != NULL) {
        r->len = troupe_msg_len(reply);
        r->kind = reply->kind;
        if (r->len <= sizeof(r->body) && r->len > 0)
            memcpy(r->body, troupe_msg_data(reply), r->len);
    }
    atomic_store(&r->done, 1);
}

void
lookup_cb(troupe_runtime *rt, troupe_err err, troupe_addr a, void *arg)
{
    struct ask_res *r = arg;
    r->err = err;
    r->addr = a;
    atomic_store(&r->done, 1);
}

bool
is_done(void *arg)
{
    return atomic_load(&((struct ask_res *)arg)->done) != 0;
}

bool
shared_done(void *arg)
{
    return atomic_load(&((struct shared *)arg)->done) != 0;
}

bool
count_reached(void *arg)
{
    struct count_at_least *c = arg;
    return atomic_load(c->count) >= c->want;
}

troupe_err
host_ask(troupe_runtime *rt, troupe_addr to, const char *body,
         uint32_t timeout_ms, struct ask_res *r)
{
    memset(r, 0, sizeof(*r));
    troupe_msg *m;
    ck_assert_ok(troupe_msg_create(&m, K_ECHO, body, body ? strlen(body) : 0));
    troupe_err e = troupe_runtime_ask(rt, to, &m, timeout_ms, ask_cb, r);
    if (e != TROUPE_OK)
        return e;
    ck_assert(ts_wait_until(is_done, r, timeout_ms + 5000));
    return r->err;
}

troupe_addr
lookup(struct side *from, uint32_t peer, const char *name)
{
    struct ask_res r = {0};
    ck_assert_ok(
        troupe_node_lookup(from->node, peer, name, 3000, lookup_cb, &r));
    ck_assert(ts_wait_until(is_done, &r, 8000));
    ck_assert_ok(r.err);
    ck_assert(!troupe_addr_is_none(r.addr));
    return r.addr;
}

troupe_msg *
seq_msg(uint32_t kind, uint64_t seq)
{
    troupe_packer p;
    troupe_msg *m = NULL;
    troupe_pack_init(&p);
    troupe_pack_uint(&p, seq);
    ck_assert_ok(troupe_pack_take_msg(&p, kind, &m));
    return m;
}

static void
ping_cb(troupe_runtime *rt, troupe_err err, troupe_msg *reply, void *arg)
{
    struct ask_res *r = arg;
    r->err = err;
    atomic_store(&r->done, 1);
}

static int
cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

uint64_t
ping_median_us(struct side *a, uint32_t peer, int n, uint32_t timeout_ms)
{
    uint64_t *us = calloc((size_t)n, sizeof(*us));
    for (int i = 0; i < n; i++) {
        struct ask_res r = {0};
        troupe_msg *m;
        ck_assert_ok(troupe_msg_create(&m, TROUPE_NODE_PING, NULL, 0));
        uint64_t t0 = uv_hrtime();
        if (troupe_runtime_ask(a->rt, troupe_node_addr(peer), &m, timeout_ms,
                               ping_cb, &r) != TROUPE_OK ||
            !ts_wait_until(is_done, &r, timeout_ms + 5000) ||
            r.err != TROUPE_OK) {
            free(us);
            return UINT64_MAX;
        }
        us[i] = (uv_hrtime() - t0) / 1000;
    }
    qsort(us, (size_t)n, sizeof(*us), cmp_u64);
    uint64_t med = us[n / 2];
    free(us);
    return med;
}

/* ---- a raw peer ---- */

int
sp_connect_try(uint16_t port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    /* SP header: pair1 (0x11) */
    static const unsigned char hdr[8] = {0, 'S', 'P', 0, 0x00, 0x11, 0, 0};
    unsigned char peer[8];
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 ||
        send(fd, hdr, sizeof(hdr), MSG_NOSIGNAL) != 8 ||
        recv(fd, peer, sizeof(peer), MSG_WAITALL) != 8) {
        close(fd);
        return -1;
    }
    return fd;
}

uint16_t
url_port(const char *url)
{
    const char *colon = strrchr(url, ':');
    ck_assert_ptr_nonnull(colon);
    return (uint16_t)atoi(colon + 1);
}

void
raw_open(struct raw *r, const char *url, uint32_t id, uint64_t inc)
{
    memset(r, 0, sizeof(*r));
    r->id = id;
    r->inc = inc;
    ck_assert_msg(strncmp(url, "tcp://127.0.0.1:", 16) == 0,
                  "raw peers speak tcp loopback, not %s", url);
    r->fd = sp_connect_try(url_port(url));
    ck_assert_int_ge(r->fd, 0);
}

void
raw_close(struct raw *r)
{
    if (r->fd >= 0)
        close(r->fd);
    r->fd = -1;
}

static void
set_timeout(int fd, int opt, uint32_t ms)
{
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    setsockopt(fd, SOL_SOCKET, opt, &tv, sizeof(tv));
}

int
raw_send(struct raw *r, const void *buf, size_t len)
{
    /* one SP message: its length, pair1's 4-byte hop count, the frame */
    unsigned char hdr[12];
    uint64_t n = len + 4;
    for (int i = 0; i < 8; i++)
        hdr[i] = (unsigned char)(n >> (56 - 8 * i));
    memcpy(hdr + 8, "\0\0\0\1", 4);
    set_timeout(r->fd, SO_SNDTIMEO,
                r->send_timeout_ms ? r->send_timeout_ms : 5000);
    struct iovec iov[2] = {{hdr, sizeof(hdr)}, {(void *)buf, len}};
    struct msghdr mh = {.msg_iov = iov, .msg_iovlen = len ? 2 : 1};
    size_t want = sizeof(hdr) + len, sent = 0;
    while (sent < want) {
        ssize_t k = sendmsg(r->fd, &mh, MSG_NOSIGNAL);
        if (k <= 0)
            return errno ? errno : EPIPE;
        sent += (size_t)k;
        while (k > 0 && mh.msg_iovlen > 0) {
            size_t take = (size_t)k < mh.msg_iov[0].iov_len
                              ? (size_t)k
                              : mh.msg_iov[0].iov_len;
            mh.msg_iov[0].iov_base = (char *)mh.msg_iov[0].iov_base + take;
            mh.msg_iov[0].iov_len -= take;
            k -= (ssize_t)take;
            if (mh.msg_iov[0].iov_len == 0) {
                mh.msg_iov++;
                mh.msg_iovlen--;
            }
        }
    }
    return 0;
}

bool
raw_dropped(void *arg)
{
    struct raw *r = arg;
    unsigned char junk[4096];
    for (;;) {
        ssize_t k = recv(r->fd, junk, sizeof(junk), MSG_DONTWAIT);
        if (k == 0 || (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK &&
                       errno != EINTR))
            return true;
        if (k < 0)
            return false;
    }
}

int
raw_hello(struct raw *r)
{
    ck_assert_ok(troupe__auth_nonce(NULL, r->nonce));
    troupe_wire_ctl c = {.type = TROUPE_FRAME_HELLO,
                         .sender = r->id,
                         .incarnation = r->inc,
                         .url = r->url,
                         .nonce = r->nonce};
    uint8_t buf[TROUPE_WIRE_CTL_MAX];
    size_t len;
    ck_assert_ok(troupe_wire_encode_ctl(&c, buf, sizeof(buf), &len));
    return raw_send(r, buf, len);
}

/* Reads exactly n bytes before the deadline; OK, ETIMEDOUT or ECLOSED. */
static troupe_err
read_full(int fd, void *buf, size_t n, uint64_t deadline)
{
    size_t got = 0;
    while (got < n) {
        uint64_t now = ts_now_ms();
        if (now >= deadline)
            return TROUPE_ETIMEDOUT;
        struct pollfd pf = {fd, POLLIN, 0};
        int rc = poll(&pf, 1, (int)(deadline - now));
        if (rc == 0)
            return TROUPE_ETIMEDOUT;
        if (rc < 0)
            continue;
        ssize_t k = recv(fd, (char *)buf + got, n - got, 0);
        if (k <= 0)
            return TROUPE_ECLOSED;
        got += (size_t)k;
    }
    return TROUPE_OK;
}

troupe_err
raw_recv(struct raw *r, uint32_t timeout_ms)
{
    uint64_t deadline = ts_now_ms() + timeout_ms;
    unsigned char hdr[12];
    troupe_err e = read_full(r->fd, hdr, sizeof(hdr), deadline);
    if (e != TROUPE_OK)
        return e;
    uint64_t n = 0;
    for (int i = 0; i < 8; i++)
        n = n << 8 | hdr[i];
    ck_assert_uint_ge(n, 4);
    r->len = (size_t)(n - 4);
    ck_assert_uint_le(r->len, sizeof(r->buf));
    if ((e = read_full(r->fd, r->buf, r->len, deadline)) != TROUPE_OK)
        return e;
    return troupe_wire_decode_frame(NULL, r->buf, r->len, &r->h, NULL, NULL);
}

int
raw_auth(struct raw *r)
{
    ck_assert_int_eq(r->h.type, TROUPE_FRAME_HELLO_ACK);
    troupe__transcript t = {.role = TROUPE__AUTH_DIALER,
                            .dialer = r->id,
                            .listener = r->h.sender,
                            .dialer_inc = r->inc,
                            .listener_inc = r->h.incarnation,
                            .dialer_nonce = r->nonce,
                            .listener_nonce = r->h.nonce,
                            .url = r->url,
                            .url_len = strlen(r->url)};
    troupe__proof pr = {0};
    if (r->auth != NULL)
        ck_assert_ok(troupe__auth_prove(r->auth, &t, &pr));
    troupe_wire_ctl c = {.type = TROUPE_FRAME_AUTH,
                         .sender = r->id,
                         .incarnation = r->inc,
                         .proof = pr.p};
    ck_assert_ok(troupe_wire_encode_ctl(&c, r->auth_frame,
                                        sizeof(r->auth_frame), &r->auth_len));
    return raw_send(r, r->auth_frame, r->auth_len);
}

troupe_err
raw_handshake(struct raw *r)
{
    if (raw_hello(r) != 0)
        return TROUPE_ECLOSED;
    troupe_err e = raw_recv(r, r->send_timeout_ms ? r->send_timeout_ms : 5000);
    if (e != TROUPE_OK)
        return e;
    if (r->h.type == TROUPE_FRAME_REFUSE)
        return r->h.refuse_err;
    return raw_auth(r) == 0 ? TROUPE_OK : TROUPE_ECLOSED;
}

void
raw_data(struct raw *r, troupe_msg *const *msgs, size_t n, uint64_t inc)
{
    size_t cap = troupe_wire_data_overhead(r->id, inc, n);
    for (size_t i = 0; i < n; i++)
        cap += troupe_wire_envelope_size(msgs[i]);
    uint8_t *buf = malloc(cap);
    size_t len;
    ck_assert_ok(troupe_wire_encode_data(
        r->id, inc, (const troupe_msg *const *)msgs, n, buf, cap, &len));
    ck_assert_int_eq(raw_send(r, buf, len), 0);
    free(buf);
}

/* ---- certificates ---- */

static bool
sh(const char *cmd)
{
    return system(cmd) == 0;
}

static bool
make_cert(const char *dir, const char *ca, const char *prefix, uint32_t id)
{
    char cmd[2048];
    snprintf(cmd, sizeof(cmd),
             "cd '%s' && "
             "openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 "
             "-nodes -keyout %s%u.key -out %s%u.csr "
             "-subj /CN=troupe-node-%u 2>/dev/null && "
             "printf 'subjectAltName=DNS:troupe-node-%u\\n' > %s%u.ext && "
             "openssl x509 -req -in %s%u.csr -CA %s.pem -CAkey %s.key "
             "-CAcreateserial -out %s%u.pem -days 2 -extfile %s%u.ext "
             "2>/dev/null",
             dir, prefix, id, prefix, id, id, id, prefix, id, prefix, id, ca,
             ca, prefix, id, prefix, id);
    return sh(cmd);
}

static bool
make_ca(const char *dir, const char *name)
{
    char cmd[1024];
    snprintf(cmd, sizeof(cmd),
             "cd '%s' && openssl req -x509 -newkey ec -pkeyopt "
             "ec_paramgen_curve:prime256v1 -nodes -keyout %s.key -out %s.pem "
             "-days 2 -subj /CN=troupe-test-%s 2>/dev/null",
             dir, name, name, name);
    return sh(cmd);
}

char *
certs_make(const uint32_t *ids, const char *tag)
{
    char *dir = ts_tempdir(tag);
    if (!make_ca(dir, "ca"))
        return NULL;
    for (const uint32_t *id = ids; *id != 0; id++)
        if (!make_cert(dir, "ca", "n", *id))
            return NULL;
    return dir;
}

bool
certs_make_other(const char *dir, uint32_t id)
{
    return make_ca(dir, "other-ca") && make_cert(dir, "other-ca", "other", id);
}

const char *
certs_path(const char *dir, const char *name, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s/%s", dir, name);
    return buf;
}

static bool
nng_settled(void *arg)
{
    nng_stat *st;
    if (nng_stats_get(&st) != 0)
        return false;
    bool empty = nng_stat_child(st) == NULL;
    nng_stats_free(st);
    return empty;
}

void
nng_end(void)
{
    ck_assert_msg(ts_wait_until(nng_settled, NULL, 10000),
                  "nng still tearing down after 10 s");
    nng_fini();
}

/* ---- memory ---- */

size_t
rss_bytes(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    ck_assert_ptr_nonnull(f);
    char line[256];
    size_t kb = 0;
    while (fgets(line, sizeof(line), f) != NULL)
        if (sscanf(line, "VmRSS: %zu kB", &kb) == 1)
            break;
    fclose(f);
    return kb * 1024;
}

/* ---- log capture ---- */

void
cap_fn(void *ctx, const troupe_log_record *rec)
{
    struct caplog *c = ctx;
    pthread_mutex_lock(&c->mu);
    int n = snprintf(c->buf + c->len, sizeof(c->buf) - c->len, "%s %s %s\n",
                     troupe_log_level_name(rec->level), rec->sys, rec->msg);
    if (n > 0 && (size_t)n < sizeof(c->buf) - c->len)
        c->len += (size_t)n;
    pthread_mutex_unlock(&c->mu);
}

struct cap_want {
    struct caplog *c;
    const char *line; /* a substring of one kept line */
};

static bool
cap_has(void *arg)
{
    struct cap_want *w = arg;
    pthread_mutex_lock(&w->c->mu);
    bool has = strstr(w->c->buf, w->line) != NULL;
    pthread_mutex_unlock(&w->c->mu);
    return has;
}

void
cap_expect(struct caplog *c, const char *line)
{
    struct cap_want w = {c, line};
    if (!ts_wait_until(cap_has, &w, 10000))
        ck_abort_msg("no log line \"%s\" in:\n%s", line, c->buf);
}

int
stderr_capture(FILE **file)
{
    fflush(stderr);
    *file = tmpfile();
    ck_assert_ptr_nonnull(*file);
    int old = dup(STDERR_FILENO);
    ck_assert_int_ge(old, 0);
    ck_assert_int_ge(dup2(fileno(*file), STDERR_FILENO), 0);
    return old;
}

long
stderr_restore(int old, FILE *file)
{
    fflush(stderr);
    dup2(old, STDERR_FILENO);
    close(old);
    long n = fseek(file, 0, SEEK_END) == 0 ? ftell(file) : -1;
    fclose(file);
    return n;
}
