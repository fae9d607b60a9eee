/*
 * Who may talk to a node, and what a stranger can make it hold: the
 * handshake in open, secret and certificate modes, the allow-list, a pipe
 * bound to its authenticated peer, and the budgets and caps that bound a
 * flood (links, connections, partial frames, queues, shutdown).
 */
#include "tnode.h"

Suite *
security_suite(void)
{
    Suite *s = suite_create("security");
    TCase *tc = tcase_create("security");
    tcase_set_timeout(tc, 60);
    suite_add_tcase(s, tc);
    return s;
}
