/*
 * The raw peer of node_pull_batch and python_pull_batch: a trivial pull
 * library, the shape ../shared/HOSTS.md measured by hand before troupe's
 * ABI existed. A producer thread makes tasks (ids counting up, a 16-byte
 * body) into a ring under a mutex, never more than `credit` unanswered;
 * a pull takes up to `max` of them into the caller's memory in troupe's
 * record layout (troupe/dispatch.h: u64 id, u32 target, u16 kind,
 * u16 header_len, u32 attempt, u32 body_len, i64 deadline_ms, header,
 * body, padded to 8); a reply, one at a time or a batch (u64 id,
 * u32 outcome, u32 len, body, padded to 8), frees its credit. No ids
 * table, no deadlines, no outcomes kept: what a host measures against it
 * is its FFI, its own loop and one lock per call, so troupe's binding is
 * compared with the same loop written against a library that does little
 * else.
 *
 * One run at a time (raw_start .. raw_finish); one host thread pulls.
 */
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#define REC_FIXED 32u
#define BODY_LEN 16u
#define RING 65536u

typedef struct raw {
    pthread_mutex_t mu;
    pthread_cond_t room;
    pthread_t producer;
    uint64_t total, made, taken, replied, bad;
    uint32_t credit;
    uint64_t ring[RING];
} raw;

static raw R = {.mu = PTHREAD_MUTEX_INITIALIZER,
                .room = PTHREAD_COND_INITIALIZER};

int
raw_start(uint64_t n, uint32_t credit);
int
raw_next_batch(void *buf, size_t cap, int max);
int
raw_reply(uint64_t id, uint32_t outcome, const void *body, size_t len);
int
raw_reply_batch(const void *buf, size_t len);
uint64_t
raw_finish(void);

static void *
produce(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&R.mu);
    while (R.made < R.total) {
        while (R.made - R.replied >= R.credit)
            pthread_cond_wait(&R.room, &R.mu);
        R.made++;
        R.ring[R.made % RING] = R.made;
    }
    pthread_mutex_unlock(&R.mu);
    return NULL;
}

/* Starts a run of n tasks, at most credit (1..65536) unanswered. */
int
raw_start(uint64_t n, uint32_t credit)
{
    if (credit == 0 || credit > RING)
        return -1;
    R.total = n;
    R.made = R.taken = R.replied = R.bad = 0;
    R.credit = credit;
    return pthread_create(&R.producer, NULL, produce, NULL) == 0 ? 0 : -1;
}

/* Writes up to max ready records, never blocking; returns how many (0:
 * none ready now), or -1 once the run has handed out every task. */
int
raw_next_batch(void *buf, size_t cap, int max)
{
    uint8_t *p = buf;
    size_t rec = (REC_FIXED + BODY_LEN + 7u) & ~(size_t)7u, off = 0;
    int n = 0;
    pthread_mutex_lock(&R.mu);
    if (R.taken == R.total) {
        pthread_mutex_unlock(&R.mu);
        return -1;
    }
    while (n < max && off + rec <= cap && R.taken < R.made) {
        uint8_t *r = p + off;
        uint64_t id = R.ring[++R.taken % RING];
        uint32_t target = 1, attempt = 1, blen = BODY_LEN;
        uint16_t kind = 15, hlen = 0;
        int64_t deadline = 0;
        memcpy(r, &id, 8);
        memcpy(r + 8, &target, 4);
        memcpy(r + 12, &kind, 2);
        memcpy(r + 14, &hlen, 2);
        memcpy(r + 16, &attempt, 4);
        memcpy(r + 20, &blen, 4);
        memcpy(r + 24, &deadline, 8);
        memcpy(r + REC_FIXED, &id, 8);
        memset(r + REC_FIXED + 8, 'b', BODY_LEN - 8);
        off += rec;
        n++;
    }
    pthread_mutex_unlock(&R.mu);
    return n;
}

/* Answers under the lock; an id not handed out or an undefined outcome
 * counts as bad. */
static void
answer(uint64_t id, uint32_t outcome)
{
    if (id == 0 || id > R.taken || outcome < 1 || outcome > 4) {
        R.bad++;
        return;
    }
    if (R.made - R.replied == R.credit)
        pthread_cond_signal(&R.room);
    R.replied++;
}

int
raw_reply(uint64_t id, uint32_t outcome, const void *body, size_t len)
{
    (void)body;
    (void)len;
    pthread_mutex_lock(&R.mu);
    answer(id, outcome);
    pthread_mutex_unlock(&R.mu);
    return 0;
}

/* Returns how many replies were read, -1 for a record past the end. */
int
raw_reply_batch(const void *buf, size_t len)
{
    const uint8_t *p = buf;
    size_t off = 0;
    int n = 0;
    pthread_mutex_lock(&R.mu);
    while (off < len) {
        uint64_t id;
        uint32_t outcome, blen;
        if (len - off < 16)
            break;
        memcpy(&id, p + off, 8);
        memcpy(&outcome, p + off + 8, 4);
        memcpy(&blen, p + off + 12, 4);
        size_t rec = (16u + (size_t)blen + 7u) & ~(size_t)7u;
        if (rec > len - off)
            break;
        answer(id, outcome);
        off += rec;
        n++;
    }
    pthread_mutex_unlock(&R.mu);
    return off == len ? n : -1;
}

/* Joins the producer; returns the replies that were good, or UINT64_MAX
 * when any was bad. */
uint64_t
raw_finish(void)
{
    pthread_join(R.producer, NULL);
    return R.bad == 0 ? R.replied : UINT64_MAX;
}
