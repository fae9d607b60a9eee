/* Finishing on scheduler 0 (troupe/internal/post.h). */
#include "troupe/internal/post.h"

void
troupe__post_or_run(troupe_runtime *rt,
                    void (*fn)(void *arg, troupe_runtime *rt), void *arg)
{
    if (troupe_runtime_post(rt, fn, arg) != TROUPE_OK)
        fn(arg, rt);
}
