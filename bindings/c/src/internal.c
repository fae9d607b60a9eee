/*
 * The internal tier's accessors (troupe/internal/abi.h).
 */
#include "node.h"
#include "troupe/internal/abi.h"

troupe_runtime *
troupe__abi_runtime(troupe_abi *n)
{
    return n == NULL ? NULL : n->rt;
}
