/*
 * The node address (slot TROUPE_NODE_SLOT): what a node answers about
 * itself (TROUPE_NODE_LOOKUP, a name in its registry; TROUPE_NODE_PING),
 * and the host's form of a remote name lookup.
 */
#include "transport_int.h"
#include "troupe/pack.h"

#define NAME_MAX_LEN 255

/* A message from a peer to this node's address: an ask is answered
 * (below: through the same queues as everything else); anything else is
 * dropped. */
void
troupe__system_request(troupe_node *n, const troupe_msg *m)
{
    if (m->corr == 0 || (m->flags & TROUPE_MSG_REPLY))
        return;
    troupe_err err = TROUPE_OK;
    troupe_packer p;
    troupe_pack_init(&p);
    if (m->kind == TROUPE_NODE_LOOKUP) {
        troupe_reader r;
        const char *s;
        size_t len;
        char name[NAME_MAX_LEN + 1];
        troupe_addr a;
        troupe_reader_init_msg(&r, m);
        troupe_read_array_n(&r, 1);
        troupe_read_str(&r, NAME_MAX_LEN, &s, &len);
        if (troupe_read_end(&r) != TROUPE_OK || len == 0) {
            err = TROUPE_EPROTO;
        } else {
            memcpy(name, s, len);
            name[len] = '\0';
            err = troupe_registry_lookup(n->rt, name, &a);
        }
        if (err == TROUPE_OK) {
            troupe_pack_array(&p, 3);
            troupe_pack_uint(&p, a.node);
            troupe_pack_uint(&p, a.slot);
            troupe_pack_uint(&p, a.gen);
        }
    } else if (m->kind != TROUPE_NODE_PING) {
        err = TROUPE_ENOTSUP;
    }
    troupe_msg *r = NULL;
    troupe_err e = p.len > 0 ? troupe_pack_take_msg(&p, m->kind, &r)
                             : troupe_msg_create(&r, m->kind, NULL, 0);
    troupe_pack_fini(&p);
    if (e != TROUPE_OK)
        return;
    r->flags = TROUPE_MSG_REPLY;
    r->corr = m->corr;
    r->from = m->to;
    r->to = m->from;
    r->err = err;
    /* The answer goes out through the same queues as everything else;
     * if it cannot, the asker's own deadline answers it. */
    if (r->to.node == n->id)
        troupe_runtime_deliver(n->rt, &r);
    else
        troupe__node_send(n, r);
}

static bool
has_route(troupe_node *n, uint32_t peer)
{
    pthread_mutex_lock(&n->mu);
    bool have = find_peer(n, peer, NULL) != NULL;
    pthread_mutex_unlock(&n->mu);
    return have;
}

troupe_err
troupe_node_lookup_msg(const char *name, troupe_msg **out)
{
    if (name == NULL || out == NULL)
        return TROUPE_EINVAL;
    size_t len = strlen(name);
    if (len == 0 || len > NAME_MAX_LEN)
        return TROUPE_EINVAL;
    troupe_packer p;
    troupe_pack_init(&p);
    troupe_pack_array(&p, 1);
    troupe_pack_str(&p, name, len);
    return troupe_pack_take_msg(&p, TROUPE_NODE_LOOKUP, out);
}

troupe_err
troupe_node_lookup_result(const troupe_msg *reply, troupe_addr *a)
{
    if (reply == NULL || a == NULL)
        return TROUPE_EINVAL;
    if (reply->err != TROUPE_OK)
        return reply->err;
    troupe_reader r;
    troupe_addr got;
    troupe_reader_init_msg(&r, reply);
    troupe_read_array_n(&r, 3);
    troupe_read_u32(&r, &got.node);
    troupe_read_u32(&r, &got.slot);
    troupe_read_u32(&r, &got.gen);
    troupe_err e = troupe_read_end(&r);
    if (e != TROUPE_OK)
        return TROUPE_EPROTO;
    *a = got;
    return TROUPE_OK;
}

struct lookup {
    troupe_lookup_cb cb;
    void *arg;
    char name[NAME_MAX_LEN + 1];
};

static void
lookup_reply(troupe_runtime *rt, troupe_err err, troupe_msg *reply, void *arg)
{
    struct lookup *lk = arg;
    troupe_addr a = TROUPE_ADDR_NONE;
    if (err == TROUPE_OK)
        err = troupe_node_lookup_result(reply, &a);
    lk->cb(rt, err, err == TROUPE_OK ? a : TROUPE_ADDR_NONE, lk->arg);
    troupe_free(lk);
}

/* A lookup of this node's own registry, on scheduler 0 (posted, so never
 * inside troupe_node_lookup). The registry takes a lock and nothing
 * slower, so no worker is needed. */
static void
lookup_local(void *arg, troupe_runtime *rt)
{
    struct lookup *lk = arg;
    troupe_addr a = TROUPE_ADDR_NONE;
    troupe_err err = troupe_registry_lookup(rt, lk->name, &a);
    lk->cb(rt, err, err == TROUPE_OK ? a : TROUPE_ADDR_NONE, lk->arg);
    troupe_free(lk);
}

troupe_err
troupe_node_lookup(troupe_node *n, uint32_t peer, const char *name,
                   uint32_t timeout_ms, troupe_lookup_cb cb, void *arg)
{
    if (n == NULL || peer == 0 || name == NULL || cb == NULL || timeout_ms == 0)
        return TROUPE_EINVAL;
    size_t len = strlen(name);
    if (len == 0 || len > NAME_MAX_LEN)
        return TROUPE_EINVAL;
    if (atomic_load(&n->closing))
        return TROUPE_ECLOSED;
    if (peer != n->id && !has_route(n, peer))
        return TROUPE_EUNREACHABLE;
    struct lookup *lk = troupe_calloc(1, sizeof(*lk));
    if (lk == NULL)
        return TROUPE_ENOMEM;
    lk->cb = cb;
    lk->arg = arg;
    memcpy(lk->name, name, len + 1);
    troupe_err e;
    if (peer == n->id) {
        /* Refused (ECLOSED once scheduler 0 has closed): the error is
         * returned and cb never fires, as for any call that fails. */
        e = troupe_runtime_post(n->rt, lookup_local, lk);
    } else {
        troupe_msg *m = NULL;
        e = troupe_node_lookup_msg(name, &m);
        if (e == TROUPE_OK)
            e = troupe_runtime_ask(n->rt, troupe_node_addr(peer), &m,
                                   timeout_ms, lookup_reply, lk);
    }
    if (e != TROUPE_OK)
        troupe_free(lk);
    return e;
}
