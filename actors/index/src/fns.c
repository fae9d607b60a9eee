/*
 * The function registry (troupe_index_fns): the emit functions that
 * function indexes name, filled by the host at start-up and read by name
 * when a def is created or loaded (troupe_index_fn_registered) and at
 * every derive of a function index (troupe__index_fns_find). Owns the
 * registered names.
 */
#include <stdlib.h>
#include <string.h>

#include "index_int.h"
#include "troupe/alloc.h"

struct troupe_index_fns {
    fn_slot *v;
    size_t n, cap;
};

troupe_err
troupe_index_fns_create(troupe_index_fns **out)
{
    if (out == NULL)
        return TROUPE_EINVAL;
    *out = troupe_calloc(1, sizeof(**out));
    return *out != NULL ? TROUPE_OK : TROUPE_ENOMEM;
}

void
troupe_index_fns_destroy(troupe_index_fns *r)
{
    if (r == NULL)
        return;
    for (size_t i = 0; i < r->n; i++)
        troupe_free(r->v[i].name);
    troupe_free(r->v);
    troupe_free(r);
}

const fn_slot *
troupe__index_fns_find(const troupe_index_fns *r, const char *name)
{
    for (size_t i = 0; r != NULL && i < r->n; i++) {
        if (strcmp(r->v[i].name, name) == 0)
            return &r->v[i];
    }
    return NULL;
}

bool
troupe_index_fn_registered(const troupe_index_fns *r, const char *name)
{
    return name != NULL && troupe__index_fns_find(r, name) != NULL;
}

troupe_err
troupe_index_register_fn(troupe_index_fns *r, const char *name,
                         troupe_index_fn fn, void *fn_ctx)
{
    if (r == NULL || fn == NULL || !troupe__index_name_ok(name, INDEX_NAME_MAX))
        return TROUPE_EINVAL;
    if (troupe__index_fns_find(r, name) != NULL)
        return TROUPE_EEXIST;
    if (r->n == r->cap) {
        size_t cap = r->cap ? r->cap * 2 : 8;
        fn_slot *v = troupe_realloc(r->v, cap * sizeof(*v));
        if (v == NULL)
            return TROUPE_ENOMEM;
        r->v = v;
        r->cap = cap;
    }
    char *n = troupe_strdup(name);
    if (n == NULL)
        return TROUPE_ENOMEM;
    r->v[r->n++] = (fn_slot){.name = n, .fn = fn, .ctx = fn_ctx};
    return TROUPE_OK;
}
