/*
 * Unguessable identifiers: actor generations and ask correlation ids.
 *
 * A peer that learns one address or one correlation id must not be able to
 * derive another: addresses name actors a peer was never told about, and a
 * correlation id is what a reply is matched on. Both are drawn from
 * Speck64/128 run in counter mode under a key of 128 random bits that each
 * runtime takes from getrandom(2) at create.
 *
 * Why a block cipher rather than a keyed hash such as SipHash: a cipher is
 * a permutation, so distinct counter values give distinct outputs and
 * correlation ids are unique per runtime by construction (the ask table
 * and the transport's outstanding-ask table key on them); a 64-bit hash of
 * the counter would only make a collision unlikely. Speck is 27 rounds of
 * add, rotate and xor on two 32-bit words: no tables, no secret-dependent
 * branches, about as cheap as one SipHash-1-3 of 8 bytes.
 *
 * Domains: correlation ids encrypt counter values below 2^63, generations
 * values with the top bit set, so the two streams never share an input.
 *
 * Cost. One encryption is a chain of 27 dependent rounds, about 220
 * instructions: a sixth of a same-scheduler ask. Asks are made on their
 * scheduler's thread, so each scheduler takes counter values IDS_BATCH at
 * a time (one atomic where there was one per ask) and encrypts them
 * together in vector registers (GCC/Clang vector extensions, lowered to
 * whatever the target has), several times fewer instructions per id.
 */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "rt.h"

#define ROR32(x, r) (((x) >> (r)) | ((x) << (32 - (r))))
#define ROL32(x, r) (((x) << (r)) | ((x) >> (32 - (r))))
#define GEN_DOMAIN (UINT64_C(1) << 63)

void
troupe__speck_schedule(uint32_t rk[TROUPE__SPECK_ROUNDS], const uint32_t key[4])
{
    /* key[0] is k0, key[1..3] are l0..l2 (the paper's word order) */
    uint32_t l[TROUPE__SPECK_ROUNDS + 2];
    rk[0] = key[0];
    l[0] = key[1];
    l[1] = key[2];
    l[2] = key[3];
    for (uint32_t i = 0; i < TROUPE__SPECK_ROUNDS - 1; i++) {
        l[i + 3] = (rk[i] + ROR32(l[i], 8)) ^ i;
        rk[i + 1] = ROL32(rk[i], 3) ^ l[i + 3];
    }
}

/* Four 32-bit lanes: every x86-64 has them (SSE2); a batch is two. */
typedef uint32_t ids_vec __attribute__((vector_size(16)));
_Static_assert(TROUPE__IDS_BATCH == 8, "two vectors of four lanes");

void
troupe__speck_encrypt_ctr(const uint32_t rk[TROUPE__SPECK_ROUNDS],
                          uint64_t first, uint32_t xs[TROUPE__IDS_BATCH],
                          uint32_t ys[TROUPE__IDS_BATCH])
{
    /* blocks first .. first + 7 share their high word */
    const ids_vec lo = {0, 1, 2, 3}, hi = {4, 5, 6, 7};
    ids_vec x0 = {0}, y0 = {0};
    x0 += (uint32_t)(first >> 32);
    y0 += (uint32_t)first;
    ids_vec x1 = x0, y1 = y0 + hi;
    y0 += lo;
    for (int r = 0; r < TROUPE__SPECK_ROUNDS; r++) {
        x0 = (((x0 >> 8) | (x0 << 24)) + y0) ^ rk[r];
        x1 = (((x1 >> 8) | (x1 << 24)) + y1) ^ rk[r];
        y0 = ((y0 << 3) | (y0 >> 29)) ^ x0;
        y1 = ((y1 << 3) | (y1 >> 29)) ^ x1;
    }
    memcpy(xs, &x0, sizeof(x0));
    memcpy(xs + 4, &x1, sizeof(x1));
    memcpy(ys, &y0, sizeof(y0));
    memcpy(ys + 4, &y1, sizeof(y1));
}

uint64_t
troupe__speck_encrypt(const uint32_t rk[TROUPE__SPECK_ROUNDS], uint64_t block)
{
    uint32_t x = (uint32_t)(block >> 32), y = (uint32_t)block;
    for (int i = 0; i < TROUPE__SPECK_ROUNDS; i++) {
        x = (ROR32(x, 8) + y) ^ rk[i];
        y = ROL32(y, 3) ^ x;
    }
    return (uint64_t)x << 32 | y;
}

/* Fills buf from the kernel's CSPRNG; blocks only until it is seeded. */
static troupe_err
random_bytes(void *buf, size_t len)
{
    unsigned char *p = buf;
    while (len > 0) {
        ssize_t n = getrandom(p, len, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == ENOSYS) {
            int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
            if (fd < 0)
                return TROUPE_ESYS;
            while (len > 0) {
                n = read(fd, p, len);
                if (n < 0 && errno == EINTR)
                    continue;
                if (n <= 0) {
                    close(fd);
                    return TROUPE_ESYS;
                }
                p += n;
                len -= (size_t)n;
            }
            close(fd);
            return TROUPE_OK;
        }
        if (n <= 0)
            return TROUPE_ESYS;
        p += n;
        len -= (size_t)n;
    }
    return TROUPE_OK;
}

troupe_err
troupe__ids_init(troupe_runtime *rt)
{
    uint32_t key[4];
    troupe_err e = random_bytes(key, sizeof(key));
    if (e != TROUPE_OK)
        return e;
    troupe__speck_schedule(rt->id_keys, key);
    return TROUPE_OK;
}

uint64_t
troupe__corr_next(struct sched *s)
{
    for (;;) {
        if (s->n_ids == 0) {
            troupe_runtime *rt = s->rt;
            /* multiples of BATCH: the low word never carries in a batch */
            uint64_t n = atomic_fetch_add_explicit(
                &rt->next_corr, TROUPE__IDS_BATCH, memory_order_relaxed);
            troupe__speck_encrypt_ctr(rt->id_keys, n & ~GEN_DOMAIN, s->id_x,
                                      s->id_y);
            s->n_ids = TROUPE__IDS_BATCH;
        }
        /* 0 means "not an ask": exactly one counter value maps to it */
        unsigned k = --s->n_ids;
        uint64_t c = (uint64_t)s->id_x[k] << 32 | s->id_y[k];
        if (c != 0)
            return c;
    }
}

uint32_t
troupe__gen_next(troupe_runtime *rt, uint32_t avoid)
{
    for (;;) {
        uint64_t v =
            troupe__speck_encrypt(rt->id_keys, GEN_DOMAIN | rt->gen_ctr++);
        uint32_t g = (uint32_t)v;
        if (g == 0 || g == avoid)
            g = (uint32_t)(v >> 32);
        if (g != 0 && g != avoid)
            return g;
    }
}
