/*
 * Bodies and message headers. A body is refcounted and immutable once
 * sent; small bodies live inline after the header (one allocation).
 */
#include <string.h>
#include <time.h>

#include "rt.h"

/* Bodies up to this size live in the message's own allocation, after the
 * header: one malloc per message instead of two. The header holds one
 * reference on that body (so the block outlives a header whose body was
 * taken or replaced), m->body another. */
#define INLINE_BODY_MAX TROUPE__INLINE_BODY_MAX
#define BODY_IN_MSG 2u
#define MSG_BODY_INLINE 1u
_Static_assert(sizeof(troupe__msg) % _Alignof(max_align_t) == 0,
               "inline body must be aligned");
_Static_assert(sizeof(troupe__msg) == 96, "a message block's header");

/* Scheduler threads keep a LIFO cache of message blocks of one size: the
 * header plus an inline body of up to CACHED_BODY_MAX bytes. Messages are
 * freed by the thread that handles them, so a send/handle cycle on one
 * scheduler never reaches malloc, and a one-way flow between schedulers
 * fills the receiver's cache to its cap and frees the rest. */
#define CACHED_BODY_MAX 16
#define MSG_BLOCK (sizeof(troupe__msg) + sizeof(troupe_body) + CACHED_BODY_MAX)
#define MSG_CACHE_CAP 4096
struct cache_node {
    struct cache_node *next;
};
static _Thread_local struct {
    struct cache_node *head;
    uint32_t n;
    bool on;
} msg_cache;

void
troupe__msg_cache_start(void)
{
    msg_cache.on = true;
}

void
troupe__msg_cache_stop(void)
{
    msg_cache.on = false;
    while (msg_cache.head != NULL) {
        struct cache_node *c = msg_cache.head;
        msg_cache.head = c->next;
        troupe_free(c);
    }
    msg_cache.n = 0;
}

static void *
block_alloc(size_t size)
{
    if (size <= MSG_BLOCK) {
        struct cache_node *c = msg_cache.head;
        if (c != NULL) {
            msg_cache.head = c->next;
            msg_cache.n--;
            return c;
        }
        return troupe_malloc(MSG_BLOCK);
    }
    return troupe_malloc(size);
}

/* p came from block_alloc(size) */
static void
block_free(void *p, size_t size)
{
    if (size <= MSG_BLOCK && msg_cache.on && msg_cache.n < MSG_CACHE_CAP) {
        struct cache_node *c = p;
        c->next = msg_cache.head;
        msg_cache.head = c;
        msg_cache.n++;
        return;
    }
    troupe_free(p);
}

static size_t
inline_block_size(const troupe_body *b)
{
    return sizeof(troupe__msg) + sizeof(troupe_body) + b->len;
}

troupe_err
troupe_body_alloc(size_t len, troupe_body **out, void **data)
{
    if (out == NULL || data == NULL || len > SIZE_MAX / 2)
        return TROUPE_EINVAL;
    troupe_body *b = troupe_malloc(sizeof(*b) + len);
    if (b == NULL)
        return TROUPE_ENOMEM;
    atomic_init(&b->refs, 1);
    b->adopted = 0;
    b->len = len;
    b->data = b->inline_;
    *out = b;
    *data = b->data;
    return TROUPE_OK;
}

troupe_err
troupe_body_copy(const void *data, size_t len, troupe_body **out)
{
    if (data == NULL && len > 0)
        return TROUPE_EINVAL;
    void *dst;
    troupe_err e = troupe_body_alloc(len, out, &dst);
    if (e == TROUPE_OK && len > 0)
        memcpy(dst, data, len);
    return e;
}

troupe_err
troupe_body_adopt(void *data, size_t len, troupe_body **out)
{
    if (out == NULL || (data == NULL && len > 0)) {
        troupe_free(data);
        return TROUPE_EINVAL;
    }
    troupe_body *b = troupe_malloc(sizeof(*b));
    if (b == NULL) {
        troupe_free(data);
        return TROUPE_ENOMEM;
    }
    atomic_init(&b->refs, 1);
    b->adopted = 1;
    b->len = len;
    b->data = data;
    *out = b;
    return TROUPE_OK;
}

troupe_body *
troupe_body_retain(troupe_body *b)
{
    if (b != NULL)
        atomic_fetch_add_explicit(&b->refs, 1, memory_order_relaxed);
    return b;
}

void
troupe_body_release(troupe_body *b)
{
    if (b == NULL)
        return;
    /* Sole holder: nobody else can retain, so no read-modify-write. */
    if (atomic_load_explicit(&b->refs, memory_order_acquire) != 1 &&
        atomic_fetch_sub_explicit(&b->refs, 1, memory_order_acq_rel) != 1)
        return;
    if (b->adopted == BODY_IN_MSG)
        block_free((troupe__msg *)b - 1, inline_block_size(b));
    else {
        if (b->adopted)
            troupe_free(b->data);
        troupe_free(b);
    }
}

const void *
troupe_body_data(const troupe_body *b)
{
    return b ? b->data : NULL;
}

size_t
troupe_body_len(const troupe_body *b)
{
    return b ? b->len : 0;
}

static troupe_msg *
msg_new(uint32_t kind)
{
    troupe__msg *pm = block_alloc(sizeof(*pm));
    if (pm == NULL)
        return NULL;
    memset(pm, 0, sizeof(*pm));
    atomic_init(&pm->next, NULL);
    pm->pub.kind = kind;
    return &pm->pub;
}

troupe_err
troupe_msg_create(troupe_msg **out, uint32_t kind, const void *body, size_t len)
{
    if (out == NULL || (body == NULL && len > 0))
        return TROUPE_EINVAL;
    if (len > 0 && len <= INLINE_BODY_MAX) {
        troupe__msg *pm = block_alloc(sizeof(*pm) + sizeof(troupe_body) + len);
        if (pm == NULL)
            return TROUPE_ENOMEM;
        memset(pm, 0, sizeof(*pm));
        atomic_init(&pm->next, NULL);
        pm->alloc = MSG_BODY_INLINE;
        troupe_msg *m = &pm->pub;
        m->kind = kind;
        troupe_body *b = (troupe_body *)(pm + 1);
        atomic_init(&b->refs, 2);
        b->adopted = BODY_IN_MSG;
        b->len = len;
        b->data = b->inline_;
        memcpy(b->data, body, len);
        m->body = b;
        *out = m;
        return TROUPE_OK;
    }
    troupe_msg *m = msg_new(kind);
    if (m == NULL)
        return TROUPE_ENOMEM;
    if (len > 0 || body != NULL) {
        troupe_err e = troupe_body_copy(body, len, &m->body);
        if (e != TROUPE_OK) {
            troupe_free(m);
            return e;
        }
    }
    *out = m;
    return TROUPE_OK;
}

troupe_err
troupe_msg_create_body(troupe_msg **out, uint32_t kind, troupe_body **body)
{
    troupe_body *b = body ? *body : NULL;
    if (body != NULL)
        *body = NULL;
    if (out == NULL) {
        troupe_body_release(b);
        return TROUPE_EINVAL;
    }
    troupe_msg *m = msg_new(kind);
    if (m == NULL) {
        troupe_body_release(b);
        return TROUPE_ENOMEM;
    }
    m->body = b;
    *out = m;
    return TROUPE_OK;
}

void
troupe_msg_destroy(troupe_msg *m)
{
    if (m == NULL)
        return;
    if (m->ptr_drop != NULL)
        m->ptr_drop(m->ptr);
    troupe__msg *pm = troupe__msg_of(m);
    if (pm->alloc & MSG_BODY_INLINE) {
        troupe_body *own = (troupe_body *)(pm + 1);
        if (m->body == own &&
            atomic_load_explicit(&own->refs, memory_order_acquire) == 2) {
            /* header and body were the only holders */
            block_free(pm, inline_block_size(own));
            return;
        }
        troupe_body_release(m->body);
        troupe_body_release(own);
        return;
    }
    troupe_body_release(m->body);
    block_free(pm, sizeof(*pm));
}

const void *
troupe_msg_data(const troupe_msg *m)
{
    return m && m->body ? m->body->data : NULL;
}

size_t
troupe_msg_len(const troupe_msg *m)
{
    return m && m->body ? m->body->len : 0;
}

int64_t
troupe_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}
