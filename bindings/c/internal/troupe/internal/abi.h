/*
 * The flat C ABI's internal tier: what troupe's own benches and tests may
 * reach behind a troupe_abi handle (never a binding: abi.h is theirs).
 * Linked from the objects of bindings/c; libtroupe.so does not export it.
 */
#ifndef TROUPE_INTERNAL_ABI_H
#define TROUPE_INTERNAL_ABI_H

#include "troupe/abi.h"
#include "troupe/runtime.h"

/* The runtime of node n (borrowed: valid until troupe_abi_close), on
 * which its pull targets live; NULL for NULL. A producer finds a target
 * there by name (troupe/internal/dispatch.h). Any thread. */
troupe_runtime *
troupe__abi_runtime(troupe_abi *n);

#endif
