/*
 * troupe queue: inspects the queues of a database through troupe/queue.h:
 * the queues, counts per state and partition with the oldest due time and
 * its lag, pages of pending, completed or parked invocations with the
 * cursor of the next page, and every stored invocation of one event id.
 *
 * The database is opened read-only (storage.h: nothing is written, and a
 * running node may hold it; the view is that of the moment it opened),
 * and the queues on it (queue.h, "Read-only"): they reserve no enqueue
 * orders, run no partition and refuse every write, which no subcommand
 * here makes. A database without a catalog of the current format (none
 * at all, or catalog format 1, which only a writable open migrates,
 * docs/data-model.md) cannot be opened so.
 * Pause and resume (and retry, ack, delete-owner, retry-parked,
 * delete-parked) act on a running node, through its admin endpoint
 * (--admin): they write, and the node that holds the database is the one
 * that delivers (a pause is stored in the catalog by that node, so it
 * outlasts a restart). With --admin the inspection subcommands ask the
 * node too, and nothing is opened here.
 */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "troupe/alloc.h"
#include "troupe/queue.h"
#include "troupe/storage.h"

#define QUEUE_OPENS                                                            \
    "It opens the database read-only: nothing is written, and it works\n"      \
    "while a node holds the database (it shows the moment it opened).\n"

#define DATA_HELP "  --data DIR          the database directory (required)\n"
#define QUEUE_HELP "  --queue NAME        the queue (required)\n"
#define LEVEL_HELP                                                             \
    "  --log-level LEVEL   error, warn, info or debug (default warn)\n"        \
    "  -h, --help          this help\n"

#define ADMIN_ONLY "It acts on a running node: --admin URL is required.\n"

const cli_cmd cli_queue_cmd = {
    .name = "queue",
    .synopsis = "queue SUBCOMMAND (--data DIR | --admin URL) [FLAGS]...",
    .help =
        "Inspects the queues of the database under DIR.\n"
        "\n"
        "Subcommands:\n"
        "  list        the queues, their ids, partitions and retention\n"
        "  stats       one queue's counts per state and partition, the\n"
        "              oldest due time and its lag\n"
        "  pending     a page of pending invocations, oldest due first\n"
        "  completed   a page of completed invocations\n"
        "  parked      a page of parked invocations with their last errors\n"
        "  show        every stored invocation of one event id\n"
        "  pause       stop a running node delivering a queue (--admin)\n"
        "  resume      let it deliver again (--admin)\n"
        "  retry       reschedule one pending invocation to now (--admin)\n"
        "  ack         complete one pending invocation (--admin)\n"
        "  delete-owner  delete an owner's invocations (--admin)\n"
        "  retry-parked  make a parked invocation pending again (--admin)\n"
        "  delete-parked delete a parked invocation (--admin)\n"
        "\n"
        "troupe queue SUBCOMMAND --help tells each one's flags.\n" QUEUE_OPENS
        "With --admin URL every subcommand asks the running node instead.\n"
        "The ones that write need it: the node holding the database is the\n"
        "one that delivers, and it stores a pause so that a restart keeps "
        "it.\n",
};

static const cli_cmd sub_cmds[] = {
    {.name = "queue list",
     .synopsis = "queue list --data DIR [--log-level LEVEL]",
     .help = "Lists the queues: name, id, partitions, retention.\n"
             "\n" DATA_HELP CLI_ADMIN_HELP LEVEL_HELP "\n" QUEUE_OPENS},
    {.name = "queue stats",
     .synopsis = "queue stats --data DIR --queue NAME [--log-level LEVEL]",
     .help =
         "Counts a queue's pending, completed and malformed rows, per\n"
         "partition too, and its oldest due time with the lag behind "
         "it.\n"
         "\n" DATA_HELP QUEUE_HELP CLI_ADMIN_HELP LEVEL_HELP "\n" QUEUE_OPENS},
    {.name = "queue pending",
     .synopsis = "queue pending --data DIR --queue NAME [--limit N]\n"
                 "              [--after CURSOR-HEX] [--log-level LEVEL]",
     .help = "Prints a page of pending invocations, oldest due first, and "
             "the\n"
             "cursor of the next page.\n"
             "\n" DATA_HELP QUEUE_HELP
             "  --limit N           invocations per page, 1..10000 (default "
             "100)\n"
             "  --after CURSOR-HEX  continue after the cursor a page "
             "printed\n" CLI_ADMIN_HELP LEVEL_HELP "\n" QUEUE_OPENS},
    {.name = "queue completed",
     .synopsis = "queue completed --data DIR --queue NAME [--limit N]\n"
                 "              [--after CURSOR-HEX] [--log-level LEVEL]",
     .help = "Prints a page of completed invocations and the cursor of the\n"
             "next page.\n"
             "\n" DATA_HELP QUEUE_HELP
             "  --limit N           invocations per page, 1..10000 (default "
             "100)\n"
             "  --after CURSOR-HEX  continue after the cursor a page "
             "printed\n" CLI_ADMIN_HELP LEVEL_HELP "\n" QUEUE_OPENS},
    {.name = "queue parked",
     .synopsis = "queue parked --data DIR --queue NAME [--limit N]\n"
                 "              [--after CURSOR-HEX] [--log-level LEVEL]",
     .help = "Prints a page of parked invocations (past the queue's\n"
             "max_attempts: never delivered again until retried), each with\n"
             "its attempts, its last error and its storage key, and the\n"
             "cursor of the next page.\n"
             "\n" DATA_HELP QUEUE_HELP
             "  --limit N           invocations per page, 1..10000 (default "
             "100)\n"
             "  --after CURSOR-HEX  continue after the cursor a page "
             "printed\n" CLI_ADMIN_HELP LEVEL_HELP "\n" QUEUE_OPENS},
    {.name = "queue show",
     .synopsis = "queue show --data DIR --queue NAME (--id ID | --id-hex HEX)\n"
                 "              [--log-level LEVEL]",
     .help = "Prints every stored invocation of one event id, whole.\n"
             "\n" DATA_HELP QUEUE_HELP
             "  --id ID             the event id as text (1..255 bytes)\n"
             "  --id-hex HEX        the event id as hex digits\n" CLI_ADMIN_HELP
                 LEVEL_HELP "\n" QUEUE_OPENS},
    {.name = "queue pause",
     .synopsis = "queue pause --admin URL --queue NAME [--admin-token FILE]",
     .help = "Stops the node delivering the queue's events (handlers already\n"
             "running finish). Stored: a restarted node stays paused.\n"
             "\n" QUEUE_HELP CLI_ADMIN_HELP LEVEL_HELP "\n" ADMIN_ONLY},
    {.name = "queue resume",
     .synopsis = "queue resume --admin URL --queue NAME [--admin-token FILE]",
     .help = "Lets the node deliver the queue's events again.\n"
             "\n" QUEUE_HELP CLI_ADMIN_HELP LEVEL_HELP "\n" ADMIN_ONLY},
    {.name = "queue retry",
     .synopsis = "queue retry --admin URL --queue NAME --skey HEX\n"
                 "              [--admin-token FILE]",
     .help = "Reschedules one pending invocation to now: it is completed and\n"
             "its replacement is due at once.\n"
             "\n" QUEUE_HELP
             "  --skey HEX          the invocation's storage key, as pages\n"
             "                      print it (--admin: the skey "
             "field)\n" CLI_ADMIN_HELP LEVEL_HELP "\n" ADMIN_ONLY},
    {.name = "queue ack",
     .synopsis = "queue ack --admin URL --queue NAME --skey HEX\n"
                 "              [--admin-token FILE]",
     .help =
         "Completes one pending invocation.\n"
         "\n" QUEUE_HELP
         "  --skey HEX          the invocation's storage key\n" CLI_ADMIN_HELP
             LEVEL_HELP "\n" ADMIN_ONLY},
    {.name = "queue delete-owner",
     .synopsis = "queue delete-owner --admin URL --queue NAME --owner-kind K\n"
                 "              --owner-id ID [--admin-token FILE]",
     .help = "Deletes every pending and completed invocation of one owner\n"
             "(an invocation being delivered right now is kept).\n"
             "\n" QUEUE_HELP "  --owner-kind K      the owner's kind (text)\n"
             "  --owner-id ID       the owner's id (text)\n" CLI_ADMIN_HELP
                 LEVEL_HELP "\n" ADMIN_ONLY},
    {.name = "queue retry-parked",
     .synopsis = "queue retry-parked --admin URL --queue NAME --skey HEX\n"
                 "              [--admin-token FILE]",
     .help = "Makes one parked invocation pending again, due at once, with\n"
             "its attempts reset (numbered from 1 again) and its last error\n"
             "dropped.\n"
             "\n" QUEUE_HELP
             "  --skey HEX          its storage key, as `queue parked` "
             "prints it\n" CLI_ADMIN_HELP LEVEL_HELP "\n" ADMIN_ONLY},
    {.name = "queue delete-parked",
     .synopsis = "queue delete-parked --admin URL --queue NAME --skey HEX\n"
                 "              [--admin-token FILE]",
     .help = "Deletes one parked invocation (its row, its owner and id\n"
             "entries; no completed row is written).\n"
             "\n" QUEUE_HELP
             "  --skey HEX          its storage key, as `queue parked` "
             "prints it\n" CLI_ADMIN_HELP LEVEL_HELP "\n" ADMIN_ONLY},
};

enum {
    Q_LIST,
    Q_STATS,
    Q_PENDING,
    Q_COMPLETED,
    Q_PARKED,
    Q_SHOW,
    Q_PAUSE, /* from here on: --admin only */
    Q_RESUME,
    Q_RETRY,
    Q_ACK,
    Q_DELETE_OWNER,
    Q_RETRY_PARKED,
    Q_DELETE_PARKED,
    Q_N
};

const cli_cmd *
cli_queue_sub(const char *name)
{
    for (size_t i = 0; i < Q_N; i++) {
        if (strcmp(sub_cmds[i].name + strlen("queue "), name) == 0)
            return &sub_cmds[i];
    }
    return NULL;
}

enum {
    OPT_DATA = OPT_FIRST_OWN,
    OPT_QUEUE,
    OPT_LIMIT,
    OPT_AFTER,
    OPT_ID,
    OPT_ID_HEX,
    OPT_SKEY,
    OPT_OWNER_KIND,
    OPT_OWNER_ID
};

typedef struct qenv {
    troupe_db *db;
    troupe_runtime *rt;
    troupe_catalog *cat;
    troupe_queues *qs;
} qenv;

static void
qenv_close(qenv *q)
{
    if (q->qs != NULL)
        troupe_queues_stop_wait(q->qs);
    troupe_queues_destroy(q->qs);
    if (q->cat != NULL) {
        troupe_catalog_stop_wait(q->cat);
        troupe_catalog_destroy(q->cat);
    }
    if (q->rt != NULL) {
        troupe_runtime_shutdown_wait(q->rt);
        troupe_runtime_destroy(q->rt);
    }
    if (q->db != NULL)
        troupe_db_close(q->db);
}

/* 0, or 1 with the message printed (and everything closed). */
static int
qenv_open(const char *data, troupe_log_level level, qenv *q)
{
    memset(q, 0, sizeof(*q));
    if (access(data, F_OK) != 0) { /* opening would create it */
        fprintf(stderr, "troupe queue: no database at %s\n", data);
        return 1;
    }
    troupe_db_opts o;
    troupe_db_opts_init(&o);
    o.read_only = true;
    o.logger.level = level;
    troupe_err e = troupe_db_open(data, &o, &q->db);
    if (e != TROUPE_OK)
        return cli_failed("open database", e);
    troupe_runtime_opts ro = {
        .schedulers = 1, .workers = 2, .logger = {.level = level}};
    const char *what = "start";
    if ((e = troupe_runtime_create(&q->rt, &ro)) == TROUPE_OK) {
        what = "open catalog";
        troupe_catalog_opts co = {.rt = q->rt, .db = q->db};
        e = troupe_catalog_open(&co, &q->cat);
    }
    if (e == TROUPE_OK) {
        what = "open queues";
        troupe_queues_opts qo = {.catalog = q->cat}; /* read-only: none */
        e = troupe_queues_open(&qo, &q->qs);
    }
    if (e != TROUPE_OK) {
        qenv_close(q);
        return cli_failed(what, e);
    }
    return 0;
}

static void
print_hex(const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        printf("%02x", p[i]);
}

/* Printable ASCII as "text", anything else as 0x<hex>. */
static void
print_bytes(const uint8_t *p, size_t n)
{
    bool text = n > 0;
    for (size_t i = 0; i < n && text; i++)
        text = p[i] >= 0x20 && p[i] < 0x7f && p[i] != '"' && p[i] != '\\';
    if (text) {
        printf("\"%.*s\"", (int)n, (const char *)p);
    } else {
        printf("0x");
        print_hex(p, n);
    }
}

/* Decodes HEX into a new buffer (troupe_free); false when it is not an
 * even number of hex digits, at least one byte. */
static bool
parse_hex(const char *s, uint8_t **out, size_t *n)
{
    size_t len = strlen(s);
    if (len == 0 || len % 2 != 0)
        return false;
    uint8_t *b = troupe_malloc(len / 2);
    if (b == NULL)
        return false;
    for (size_t i = 0; i < len / 2; i++) {
        unsigned v = 0;
        for (int k = 0; k < 2; k++) {
            char c = s[2 * i + (size_t)k];
            unsigned d = c >= '0' && c <= '9'   ? (unsigned)(c - '0')
                         : c >= 'a' && c <= 'f' ? (unsigned)(c - 'a' + 10)
                         : c >= 'A' && c <= 'F' ? (unsigned)(c - 'A' + 10)
                                                : 16u;
            if (d == 16) {
                troupe_free(b);
                return false;
            }
            v = v << 4 | d;
        }
        b[i] = (uint8_t)v;
    }
    *out = b;
    *n = len / 2;
    return true;
}

/* One invocation, one line; `full`: the whole payload and the storage
 * key (show), else payloads past 64 bytes are cut. */
static void
print_item(const troupe_queue_item *it, bool full)
{
    printf("%s partition %u time_ms %lld order %llu",
           it->completed ? "completed"
           : it->parked  ? "parked"
                         : "pending",
           it->partition, (long long)it->time_ms,
           (unsigned long long)it->order);
    if (it->completed)
        printf(" processed_ms %lld", (long long)it->processed_ms);
    printf(" id ");
    print_bytes(it->id, it->id_len);
    printf(" key ");
    print_bytes(it->key, it->key_len);
    printf(" owner ");
    if (it->owner_kind != NULL) {
        print_bytes(it->owner_kind, it->owner_kind_len);
        printf("/");
        print_bytes(it->owner_id, it->owner_id_len);
    } else {
        printf("-");
    }
    size_t pl = full || it->payload_len <= 64 ? it->payload_len : 64;
    printf(" payload %zu bytes 0x", it->payload_len);
    print_hex(it->payload, pl);
    if (pl < it->payload_len)
        printf("...");
    if (!it->completed)
        printf(" attempts %u", it->attempts);
    if (it->parked) {
        printf(" last_error ");
        if (it->last_error_len > 0)
            print_bytes(it->last_error, it->last_error_len);
        else
            printf("-");
    }
    if (full || it->parked) {
        printf(" skey ");
        print_hex(it->skey, it->skey_len);
    }
    printf("\n");
}

static int
queue_failed(const char *queue, const char *what, troupe_err e)
{
    if (e == TROUPE_ENOQUEUE && queue != NULL) {
        fprintf(stderr, "troupe queue: no queue named '%s'\n", queue);
        return 1;
    }
    return cli_failed(what, e);
}

static int
queue_list(qenv *q)
{
    troupe_queue_info *info = NULL;
    size_t n = 0;
    troupe_err e = troupe_queues_list(q->qs, &info, &n);
    if (e != TROUPE_OK)
        return cli_failed("list queues", e);
    printf("queues %zu\n", n);
    for (size_t i = 0; i < n; i++)
        printf("queue %s id %llu partitions %u retention_ms %lld "
               "max_attempts %u paused %s\n",
               info[i].name, (unsigned long long)info[i].id, info[i].partitions,
               (long long)info[i].retention_ms, info[i].max_attempts,
               info[i].paused ? "yes" : "no");
    troupe_free(info);
    return 0;
}

static int
queue_stats(qenv *q, const char *queue)
{
    troupe_queue_stats *st = NULL;
    troupe_err e = troupe_queue_stats_wait(q->qs, queue, &st);
    if (e != TROUPE_OK)
        return queue_failed(queue, "stats", e);
    printf("queue %s partitions %u pending %llu completed %llu malformed "
           "%llu parked %llu\n",
           queue, st->partitions, (unsigned long long)st->pending,
           (unsigned long long)st->completed, (unsigned long long)st->malformed,
           (unsigned long long)st->parked);
    if (st->oldest_due_ms < 0) {
        printf("oldest_due_ms - lag_ms -\n");
    } else {
        int64_t lag = troupe_now_ms() - st->oldest_due_ms;
        printf("oldest_due_ms %lld lag_ms %lld\n", (long long)st->oldest_due_ms,
               (long long)(lag > 0 ? lag : 0));
    }
    for (uint32_t p = 0; p < st->partitions; p++)
        printf("partition %u pending %llu completed %llu parked %llu\n", p,
               (unsigned long long)st->pending_by_p[p],
               (unsigned long long)st->completed_by_p[p],
               (unsigned long long)st->parked_by_p[p]);
    troupe_free(st);
    return 0;
}

static int
queue_page(qenv *q, const char *queue, troupe_queue_state state,
           const uint8_t *after, size_t after_len, long limit)
{
    troupe_queue_page *pg = NULL;
    troupe_err e = troupe_queue_list_wait(q->qs, queue, state, after, after_len,
                                          (size_t)limit, &pg);
    if (e == TROUPE_ERANGE) {
        fprintf(stderr,
                "troupe queue: --after is not a %s cursor of this "
                "queue\n",
                state == TROUPE_QUEUE_PENDING     ? "pending"
                : state == TROUPE_QUEUE_COMPLETED ? "completed"
                                                  : "parked");
        return 1;
    }
    if (e != TROUPE_OK)
        return queue_failed(queue, "list", e);
    for (size_t i = 0; i < pg->n; i++)
        print_item(&pg->items[i], false);
    printf("page %zu more %s cursor ", pg->n, pg->more ? "yes" : "no");
    if (pg->n > 0)
        print_hex(pg->cursor, pg->cursor_len);
    else
        printf("-");
    printf("\n");
    troupe_queue_page_destroy(pg);
    return 0;
}

static int
queue_show(qenv *q, const char *queue, const uint8_t *id, size_t id_len)
{
    troupe_queue_page *pg = NULL;
    troupe_err e = troupe_queue_lookup_wait(q->qs, queue, id, id_len, &pg);
    if (e != TROUPE_OK)
        return queue_failed(queue, "show", e);
    for (size_t i = 0; i < pg->n; i++)
        print_item(&pg->items[i], true);
    size_t n = pg->n;
    troupe_queue_page_destroy(pg);
    if (n == 0) {
        fprintf(stderr, "troupe queue: no event with that id in '%s'\n", queue);
        return 1;
    }
    printf("invocations %zu\n", n);
    return 0;
}

typedef struct qargs {
    const char *queue, *after, *id, *id_hex, *skey, *owner_kind, *owner_id;
    long limit;
} qargs;

/* A subcommand through a running node's admin endpoint. */
static int
queue_admin(int kind, const cli_admin *a, const qargs *q)
{
    static const char *const sub[] = {[Q_PENDING] = "pending",
                                      [Q_COMPLETED] = "completed",
                                      [Q_PARKED] = "parked",
                                      [Q_SHOW] = "events",
                                      [Q_PAUSE] = "pause",
                                      [Q_RESUME] = "resume",
                                      [Q_RETRY] = "retry",
                                      [Q_ACK] = "ack",
                                      [Q_DELETE_OWNER] = "delete-by-owner",
                                      [Q_RETRY_PARKED] = "parked/retry",
                                      [Q_DELETE_PARKED] = "parked/delete"};
    if (kind == Q_LIST)
        return cli_admin_run(a, "GET", "/v1/queues", NULL);
    char *name = cli_admin_escape(q->queue);
    char *v = q->after    ? cli_admin_escape(q->after)
              : q->id     ? cli_admin_escape(q->id)
              : q->id_hex ? cli_admin_escape(q->id_hex)
                          : NULL;
    char *body = NULL;
    bool by_skey = kind == Q_RETRY || kind == Q_ACK || kind == Q_RETRY_PARKED ||
                   kind == Q_DELETE_PARKED;
    if (by_skey) {
        json_t *b = json_pack("{s:s}", "skey", q->skey);
        body = b ? json_dumps(b, JSON_COMPACT) : NULL;
        json_decref(b);
    } else if (kind == Q_DELETE_OWNER) {
        json_t *b =
            json_pack("{s:s,s:s}", "kind", q->owner_kind, "id", q->owner_id);
        body = b ? json_dumps(b, JSON_COMPACT) : NULL;
        json_decref(b);
    }
    char path[16384];
    if (kind == Q_STATS)
        snprintf(path, sizeof(path), "/v1/queues/%s", name ? name : "");
    else if (kind == Q_SHOW)
        snprintf(path, sizeof(path), "/v1/queues/%s/events?%s=%s",
                 name ? name : "", q->id ? "id" : "id_hex", v ? v : "");
    else if (kind == Q_PENDING || kind == Q_COMPLETED || kind == Q_PARKED)
        snprintf(path, sizeof(path), "/v1/queues/%s/%s?limit=%ld%s%s",
                 name ? name : "", sub[kind], q->limit, v ? "&after=" : "",
                 v ? v : "");
    else
        snprintf(path, sizeof(path), "/v1/queues/%s/%s", name ? name : "",
                 sub[kind]);
    int rc =
        name == NULL || (kind >= Q_RETRY && body == NULL)
            ? cli_failed("request", TROUPE_ENOMEM)
            : cli_admin_run(a, kind >= Q_PAUSE ? "POST" : "GET", path, body);
    free(body);
    free(v);
    free(name);
    return rc;
}

int
cmd_queue(int argc, char **argv)
{
    const cli_cmd *top = &cli_queue_cmd, *c = NULL;
    int picked =
        cli_sub_pick(top, argc, argv, "list, stats, pending, completed or show",
                     cli_queue_sub, &c);
    if (picked >= 0)
        return picked;
    const char *sub = argv[0];
    int kind = (int)(c - sub_cmds);
    bool paged = kind == Q_PENDING || kind == Q_COMPLETED || kind == Q_PARKED;
    bool by_skey = kind == Q_RETRY || kind == Q_ACK || kind == Q_RETRY_PARKED ||
                   kind == Q_DELETE_PARKED;
    /* Each subcommand takes only its own flags: the table ends early. */
    struct option opts[16] = {CLI_COMMON_OPTIONS, CLI_ADMIN_OPTIONS};
    size_t no = 5; /* the entries of the two macros */
    /* --data for the acting ones too, to say why it cannot do */
    opts[no++] = (struct option){"data", required_argument, NULL, OPT_DATA};
    if (kind != Q_LIST)
        opts[no++] =
            (struct option){"queue", required_argument, NULL, OPT_QUEUE};
    if (paged) {
        opts[no++] =
            (struct option){"limit", required_argument, NULL, OPT_LIMIT};
        opts[no++] =
            (struct option){"after", required_argument, NULL, OPT_AFTER};
    }
    if (kind == Q_SHOW) {
        opts[no++] = (struct option){"id", required_argument, NULL, OPT_ID};
        opts[no++] =
            (struct option){"id-hex", required_argument, NULL, OPT_ID_HEX};
    }
    if (by_skey)
        opts[no++] = (struct option){"skey", required_argument, NULL, OPT_SKEY};
    if (kind == Q_DELETE_OWNER) {
        opts[no++] = (struct option){"owner-kind", required_argument, NULL,
                                     OPT_OWNER_KIND};
        opts[no++] =
            (struct option){"owner-id", required_argument, NULL, OPT_OWNER_ID};
    }
    opts[no] = (struct option){NULL, 0, NULL, 0};

    const char *data = NULL;
    qargs qa = {.limit = 100};
    static cli_admin adm;
    memset(&adm, 0, sizeof(adm));
    troupe_log_level level = TROUPE_LOG_DEFAULT;
    cli_getopt_reset();
    int ch, rc;
    while ((ch = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
        switch (ch) {
        case OPT_DATA:
            data = optarg;
            break;
        case OPT_QUEUE:
            qa.queue = optarg;
            break;
        case OPT_LIMIT:
            if (!cli_num(c, "--limit", optarg, 1, TROUPE_QUEUE_PAGE_MAX,
                         &qa.limit))
                return CLI_USAGE;
            break;
        case OPT_AFTER:
            qa.after = optarg;
            break;
        case OPT_ID:
            qa.id = optarg;
            break;
        case OPT_ID_HEX:
            qa.id_hex = optarg;
            break;
        case OPT_SKEY:
            qa.skey = optarg;
            break;
        case OPT_OWNER_KIND:
            qa.owner_kind = optarg;
            break;
        case OPT_OWNER_ID:
            qa.owner_id = optarg;
            break;
        default:
            if ((rc = cli_admin_common_flag(&adm, c, ch, argv, &level)) !=
                CLI_CONTINUE)
                return rc;
        }
    }
    /* argv[0] is the subcommand, which getopt_long skips as it would a
     * program name. */
    if ((rc = cli_operands(c, argc, argv, 0, "")) != CLI_CONTINUE)
        return rc;
    if ((rc = cli_admin_ready(&adm, c)) != CLI_CONTINUE)
        return rc;
    if (kind >= Q_PAUSE && !adm.on) {
        if (kind == Q_PAUSE || kind == Q_RESUME)
            return cli_usage(c,
                             "%s needs --admin URL: the node holding the "
                             "database delivers, and it stores the pause",
                             sub);
        return cli_usage(c, "%s needs --admin URL (a running node)", sub);
    }
    if (kind < Q_PAUSE && (data == NULL) == !adm.on)
        return cli_usage(c, "give --data DIR or --admin URL (one of them)");
    if (kind != Q_LIST && qa.queue == NULL)
        return cli_usage(c, "--queue is required");
    if (kind == Q_SHOW && (qa.id == NULL) == (qa.id_hex == NULL))
        return cli_usage(c, "give --id or --id-hex (one of them)");
    if (by_skey && qa.skey == NULL)
        return cli_usage(c, "--skey is required");
    if (kind == Q_DELETE_OWNER &&
        (qa.owner_kind == NULL || qa.owner_id == NULL))
        return cli_usage(c, "--owner-kind and --owner-id are required");
    const char *after = qa.after, *id = qa.id, *id_hex = qa.id_hex,
               *queue = qa.queue;
    long limit = qa.limit;
    uint8_t *cur = NULL, *idb = NULL;
    size_t cur_len = 0, idb_len = 0;
    if (after != NULL && !parse_hex(after, &cur, &cur_len))
        return cli_usage(c,
                         "--after wants the hex cursor a page printed, got "
                         "'%s'",
                         after);
    if (id_hex != NULL && !parse_hex(id_hex, &idb, &idb_len)) {
        troupe_free(cur);
        return cli_usage(c, "--id-hex wants hex digits, got '%s'", id_hex);
    }
    if (id != NULL && (*id == '\0' || strlen(id) > TROUPE_QUEUE_ID_MAX)) {
        troupe_free(cur);
        return cli_usage(c, "--id wants 1..%d bytes", TROUPE_QUEUE_ID_MAX);
    }
    if (qa.skey != NULL) {
        uint8_t *k = NULL;
        size_t kl = 0;
        if (!parse_hex(qa.skey, &k, &kl))
            return cli_usage(c, "--skey wants hex digits, got '%s'", qa.skey);
        troupe_free(k);
    }
    if (adm.on) {
        troupe_free(cur);
        troupe_free(idb);
        return queue_admin(kind, &adm, &qa);
    }
    qenv q;
    rc = qenv_open(data, level, &q);
    if (rc == 0) {
        switch (kind) {
        case Q_LIST:
            rc = queue_list(&q);
            break;
        case Q_STATS:
            rc = queue_stats(&q, queue);
            break;
        case Q_PENDING:
        case Q_COMPLETED:
        case Q_PARKED:
            rc = queue_page(&q, queue,
                            kind == Q_PENDING     ? TROUPE_QUEUE_PENDING
                            : kind == Q_COMPLETED ? TROUPE_QUEUE_COMPLETED
                                                  : TROUPE_QUEUE_PARKED,
                            cur, cur_len, limit);
            break;
        default:
            rc = id != NULL
                     ? queue_show(&q, queue, (const uint8_t *)id, strlen(id))
                     : queue_show(&q, queue, idb, idb_len);
            break;
        }
        qenv_close(&q);
    }
    troupe_free(cur);
    troupe_free(idb);
    return rc;
}
