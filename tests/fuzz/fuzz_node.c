#include "fuzz_node.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fuzz_support.h"
#include "troupe/internal/index.h"
#include "troupe/internal/queue.h"
#include "troupe/internal/tables.h"
#include "troupe/pack.h"

#define OK(expr)                                                               \
    do {                                                                       \
        troupe_err ok_e_ = (expr);                                             \
        FZ_CHECK(ok_e_ == TROUPE_OK, "%s: %s", #expr, troupe_err_name(ok_e_)); \
    } while (0)

/* ---- the peer: replies by corr ---- */

typedef struct seen {
    uint64_t corr;
    fz_reply r;
} seen;

static struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    seen *v;
    size_t n, cap;
} P = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, NULL, 0, 0};

static seen *
find_locked(uint64_t corr)
{
    for (size_t i = 0; i < P.n; i++)
        if (P.v[i].corr == corr)
            return &P.v[i];
    return NULL;
}

static troupe_err
peer_send(void *ctx, troupe_msg **m)
{
    (void)ctx;
    troupe_msg *x = *m;
    *m = NULL;
    pthread_mutex_lock(&P.mu);
    seen *s = find_locked(x->corr);
    if (s == NULL) {
        if (P.n == P.cap) {
            P.cap = P.cap ? 2 * P.cap : 64;
            P.v = realloc(P.v, P.cap * sizeof(*P.v));
            FZ_CHECK(P.v != NULL, "out of memory");
        }
        s = &P.v[P.n++];
        memset(s, 0, sizeof(*s));
        s->corr = x->corr;
        s->r.err = x->err;
        s->r.flags = x->flags;
        s->r.body = x->body != NULL ? troupe_body_retain(x->body) : NULL;
    }
    s->r.count++;
    pthread_cond_broadcast(&P.cv);
    pthread_mutex_unlock(&P.mu);
    troupe_msg_destroy(x);
    return TROUPE_OK;
}

static const troupe_remote_ops peer_ops = {.send = peer_send};

fz_reply
fz_node_wait(uint64_t corr, unsigned want, unsigned timeout_ms)
{
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += timeout_ms / 1000;
    dl.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (dl.tv_nsec >= 1000000000L) {
        dl.tv_sec++;
        dl.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&P.mu);
    seen *s;
    while (((s = find_locked(corr)) == NULL || s->r.count < want) &&
           pthread_cond_timedwait(&P.cv, &P.mu, &dl) == 0)
        ;
    s = find_locked(corr);
    fz_reply r = {0};
    if (s != NULL) {
        r = s->r;
        if (r.body != NULL)
            troupe_body_retain(r.body);
    }
    pthread_mutex_unlock(&P.mu);
    return r;
}

unsigned
fz_node_count(uint64_t corr)
{
    pthread_mutex_lock(&P.mu);
    seen *s = find_locked(corr);
    unsigned n = s != NULL ? s->r.count : 0;
    pthread_mutex_unlock(&P.mu);
    return n;
}

void
fz_node_forget(uint64_t below)
{
    pthread_mutex_lock(&P.mu);
    size_t j = 0;
    for (size_t i = 0; i < P.n; i++) {
        if (P.v[i].corr < below)
            troupe_body_release(P.v[i].r.body);
        else
            P.v[j++] = P.v[i];
    }
    P.n = j;
    pthread_mutex_unlock(&P.mu);
}

void
fz_node_clear(void)
{
    pthread_mutex_lock(&P.mu);
    for (size_t i = 0; i < P.n; i++)
        troupe_body_release(P.v[i].r.body);
    P.n = 0;
    pthread_mutex_unlock(&P.mu);
}

/* ---- the node ---- */

static const troupe_index_field name_f = {"name", TROUPE_FIELD_STRING};
static const troupe_index_field age_f = {"age", TROUPE_FIELD_INT};
static const troupe_index_field email_f = {"email", TROUPE_FIELD_STRING};

static void
put_row(fz_node *n, const char *table, int i)
{
    char key[16], name[16], email[32];
    snprintf(key, sizeof(key), "k%02d", i);
    snprintf(name, sizeof(name), "n%d", i % 7);
    snprintf(email, sizeof(email), "e%d@x", i);
    troupe_packer p;
    troupe_pack_init(&p);
    troupe_pack_map(&p, 3);
    troupe_pack_cstr(&p, "name");
    troupe_pack_cstr(&p, name);
    troupe_pack_cstr(&p, "age");
    troupe_pack_int(&p, 20 + i % 5);
    troupe_pack_cstr(&p, "email");
    troupe_pack_cstr(&p, email);
    size_t len;
    const void *d = troupe_pack_data(&p, &len);
    OK(troupe_table_upsert_wait(n->tables, table, key, strlen(key), d, len,
                                NULL));
    troupe_pack_fini(&p);
}

fz_node *
fz_node_open(void)
{
    static fz_node n;
    char *dir = fz_tempdir("node");
    troupe_runtime_opts o = {.schedulers = 2, .workers = 2};
    OK(troupe_runtime_create(&n.rt, &o));
    troupe_runtime_set_remote(n.rt, &peer_ops, NULL);
    troupe_db_opts dbo;
    troupe_db_opts_init(&dbo);
    dbo.sync = false;
    OK(troupe_db_open(dir, &dbo, &n.db));
    OK(troupe_commit_create(n.db, NULL, &n.commit));
    /* lives as long as the node: the fuzz process never closes it */
    static troupe_catalog *cat;
    troupe_catalog_opts co = {.rt = n.rt, .db = n.db};
    OK(troupe_catalog_open(&co, &cat));
    troupe_tables_opts to = {.catalog = cat, .commit = n.commit};
    OK(troupe_tables_open(&to, &n.tables));
    troupe_index_spec t_ix[2] = {
        {.name = "by_name", .fields = &name_f, .n_fields = 1},
        {.name = "by_age", .fields = &age_f, .n_fields = 1}};
    OK(troupe_tables_create_wait(n.tables, "t", t_ix, 2));
    troupe_index_spec u_ix = {
        .name = "by_email", .unique = true, .fields = &email_f, .n_fields = 1};
    OK(troupe_tables_create_wait(n.tables, "u", &u_ix, 1));
    for (int i = 0; i < 24; i++) {
        put_row(&n, "t", i);
        put_row(&n, "u", i);
    }
    troupe_queues_opts qo = {.catalog = cat, .commit = n.commit};
    OK(troupe_queues_open(&qo, &n.qs));
    troupe_queue_spec qs = {"q", 2, 0, 0};
    OK(troupe_queues_create_wait(n.qs, &qs));
    for (int i = 0; i < 16; i++) {
        char id[16];
        snprintf(id, sizeof(id), "e%d", i);
        troupe_queue_event ev = {.id = id,
                                 .id_len = strlen(id),
                                 .key = id,
                                 .key_len = strlen(id),
                                 .payload = "\x07",
                                 .payload_len = 1,
                                 .time_ms = 1000 + i,
                                 .owner_kind = i % 2 ? "user" : NULL,
                                 .owner_kind_len = i % 2 ? 4 : 0,
                                 .owner_id = i % 2 ? id : NULL,
                                 .owner_id_len = i % 2 ? strlen(id) : 0};
        OK(troupe_queue_publish_wait(n.qs, "q", &ev, TROUPE_SYNC_OFF));
    }
    troupe_kv_opts ko = {.db = n.db, .commit = n.commit, .cf = "kv"};
    OK(troupe_kv_spawn(n.rt, &ko, NULL, &n.kv));
    troupe_ttl_opts tto = {
        .rt = n.rt, .tables = n.tables, .queues = n.qs, .interval_ms = 3600000};
    OK(troupe_ttl_create(&tto, &n.ttl));
    n.ttl_addr = troupe_ttl_addr(n.ttl);
    troupe_cf *cf;
    uint32_t tmo;
    troupe_runtime *rt;
    OK(troupe__tables_lookup_id(n.tables, "t", &n.table_t, &cf, &n.t_id));
    OK(troupe__tables_lookup_cf(n.tables, "u", &n.table_u, &cf));
    OK(troupe__tables_lookup_index(n.tables, "t", &n.index_t, &tmo, &rt));
    tindex_env env;
    OK(troupe__tables_index_env(n.tables, "t", "by_name", &env));
    n.by_name_id = troupe_index_def_id(env.def);
    troupe__tschema_release(env.schema);
    OK(troupe__tables_index_env(n.tables, "t", "by_age", &env));
    n.by_age_id = troupe_index_def_id(env.def);
    troupe__tschema_release(env.schema);
    tq_queue *q = NULL;
    OK(troupe__tq_find(n.qs, "q", &q));
    n.part[0] = q->parts[0];
    n.part[1] = q->parts[1];
    n.q_id = q->id;
    troupe__tq_release(q);
    return &n;
}
