/*
 * troupe node --config FILE: the node's settings in a file of `key =
 * value` lines (docs/cluster.md, "The node's config file"):
 *
 *   # comments start a line with '#'; blank lines are skipped
 *   id = 2
 *   listen = tcp://127.0.0.1:7702
 *   data = /var/lib/troupe/node2
 *   etcd = http://127.0.0.1:2379,http://127.0.0.1:22379
 *   lease_ttl = 10
 *
 * Spaces around the key and the value are dropped; a value runs to the
 * end of its line (no quoting, no trailing comments). An unknown key, a
 * key given twice, a line without '=', an empty value, a line past 4 KiB
 * or a file past 64 KiB is an error naming the file and the line.
 * Flags given on the command line override the file's values.
 */
#ifndef TROUPE_TOOLS_NODE_CONFIG_H
#define TROUPE_TOOLS_NODE_CONFIG_H

#include <stdbool.h>
#include <stddef.h>

#define NODE_CONFIG_VALUE_MAX 4096

typedef struct node_config {
    /* each "" when the file does not set it */
    char id[32];
    char listen[1025];
    char data[4097];
    char etcd[4097];
    char lease_ttl[16];
} node_config;

/* Reads path into *out: true, or false with the reason in why
 * ("FILE:LINE: ..."). */
bool
node_config_read(const char *path, node_config *out, char *why, size_t n);

#endif
