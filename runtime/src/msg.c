/*
 * Bodies and message headers. A body is refcounted and immutable once
 * sent; small bodies live inline after the header (one allocation).
 */
#include <string.h>
#include <time.h>

#include "rt.h"

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
    if (atomic_fetch_sub_explicit(&b->refs, 1, memory_order_acq_rel) != 1)
        return;
    if (b->adopted)
        troupe_free(b->data);
    troupe_free(b);
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
    troupe_msg *m = troupe_malloc(sizeof(*m));
    if (m == NULL)
        return NULL;
    memset(m, 0, sizeof(*m));
    atomic_init(&m->next, NULL);
    m->kind = kind;
    return m;
}

troupe_err
troupe_msg_create(troupe_msg **out, uint32_t kind, const void *body,
                  size_t len)
{
    if (out == NULL || (body == NULL && len > 0))
        return TROUPE_EINVAL;
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
    troupe_body_release(m->body);
    troupe_free(m);
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
