/* Private: what txn.c lends the other files of the transaction module
 * (remove.c). */
#ifndef TROUPE_TXN_INT_H
#define TROUPE_TXN_INT_H

#include "troupe/txn.h"

/* The storage snapshot every read of tx uses (borrowed: lives as long as
 * tx). */
const troupe_snapshot *
troupe__txn_snapshot(const troupe_txn *tx);

/*
 * Buffers a delete of key in table `table` that deletes whatever live row
 * is there at commit and nothing when there is none (a row that expired
 * meanwhile), checked like any write of tx against its begin. The table
 * must still be the one of catalog id `table_id` (its row family
 * "t.<table_id>"): ENOENT when the name now names another table. Errors
 * as troupe_txn_delete otherwise.
 */
troupe_err
troupe__txn_delete_any(troupe_txn *tx, const char *table, uint64_t table_id,
                       const void *key, size_t klen);

#endif
