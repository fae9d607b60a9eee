/*
 * The coordinator of a node (troupe/coordinator.h) behind request ids:
 * saga, tcc and message submits, the operator calls and query, each a
 * request that completes as a completion record; and the barrier inside
 * an ABI transaction.
 *
 * Design. Every call checks what the host sent (the gid, the msgpack
 * shape of steps and options, the lengths) before anything starts, so a
 * refused call submits nothing; it then copies what it needs into a job
 * and returns. The jobs call the coordinator's blocking forms (its
 * reads, query and list, have no other yet; its submits and operator
 * calls do, and moving them off these threads is the next step), so the
 * jobs run on COORD_THREADS threads of the node's own, never on a troupe
 * thread
 * (a blocked scheduler or storage worker could be the one the commit
 * needs) and never on the host's. Each job posts its completion exactly
 * once; close waits for every job (they are requests) before it joins
 * the threads and stops the coordinator, which happens before the tables
 * stop.
 *
 * The barrier needs no thread: troupe_barrier_check is asynchronous and
 * its callback posts the completion.
 */
#include <string.h>

#include "node.h"
#include "troupe/alloc.h"
#include "troupe/internal/runtime.h"
#include "troupe/workflow.h"

/* troupe/coord.h's bounds (the coordinator checks them again) */
#define STEPS_MAX TROUPE_GTX_STEPS_MAX
#define PAYLOAD_MAX TROUPE_GTX_PAYLOAD_MAX

typedef enum {
    CJ_SAGA,
    CJ_TCC_PREPARE,
    CJ_TCC_REGISTER,
    CJ_MSG_PREPARE,
    CJ_SUBMIT,
    CJ_ABORT,
    CJ_RETRY,
    CJ_FORCE_STOP,
    CJ_QUERY,
    CJ_LIST,
    CJ_WF_SUBMIT,
    CJ_AWAKE_RESOLVE,
    CJ_AWAKE_REJECT
} cj_kind;

typedef struct coord_job {
    struct coord_job *next;
    cj_kind kind;
    abi_req *r;
    char gid[TROUPE_GID_MAX];
    size_t gid_len;
    /* the host's msgpack, copied; payloads point into it */
    void *buf;
    msgpack_unpacked up;
    bool unpacked;
    char **names; /* target names, NUL-terminated copies */
    size_t nnames;
    troupe_saga_step *steps; /* CJ_SAGA */
    troupe_gtx_call *calls;  /* CJ_MSG_PREPARE: steps; CJ_TCC_REGISTER: 2 */
    size_t n;
    troupe_saga_opts o;
    uint64_t after[STEPS_MAX];
    troupe_gtx_call query; /* CJ_MSG_PREPARE */
    int64_t grace_ms;
    char reason[TROUPE_GTX_ABORT_REASON_MAX + 1]; /* CJ_ABORT */
    troupe_gtx_filter filter;                     /* CJ_LIST */
    char list_after[TROUPE_GID_MAX + 1];          /* CJ_LIST: "" none */
    size_t limit;
    /* CJ_WF_SUBMIT: the workflow's name and input (in buf); CJ_AWAKE_*:
     * the awakeable's id and the payload (in buf) */
    char wf_name[TROUPE_TARGET_NAME_MAX + 1];
    char awake_id[TROUPE_AWAKEABLE_ID_MAX + 1];
    size_t buf_len;
} coord_job;

static void
job_free(coord_job *j)
{
    if (j == NULL)
        return;
    if (j->unpacked)
        msgpack_unpacked_destroy(&j->up);
    for (size_t i = 0; i < j->nnames; i++)
        troupe_free(j->names[i]);
    troupe_free(j->names);
    troupe_free(j->steps);
    troupe_free(j->calls);
    troupe_free(j->buf);
    troupe_free(j);
}

/* ---- query's body ---- */

static void
pack_str(msgpack_packer *pk, const char *s)
{
    size_t n = strlen(s);
    msgpack_pack_str(pk, n);
    msgpack_pack_str_body(pk, s, n);
}

static void
pack_kv_str(msgpack_packer *pk, const char *k, const char *v)
{
    pack_str(pk, k);
    pack_str(pk, v);
}

static void
pack_kv_int(msgpack_packer *pk, const char *k, int64_t v)
{
    pack_str(pk, k);
    msgpack_pack_int64(pk, v);
}

static const char *
status_name(troupe_gtx_status s)
{
    static const char *const names[] = {"",         "prepared", "submitted",
                                        "aborting", "succeed",  "failed"};
    return s >= 1 && s <= 5 ? names[s] : "unknown";
}

static const char *
state_name(troupe_gtx_call_state s)
{
    static const char *const names[] = {"", "todo", "dispatched", "succeeded",
                                        "failed"};
    return s >= 1 && s <= 4 ? names[s] : "unknown";
}

static const char *
outcome_name(troupe_outcome o)
{
    static const char *const names[] = {"", "success", "failure", "ongoing",
                                        "unknown"};
    return o >= 1 && o <= 4 ? names[o] : NULL;
}

/* d as bindings/c/README.md's "gtx query" body. */
static troupe_err
abi_pack_detail(const troupe_gtx_detail *d, msgpack_sbuffer *sb)
{
    msgpack_packer pk;
    msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
    const troupe_gtx_info *in = &d->info;
    msgpack_pack_map(&pk, 11);
    const char *mode = troupe_gtx_mode_name(in->mode);
    pack_kv_str(&pk, "mode", mode != NULL ? mode : "unknown");
    pack_kv_str(&pk, "status", status_name(in->status));
    pack_kv_str(&pk, "reason", in->reason);
    pack_kv_int(&pk, "steps", in->steps);
    pack_kv_int(&pk, "attempts", in->attempts);
    pack_kv_int(&pk, "created_ms", in->created_ms);
    pack_kv_int(&pk, "updated_ms", in->updated_ms);
    pack_kv_int(&pk, "finished_ms", in->finished_ms);
    pack_kv_int(&pk, "next_due_ms", d->next_due_ms);
    pack_str(&pk, "hold"); /* why a workflow does not run now */
    if (in->hold == TROUPE_WF_DIVERGED)
        pack_str(&pk, "diverged");
    else if (in->hold == TROUPE_WF_AWAITING)
        pack_str(&pk, "awaiting");
    else
        msgpack_pack_nil(&pk);
    pack_str(&pk, "branches");
    msgpack_pack_array(&pk, d->n_branches);
    for (size_t i = 0; i < d->n_branches; i++) {
        const troupe_gtx_branch *b = &d->branches[i];
        msgpack_pack_map(&pk, b->kind != NULL ? 5 : 2);
        pack_kv_str(&pk, "id", b->id);
        if (b->kind != NULL) { /* a workflow's record */
            pack_kv_str(&pk, "kind", b->kind);
            pack_kv_str(&pk, "name", b->name);
            pack_kv_int(&pk, "version", b->version);
        }
        pack_str(&pk, "ops");
        msgpack_pack_array(&pk, b->n_ops);
        for (size_t k = 0; k < b->n_ops; k++) {
            const troupe_gtx_op *o = &b->ops[k];
            msgpack_pack_map(&pk, 5);
            pack_kv_str(&pk, "op", o->op);
            pack_kv_str(&pk, "target", o->target);
            pack_kv_str(&pk, "state", state_name(o->state));
            pack_kv_int(&pk, "attempts", o->attempts);
            pack_str(&pk, "last");
            const char *l = outcome_name(o->last);
            if (l != NULL)
                pack_str(&pk, l);
            else
                msgpack_pack_nil(&pk);
        }
    }
    return sb->data != NULL || sb->size == 0 ? TROUPE_OK : TROUPE_ENOMEM;
}

/* p as bindings/c/README.md's "gtx list" body. */
static troupe_err
abi_pack_page(const troupe_gtx_page *p, msgpack_sbuffer *sb)
{
    msgpack_packer pk;
    msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 3);
    pack_str(&pk, "items");
    msgpack_pack_array(&pk, p->n);
    for (size_t i = 0; i < p->n; i++) {
        const troupe_gtx_info *in = &p->items[i].info;
        const char *mode = troupe_gtx_mode_name(in->mode);
        msgpack_pack_map(&pk, 9);
        pack_kv_str(&pk, "gid", p->items[i].gid);
        pack_kv_str(&pk, "mode", mode != NULL ? mode : "unknown");
        pack_kv_str(&pk, "status", status_name(in->status));
        pack_kv_str(&pk, "reason", in->reason);
        pack_kv_int(&pk, "steps", in->steps);
        pack_kv_int(&pk, "attempts", in->attempts);
        pack_kv_int(&pk, "created_ms", in->created_ms);
        pack_kv_int(&pk, "updated_ms", in->updated_ms);
        pack_kv_int(&pk, "finished_ms", in->finished_ms);
    }
    pack_str(&pk, "cursor");
    if (p->cursor[0] != '\0')
        pack_str(&pk, p->cursor);
    else
        msgpack_pack_nil(&pk);
    pack_str(&pk, "more");
    if (p->more)
        msgpack_pack_true(&pk);
    else
        msgpack_pack_false(&pk);
    return sb->data != NULL || sb->size == 0 ? TROUPE_OK : TROUPE_ENOMEM;
}

/* ---- the threads ---- */

static void
job_run(troupe_abi *n, coord_job *j)
{
    troupe_coord *c = n->coord;
    troupe_err e = TROUPE_OK;
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    switch (j->kind) {
    case CJ_SAGA:
        e = troupe_saga_submit_wait(c, j->gid, j->gid_len, j->steps, j->n,
                                    &j->o);
        break;
    case CJ_TCC_PREPARE:
        e = troupe_tcc_prepare_wait(c, j->gid, j->gid_len);
        break;
    case CJ_TCC_REGISTER: {
        char bid[8] = {0};
        e = troupe_tcc_register_wait(c, j->gid, j->gid_len, &j->calls[0],
                                     &j->calls[1], bid);
        if (e == TROUPE_OK) {
            size_t bl = strlen(bid);
            msgpack_pack_str(&pk, bl);
            msgpack_pack_str_body(&pk, bid, bl);
        }
        break;
    }
    case CJ_MSG_PREPARE:
        e = troupe_msg_prepare_wait(c, j->gid, j->gid_len, j->calls, j->n,
                                    &j->query, j->grace_ms);
        break;
    case CJ_SUBMIT:
        e = troupe_gtx_submit_wait(c, j->gid, j->gid_len);
        break;
    case CJ_ABORT:
        e = troupe_gtx_abort_wait(c, j->gid, j->gid_len, j->reason);
        break;
    case CJ_RETRY:
        e = troupe_gtx_retry_wait(c, j->gid, j->gid_len);
        break;
    case CJ_FORCE_STOP:
        e = troupe_gtx_force_stop_wait(c, j->gid, j->gid_len);
        break;
    case CJ_LIST: {
        troupe_gtx_page *p = NULL;
        e = troupe_gtx_list_wait(
            c, &j->filter, j->list_after[0] != '\0' ? j->list_after : NULL,
            j->limit, &p);
        if (e == TROUPE_OK) {
            e = abi_pack_page(p, &sb);
            troupe_gtx_page_destroy(p);
        }
        break;
    }
    case CJ_WF_SUBMIT:
        e = troupe_workflow_submit_wait(c, j->gid, j->gid_len, j->wf_name,
                                        j->buf, j->buf_len);
        break;
    case CJ_AWAKE_RESOLVE:
        e = troupe_awakeable_resolve_wait(c, j->awake_id, strlen(j->awake_id),
                                          j->buf, j->buf_len);
        break;
    case CJ_AWAKE_REJECT:
        e = troupe_awakeable_reject_wait(c, j->awake_id, strlen(j->awake_id),
                                         j->buf, j->buf_len);
        break;
    case CJ_QUERY: {
        troupe_gtx_detail *d = NULL;
        e = troupe_gtx_detail_wait(c, j->gid, j->gid_len, &d);
        if (e == TROUPE_OK) {
            e = abi_pack_detail(d, &sb);
            troupe_gtx_detail_destroy(d);
        }
        break;
    }
    }
    if (e != TROUPE_OK) {
        /* the body of a failed request: the coordinator's message */
        const char *why = troupe_errmsg(e);
        size_t wl = strlen(why);
        msgpack_sbuffer_clear(&sb);
        msgpack_pack_str(&pk, wl);
        msgpack_pack_str_body(&pk, why, wl);
    }
    abi_req_done(j->r, e, sb.data, sb.size);
    msgpack_sbuffer_destroy(&sb);
    job_free(j);
}

static void *
coord_thread(void *arg)
{
    troupe_abi *n = arg;
    pthread_mutex_lock(&n->mu);
    for (;;) {
        while (n->jobs == NULL && !n->jobs_stop)
            pthread_cond_wait(&n->jobs_cond, &n->mu);
        coord_job *j = n->jobs;
        if (j == NULL)
            break;
        n->jobs = j->next;
        if (n->jobs == NULL)
            n->jobs_tail = NULL;
        pthread_mutex_unlock(&n->mu);
        job_run(n, j);
        pthread_mutex_lock(&n->mu);
    }
    pthread_mutex_unlock(&n->mu);
    return NULL;
}

troupe_err
abi_coord_open(troupe_abi *n)
{
    troupe_err e = troupe_barrier_create_wait(n->tables);
    if (e != TROUPE_OK)
        return e;
    troupe_coord_opts o = n->coord_opts;
    o.rt = n->rt;
    o.tables = n->tables;
    if (o.sync == TROUPE_SYNC_DEFAULT) /* the node's: OFF, or synced */
        o.sync = n->sync;
    if ((e = troupe_coord_open_wait(&o, &n->coord)) != TROUPE_OK)
        return e;
    pthread_cond_init(&n->jobs_cond, NULL);
    for (; n->nthreads < COORD_THREADS; n->nthreads++)
        if (pthread_create(&n->threads[n->nthreads], NULL, coord_thread, n) !=
            0)
            break;
    if (n->nthreads == 0) {
        abi_coord_close(n);
        return troupe__errf(TROUPE_ESYS, "start: no coordinator thread");
    }
    return TROUPE_OK;
}

void
abi_coord_close(troupe_abi *n)
{
    if (n->coord == NULL)
        return;
    pthread_mutex_lock(&n->mu);
    n->jobs_stop = true;
    pthread_cond_broadcast(&n->jobs_cond);
    pthread_mutex_unlock(&n->mu);
    for (size_t i = 0; i < n->nthreads; i++)
        pthread_join(n->threads[i], NULL);
    n->nthreads = 0;
    pthread_cond_destroy(&n->jobs_cond);
    (void)troupe_coord_stop_wait(n->coord);
    troupe_coord_destroy(n->coord);
    n->coord = NULL;
}

int
troupe_abi_coord_options(troupe_abi *n, uint32_t shards, uint32_t retry_min_ms,
                         uint32_t retry_max_ms, int32_t sync)
{
    abi_clear();
    if (n == NULL)
        return abi_ret(troupe__errf(TROUPE_EINVAL, "coord options: NULL node"));
    if (shards > TROUPE_COORD_SHARDS_MAX || sync < 0 || sync > 2 ||
        (retry_min_ms != 0 && retry_max_ms != 0 && retry_min_ms > retry_max_ms))
        return abi_ret(troupe__errf(TROUPE_EINVAL,
                                    "coord options: shards at most %d, sync "
                                    "0..2, retry_min at most retry_max",
                                    TROUPE_COORD_SHARDS_MAX));
    pthread_mutex_lock(&n->mu);
    troupe_err e = TROUPE_OK;
    if (n->state != NODE_OPEN)
        e = troupe__errf(TROUPE_ESTATE, "coord options: only before start");
    else {
        n->coord_opts.shards = shards;
        n->coord_opts.retry_min_ms = retry_min_ms;
        n->coord_opts.retry_max_ms = retry_max_ms;
        n->coord_opts.sync = (troupe_sync)sync;
    }
    pthread_mutex_unlock(&n->mu);
    return abi_ret(e);
}

/* ---- checking what the host sent ---- */

static troupe_err
gid_check(const char *call, const char *gid, size_t len)
{
    if (gid == NULL || !troupe_gid_valid(gid, len))
        return troupe__errf(TROUPE_EINVAL,
                            "%s: the gid must be 1..%d bytes of "
                            "[A-Za-z0-9_.:-]",
                            call, TROUPE_GID_MAX);
    return TROUPE_OK;
}

static coord_job *
job_alloc(cj_kind k)
{
    coord_job *j = troupe_calloc(1, sizeof(*j));
    if (j != NULL)
        j->kind = k;
    return j;
}

/* The job of request `call` for gid on node n, once both pass their
 * checks (EINVAL), or ENOMEM. */
static troupe_err
job_new(troupe_abi *n, const char *call, cj_kind k, const char *gid,
        size_t gid_len, coord_job **out)
{
    *out = NULL;
    if (n == NULL)
        return troupe__errf(TROUPE_EINVAL, "%s: NULL node", call);
    troupe_err e = gid_check(call, gid, gid_len);
    if (e != TROUPE_OK)
        return e;
    coord_job *j = job_alloc(k);
    if (j == NULL)
        return TROUPE_ENOMEM;
    memcpy(j->gid, gid, gid_len);
    j->gid_len = gid_len;
    *out = j;
    return TROUPE_OK;
}

/* Copies buf into j and unpacks exactly one object from it. */
static troupe_err
job_unpack(coord_job *j, const char *call, const void *buf, size_t len,
           msgpack_object *out)
{
    if (buf == NULL || len == 0)
        return troupe__errf(TROUPE_EINVAL, "%s: no msgpack given", call);
    if ((j->buf = troupe_malloc(len)) == NULL)
        return TROUPE_ENOMEM;
    memcpy(j->buf, buf, len);
    msgpack_unpacked_init(&j->up);
    j->unpacked = true;
    size_t off = 0;
    if (msgpack_unpack_next(&j->up, j->buf, len, &off) !=
            MSGPACK_UNPACK_SUCCESS ||
        off != len)
        return troupe__errf(TROUPE_EPROTO, "%s: not one msgpack object", call);
    *out = j->up.data;
    return TROUPE_OK;
}

/* A NUL-terminated copy of a msgpack str, kept by j. */
static troupe_err
job_name(coord_job *j, const char *call, const msgpack_object *o,
         const char **out)
{
    if (o->type != MSGPACK_OBJECT_STR || o->via.str.size == 0 ||
        o->via.str.size > TROUPE_TARGET_NAME_MAX ||
        memchr(o->via.str.ptr, '\0', o->via.str.size) != NULL)
        return troupe__errf(TROUPE_EINVAL,
                            "%s: a target name is a str of 1..%d bytes", call,
                            TROUPE_TARGET_NAME_MAX);
    if (j->nnames % 16 == 0) {
        char **a = troupe_realloc(j->names, (j->nnames + 16) * sizeof(*a));
        if (a == NULL)
            return TROUPE_ENOMEM;
        j->names = a;
    }
    char *s = troupe_malloc(o->via.str.size + 1);
    if (s == NULL)
        return TROUPE_ENOMEM;
    memcpy(s, o->via.str.ptr, o->via.str.size);
    s[o->via.str.size] = '\0';
    j->names[j->nnames++] = s;
    *out = s;
    return TROUPE_OK;
}

/* [target str, payload bin|str] into k. */
static troupe_err
job_call(coord_job *j, const char *call, const msgpack_object *o,
         troupe_gtx_call *k)
{
    if (o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size != 2)
        return troupe__errf(TROUPE_EINVAL,
                            "%s: a call is [target str, payload bin]", call);
    const msgpack_object *p = &o->via.array.ptr[1];
    if (p->type == MSGPACK_OBJECT_BIN) {
        k->payload = p->via.bin.ptr;
        k->payload_len = p->via.bin.size;
    } else if (p->type == MSGPACK_OBJECT_STR) {
        k->payload = p->via.str.ptr;
        k->payload_len = p->via.str.size;
    } else if (p->type == MSGPACK_OBJECT_NIL) {
        k->payload = NULL;
        k->payload_len = 0;
    } else
        return troupe__errf(TROUPE_EINVAL,
                            "%s: a call's payload is bin, str or nil", call);
    if (k->payload_len > PAYLOAD_MAX)
        return troupe__errf(TROUPE_EINVAL,
                            "%s: a payload of %zu bytes; at "
                            "most %u",
                            call, k->payload_len, PAYLOAD_MAX);
    return job_name(j, call, &o->via.array.ptr[0], &k->target);
}

static bool
key_is(const msgpack_object_kv *kv, const char *k)
{
    size_t n = strlen(k);
    return kv->key.type == MSGPACK_OBJECT_STR && kv->key.via.str.size == n &&
           memcmp(kv->key.via.str.ptr, k, n) == 0;
}

static bool
uint_of(const msgpack_object *o, uint64_t max, uint64_t *out)
{
    if (o->type != MSGPACK_OBJECT_POSITIVE_INTEGER || o->via.u64 > max)
        return false;
    *out = o->via.u64;
    return true;
}

static troupe_err
saga_opts(coord_job *j, const msgpack_object *m)
{
    const char *call = "saga submit";
    if (m->type != MSGPACK_OBJECT_MAP)
        return troupe__errf(TROUPE_EINVAL, "%s: options are a map", call);
    for (uint32_t i = 0; i < m->via.map.size; i++) {
        const msgpack_object_kv *kv = &m->via.map.ptr[i];
        uint64_t v = 0;
        if (key_is(kv, "timeout_to_fail_ms") &&
            uint_of(&kv->val, INT64_MAX, &v))
            j->o.timeout_to_fail_ms = (int64_t)v;
        else if (key_is(kv, "retry_limit") && uint_of(&kv->val, UINT32_MAX, &v))
            j->o.retry_limit = (uint32_t)v;
        else if (key_is(kv, "concurrent") &&
                 kv->val.type == MSGPACK_OBJECT_BOOLEAN)
            j->o.concurrent = kv->val.via.boolean;
        else if (key_is(kv, "after") && kv->val.type == MSGPACK_OBJECT_NIL)
            j->o.after = NULL;
        else if (key_is(kv, "after") && kv->val.type == MSGPACK_OBJECT_ARRAY &&
                 kv->val.via.array.size == j->n) {
            for (uint32_t s = 0; s < j->n; s++)
                if (!uint_of(&kv->val.via.array.ptr[s], UINT64_MAX,
                             &j->after[s]))
                    return troupe__errf(TROUPE_EINVAL,
                                        "%s: after holds one u64 mask per "
                                        "step",
                                        call);
            j->o.after = j->after;
        } else
            return troupe__errf(
                TROUPE_EINVAL,
                "%s: options are timeout_to_fail_ms (int >= 0), "
                "retry_limit (u32), concurrent (bool), after (one u64 "
                "per step, or nil)",
                call);
    }
    return TROUPE_OK;
}

static troupe_err
saga_parse(coord_job *j, const void *steps, size_t slen, const void *opts,
           size_t olen)
{
    const char *call = "saga submit";
    msgpack_object a;
    troupe_err e = job_unpack(j, call, steps, slen, &a);
    if (e != TROUPE_OK)
        return e;
    if (a.type != MSGPACK_OBJECT_ARRAY || a.via.array.size == 0 ||
        a.via.array.size > STEPS_MAX)
        return troupe__errf(TROUPE_EINVAL,
                            "%s: steps are an array of 1..%d maps", call,
                            STEPS_MAX);
    j->n = a.via.array.size;
    if ((j->steps = troupe_calloc(j->n, sizeof(*j->steps))) == NULL)
        return TROUPE_ENOMEM;
    for (size_t i = 0; i < j->n; i++) {
        const msgpack_object *s = &a.via.array.ptr[i];
        if (s->type != MSGPACK_OBJECT_MAP)
            return troupe__errf(TROUPE_EINVAL, "%s: step %zu is not a map",
                                call, i);
        bool action = false;
        for (uint32_t k = 0; k < s->via.map.size; k++) {
            const msgpack_object_kv *kv = &s->via.map.ptr[k];
            if (key_is(kv, "action")) {
                e = job_call(j, call, &kv->val, &j->steps[i].action);
                action = true;
            } else if (key_is(kv, "compensate")) {
                if (kv->val.type != MSGPACK_OBJECT_NIL)
                    e = job_call(j, call, &kv->val, &j->steps[i].compensate);
            } else
                e = troupe__errf(TROUPE_EINVAL,
                                 "%s: a step is {\"action\": call, "
                                 "\"compensate\": call or nil}",
                                 call);
            if (e != TROUPE_OK)
                return e;
        }
        if (!action)
            return troupe__errf(TROUPE_EINVAL, "%s: step %zu has no action",
                                call, i);
    }
    if (opts == NULL || olen == 0)
        return TROUPE_OK;
    /* the options: a second buffer, unpacked into a zone of its own */
    msgpack_unpacked ou;
    msgpack_unpacked_init(&ou);
    size_t off = 0;
    if (msgpack_unpack_next(&ou, opts, olen, &off) != MSGPACK_UNPACK_SUCCESS ||
        off != olen)
        e = troupe__errf(TROUPE_EPROTO,
                         "%s: options are not one msgpack "
                         "object",
                         call);
    else
        e = saga_opts(j, &ou.data);
    msgpack_unpacked_destroy(&ou);
    return e;
}

/* Queues j as request id req of n, or refuses it (j freed). */
static int
job_post(troupe_abi *n, uint64_t req, const char *call, coord_job *j,
         troupe_err e)
{
    if (e != TROUPE_OK) {
        job_free(j);
        return abi_ret(e);
    }
    if ((e = abi_req_begin(n, req, call, &j->r)) != TROUPE_OK) {
        job_free(j);
        return abi_ret(e);
    }
    abi_req *r = j->r; /* j is the thread's once queued */
    pthread_mutex_lock(&n->mu);
    if (n->coord == NULL)
        e = troupe__errf(TROUPE_ESTATE, "%s: no coordinator", call);
    else {
        if (n->jobs_tail != NULL)
            n->jobs_tail->next = j;
        else
            n->jobs = j;
        n->jobs_tail = j;
        pthread_cond_signal(&n->jobs_cond);
    }
    pthread_mutex_unlock(&n->mu);
    if (e != TROUPE_OK)
        job_free(j);
    return abi_req_end(n, r, e);
}

/* ---- the requests ---- */

int
troupe_abi_saga_submit(troupe_abi *n, uint64_t req, const char *gid,
                       size_t gid_len, const void *steps, size_t slen,
                       const void *opts, size_t olen)
{
    abi_clear();
    const char *call = "saga submit";
    coord_job *j = NULL;
    troupe_err e = job_new(n, call, CJ_SAGA, gid, gid_len, &j);
    if (e != TROUPE_OK)
        return abi_ret(e);
    return job_post(n, req, call, j, saga_parse(j, steps, slen, opts, olen));
}

int
troupe_abi_tcc_prepare(troupe_abi *n, uint64_t req, const char *gid,
                       size_t gid_len)
{
    abi_clear();
    const char *call = "tcc prepare";
    coord_job *j = NULL;
    troupe_err e = job_new(n, call, CJ_TCC_PREPARE, gid, gid_len, &j);
    if (e != TROUPE_OK)
        return abi_ret(e);
    return job_post(n, req, call, j, TROUPE_OK);
}

int
troupe_abi_tcc_register(troupe_abi *n, uint64_t req, const char *gid,
                        size_t gid_len, const void *calls, size_t len)
{
    abi_clear();
    const char *call = "tcc register";
    coord_job *j = NULL;
    troupe_err e = job_new(n, call, CJ_TCC_REGISTER, gid, gid_len, &j);
    if (e != TROUPE_OK)
        return abi_ret(e);
    msgpack_object a;
    if ((e = job_unpack(j, call, calls, len, &a)) == TROUPE_OK) {
        if (a.type != MSGPACK_OBJECT_ARRAY || a.via.array.size != 2)
            e = troupe__errf(TROUPE_EINVAL,
                             "%s: calls are [confirm call, cancel call]", call);
        else if ((j->calls = troupe_calloc(2, sizeof(*j->calls))) == NULL)
            e = TROUPE_ENOMEM;
        for (uint32_t i = 0; i < 2 && e == TROUPE_OK; i++)
            e = job_call(j, call, &a.via.array.ptr[i], &j->calls[i]);
    }
    return job_post(n, req, call, j, e);
}

int
troupe_abi_msg_prepare(troupe_abi *n, uint64_t req, const char *gid,
                       size_t gid_len, const void *steps, size_t slen,
                       const char *query_target, int64_t grace_ms)
{
    abi_clear();
    const char *call = "msg prepare";
    coord_job *j = NULL;
    troupe_err e = job_new(n, call, CJ_MSG_PREPARE, gid, gid_len, &j);
    if (e != TROUPE_OK)
        return abi_ret(e);
    size_t ql = query_target != NULL ? strlen(query_target) : 0;
    if (ql == 0 || ql > TROUPE_TARGET_NAME_MAX || grace_ms < 0)
        return job_post(n, req, call, j,
                        troupe__errf(TROUPE_EINVAL,
                                     "%s: a query target of 1..%d bytes and "
                                     "a grace >= 0",
                                     call, TROUPE_TARGET_NAME_MAX));
    j->grace_ms = grace_ms;
    msgpack_object a;
    if ((e = job_unpack(j, call, steps, slen, &a)) == TROUPE_OK) {
        if (a.type != MSGPACK_OBJECT_ARRAY || a.via.array.size == 0 ||
            a.via.array.size > STEPS_MAX)
            e = troupe__errf(TROUPE_EINVAL,
                             "%s: steps are an array of 1..%d calls", call,
                             STEPS_MAX);
        else if ((j->calls = troupe_calloc(a.via.array.size,
                                           sizeof(*j->calls))) == NULL)
            e = TROUPE_ENOMEM;
        else
            j->n = a.via.array.size;
        for (size_t i = 0; i < j->n && e == TROUPE_OK; i++)
            e = job_call(j, call, &a.via.array.ptr[i], &j->calls[i]);
    }
    if (e == TROUPE_OK) {
        msgpack_object q = {
            .type = MSGPACK_OBJECT_STR,
            .via.str = {.ptr = query_target, .size = (uint32_t)ql}};
        e = job_name(j, call, &q, &j->query.target);
    }
    return job_post(n, req, call, j, e);
}

static int
gid_op(troupe_abi *n, uint64_t req, const char *gid, size_t gid_len, cj_kind k,
       const char *call, const char *reason)
{
    coord_job *j = NULL;
    troupe_err e = job_new(n, call, k, gid, gid_len, &j);
    if (e != TROUPE_OK)
        return abi_ret(e);
    size_t rl = reason != NULL ? strlen(reason) : 0;
    if (rl > 0 && !troupe_gtx_abort_reason_valid(reason, rl))
        return job_post(n, req, call, j,
                        troupe__errf(TROUPE_EINVAL,
                                     "%s: a reason is 1..%d bytes of UTF-8 "
                                     "without control characters",
                                     call, TROUPE_GTX_ABORT_REASON_MAX));
    if (rl > 0)
        memcpy(j->reason, reason, rl + 1);
    return job_post(n, req, call, j, TROUPE_OK);
}

int
troupe_abi_gtx_submit(troupe_abi *n, uint64_t req, const char *gid,
                      size_t gid_len)
{
    abi_clear();
    return gid_op(n, req, gid, gid_len, CJ_SUBMIT, "gtx submit", NULL);
}

int
troupe_abi_gtx_abort(troupe_abi *n, uint64_t req, const char *gid,
                     size_t gid_len, const char *reason)
{
    abi_clear();
    return gid_op(n, req, gid, gid_len, CJ_ABORT, "gtx abort", reason);
}

int
troupe_abi_gtx_retry(troupe_abi *n, uint64_t req, const char *gid,
                     size_t gid_len)
{
    abi_clear();
    return gid_op(n, req, gid, gid_len, CJ_RETRY, "gtx retry", NULL);
}

int
troupe_abi_gtx_force_stop(troupe_abi *n, uint64_t req, const char *gid,
                          size_t gid_len)
{
    abi_clear();
    return gid_op(n, req, gid, gid_len, CJ_FORCE_STOP, "gtx force stop", NULL);
}

int
troupe_abi_gtx_query(troupe_abi *n, uint64_t req, const char *gid,
                     size_t gid_len)
{
    abi_clear();
    return gid_op(n, req, gid, gid_len, CJ_QUERY, "gtx query", NULL);
}

static bool
status_of(const char *s, troupe_gtx_status *out)
{
    static const char *const names[] = {"prepared", "submitted", "aborting",
                                        "succeed", "failed"};
    for (int i = 0; i < 5; i++)
        if (strcmp(s, names[i]) == 0) {
            *out = (troupe_gtx_status)(i + 1);
            return true;
        }
    return false;
}

int
troupe_abi_gtx_list(troupe_abi *n, uint64_t req, const char *status,
                    const char *mode, const char *after, uint32_t limit)
{
    abi_clear();
    const char *call = "gtx list";
    if (n == NULL)
        return abi_ret(troupe__errf(TROUPE_EINVAL, "%s: NULL node", call));
    troupe_gtx_filter f = {0};
    if (status != NULL && status[0] != '\0' && !status_of(status, &f.status))
        return abi_ret(troupe__errf(TROUPE_EINVAL,
                                    "%s: status is prepared, submitted, "
                                    "aborting, succeed or failed",
                                    call));
    if (mode != NULL && mode[0] != '\0' &&
        (f.mode = troupe_gtx_mode_of(mode)) == 0)
        return abi_ret(
            troupe__errf(TROUPE_EINVAL, "%s: no mode %s", call, mode));
    size_t al = after != NULL ? strlen(after) : 0;
    if (al > 0 && !troupe_gid_valid(after, al))
        return abi_ret(
            troupe__errf(TROUPE_EINVAL, "%s: after is not a gid", call));
    if (limit == 0 || limit > TROUPE_GTX_LIST_MAX)
        return abi_ret(troupe__errf(TROUPE_EINVAL, "%s: a limit of 1..%d", call,
                                    TROUPE_GTX_LIST_MAX));
    coord_job *j = job_alloc(CJ_LIST);
    if (j == NULL)
        return abi_ret(TROUPE_ENOMEM);
    j->filter = f;
    memcpy(j->list_after, after != NULL ? after : "", al + 1);
    j->limit = limit;
    return job_post(n, req, call, j, TROUPE_OK);
}

/* ---- workflows ---- */

/* Copies payload[0..len) (at most PAYLOAD_MAX bytes) into j->buf. */
static troupe_err
job_bytes(coord_job *j, const char *call, const char *what, const void *p,
          size_t len)
{
    if (p == NULL && len > 0)
        return troupe__errf(TROUPE_EINVAL, "%s: NULL %s of %zu bytes", call,
                            what, len);
    if (len > PAYLOAD_MAX)
        return troupe__errf(TROUPE_EINVAL, "%s: %s of %zu bytes; at most %u",
                            call, what, len, PAYLOAD_MAX);
    if ((j->buf = troupe_malloc(len > 0 ? len : 1)) == NULL)
        return TROUPE_ENOMEM;
    if (len > 0)
        memcpy(j->buf, p, len);
    j->buf_len = len;
    return TROUPE_OK;
}

int
troupe_abi_workflow_submit(troupe_abi *n, uint64_t req, const char *gid,
                           size_t gid_len, const char *name, const void *input,
                           size_t len)
{
    abi_clear();
    const char *call = "workflow submit";
    coord_job *j = NULL;
    troupe_err e = job_new(n, call, CJ_WF_SUBMIT, gid, gid_len, &j);
    if (e != TROUPE_OK)
        return abi_ret(e);
    size_t nl = name != NULL ? strlen(name) : 0;
    if (nl == 0 || nl > TROUPE_TARGET_NAME_MAX)
        return job_post(n, req, call, j,
                        troupe__errf(TROUPE_EINVAL,
                                     "%s: a workflow name of 1..%d bytes", call,
                                     TROUPE_TARGET_NAME_MAX));
    memcpy(j->wf_name, name, nl + 1);
    return job_post(n, req, call, j,
                    job_bytes(j, call, "an input", input, len));
}

static int
awakeable_settle(troupe_abi *n, uint64_t req, cj_kind k, const char *call,
                 const char *id, size_t id_len, const void *payload, size_t len)
{
    abi_clear();
    if (n == NULL)
        return abi_ret(troupe__errf(TROUPE_EINVAL, "%s: NULL node", call));
    /* the form ("gid/branch-id") is the coordinator's to check: EINVAL in
     * the completion */
    if (id == NULL || id_len == 0 || id_len > TROUPE_AWAKEABLE_ID_MAX ||
        memchr(id, '\0', id_len) != NULL)
        return abi_ret(troupe__errf(TROUPE_EINVAL,
                                    "%s: an awakeable id is gid/branch-id, "
                                    "1..%d bytes",
                                    call, TROUPE_AWAKEABLE_ID_MAX));
    coord_job *j = job_alloc(k);
    if (j == NULL)
        return abi_ret(TROUPE_ENOMEM);
    memcpy(j->awake_id, id, id_len);
    j->awake_id[id_len] = '\0';
    return job_post(n, req, call, j,
                    job_bytes(j, call, "a payload", payload, len));
}

int
troupe_abi_awakeable_resolve(troupe_abi *n, uint64_t req, const char *id,
                             size_t id_len, const void *payload, size_t len)
{
    return awakeable_settle(n, req, CJ_AWAKE_RESOLVE, "awakeable resolve", id,
                            id_len, payload, len);
}

int
troupe_abi_awakeable_reject(troupe_abi *n, uint64_t req, const char *id,
                            size_t id_len, const void *reason, size_t len)
{
    return awakeable_settle(n, req, CJ_AWAKE_REJECT, "awakeable reject", id,
                            id_len, reason, len);
}

/* ---- the barrier ---- */

/* A barrier check in flight: its request and its transaction, which no
 * other call may use until the check's callback (ESTATE meanwhile). */
typedef struct barrier_req {
    abi_req *r;
    uint64_t txn;
} barrier_req;

static void
barrier_done(troupe_err err, troupe_barrier_verdict v, void *arg)
{
    static const char *const names[] = {"", "execute", "null_compensation",
                                        "duplicated"};
    barrier_req *br = arg;
    abi_req *r = br->r;
    troupe_abi *n = r->n;
    pthread_mutex_lock(&n->mu);
    abi_txn *x = abi_txn_find(n, br->txn);
    if (x != NULL)
        x->checking = false; /* usable once the host sees the verdict */
    pthread_mutex_unlock(&n->mu);
    troupe_free(br);
    const char *s = err == TROUPE_OK && v >= 1 && v <= 3 ? names[v] : NULL;
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    if (s != NULL) {
        msgpack_packer pk;
        msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
        msgpack_pack_str(&pk, strlen(s));
        msgpack_pack_str_body(&pk, s, strlen(s));
    } else if (err == TROUPE_OK)
        err = TROUPE_ECORRUPT;
    abi_req_done(r, err, sb.data, sb.size);
    msgpack_sbuffer_destroy(&sb);
}

int
troupe_abi_txn_barrier(troupe_abi *n, uint64_t req, uint64_t txn,
                       const char *mode, const char *gid, size_t gid_len,
                       const char *branch_id, const char *op)
{
    abi_clear();
    const char *call = "txn barrier";
    if (n == NULL)
        return abi_ret(troupe__errf(TROUPE_EINVAL, "%s: NULL node", call));
    troupe_err e = gid_check(call, gid, gid_len);
    if (e != TROUPE_OK)
        return abi_ret(e);
    if (mode == NULL || branch_id == NULL || op == NULL)
        return abi_ret(
            troupe__errf(TROUPE_EINVAL, "%s: NULL mode, branch or op", call));
    barrier_req *br = troupe_malloc(sizeof(*br));
    if (br == NULL)
        return abi_ret(TROUPE_ENOMEM);
    abi_req *r;
    if ((e = abi_req_begin(n, req, call, &r)) != TROUPE_OK) {
        troupe_free(br);
        return abi_ret(e);
    }
    *br = (barrier_req){.r = r, .txn = txn};
    abi_txn *x;
    if ((e = abi_txn_lookup(n, txn, call, &x)) == TROUPE_OK) {
        troupe_barrier_branch b = {.mode = mode,
                                   .gid = gid,
                                   .gid_len = gid_len,
                                   .branch_id = branch_id,
                                   .op = op};
        /* the callback fires on scheduler 0, after this lock is let go */
        e = troupe_barrier_check(x->tx, &b, barrier_done, br);
        if (e == TROUPE_OK)
            x->checking = true;
        pthread_mutex_unlock(&n->mu);
    }
    if (e != TROUPE_OK)
        troupe_free(br);
    return abi_req_end(n, r, e);
}
