/*
 * A hostile peer for hostile.sh: plain TCP connections to a node's inbox
 * that speak SP and the wire by hand, as an attacker would (no nng here:
 * it can announce a message and never send it, and it never backs off).
 *
 *   hostile_peer URL SECONDS [SEED]
 *
 * For SECONDS it cycles through, as fast as the node lets it:
 *  - fake HELLOs, thousands of sender ids, each naming a URL where nobody
 *    listens; where the node answers (a node without a secret or
 *    certificates), the handshake is completed with an empty proof and the
 *    connection is held, so the node dials back and must cap and reap;
 *  - frames before any HELLO (DATA to random addresses);
 *  - oversized frames (announcing 16 MiB and more) and partial frames
 *    (announcing what the inbox takes and sending most of it, then
 *    holding the connection);
 *  - on connections the node accepted: replies with guessed corr ids,
 *    envelopes whose from.node names another node, asks and sends to
 *    random addresses, garbage frames, PART frames announcing 16 MiB.
 * It prints what it did as `key value` lines (authed: handshakes the node
 * accepted, of which cut: sessions it cut off later for a budget; refused:
 * handshakes it refused) and exits 0; exit 2 means it could not start. URL
 * is tcp://127.0.0.1:PORT.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "troupe/wire.h"

#define HOLD_MAX 48 /* connections held open at once */

static uint64_t rng;

static uint64_t
rnd(void)
{
    rng ^= rng >> 12;
    rng ^= rng << 25;
    rng ^= rng >> 27;
    return rng * 0x2545f4914f6cdd1dull;
}

static uint64_t
now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static uint16_t port;

/* Connected past the SP header exchange (pair1), or -1. */
static int
sp_connect(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    static const unsigned char hdr[8] = {0, 'S', 'P', 0, 0x00, 0x11, 0, 0};
    unsigned char peer[8];
    struct timeval tv = {1, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 ||
        send(fd, hdr, sizeof(hdr), MSG_NOSIGNAL) != 8 ||
        recv(fd, peer, sizeof(peer), MSG_WAITALL) != 8) {
        close(fd);
        return -1;
    }
    return fd;
}

/* One SP message: length, pair1 hop count, frame. */
static int
sp_send(int fd, const void *buf, size_t len)
{
    unsigned char hdr[12];
    uint64_t n = len + 4;
    for (int i = 0; i < 8; i++)
        hdr[i] = (unsigned char)(n >> (56 - 8 * i));
    memcpy(hdr + 8, "\0\0\0\1", 4);
    if (send(fd, hdr, sizeof(hdr), MSG_NOSIGNAL | MSG_MORE) != sizeof(hdr))
        return -1;
    return send(fd, buf, len, MSG_NOSIGNAL) == (ssize_t)len ? 0 : -1;
}

/* The next frame from the node within ms into h (buf holds it). */
static int
sp_recv(int fd, unsigned char *buf, size_t cap, troupe_frame_hdr *h, int ms)
{
    struct pollfd pf = {fd, POLLIN, 0};
    if (poll(&pf, 1, ms) <= 0)
        return -1;
    unsigned char hdr[12];
    if (recv(fd, hdr, sizeof(hdr), MSG_WAITALL) != sizeof(hdr))
        return -1;
    uint64_t n = 0;
    for (int i = 0; i < 8; i++)
        n = n << 8 | hdr[i];
    if (n < 4 || n - 4 > cap)
        return -1;
    if (recv(fd, buf, n - 4, MSG_WAITALL) != (ssize_t)(n - 4))
        return -1;
    return troupe_wire_decode_frame(NULL, buf, n - 4, h, NULL, NULL) ==
                   TROUPE_OK
               ? 0
               : -1;
}

static struct {
    unsigned long connects, hellos, acks, refused, authed, cut, before_hello,
        oversized, partial, replies, spoofed, asks, garbage, parts;
} st;

static int held[HOLD_MAX];
static int n_held;

static void
hold(int fd)
{
    if (n_held == HOLD_MAX) {
        int k = (int)(rnd() % HOLD_MAX);
        close(held[k]);
        held[k] = fd;
        return;
    }
    held[n_held++] = fd;
}

static void
send_data(int fd, uint32_t sender, troupe_msg *m)
{
    unsigned char buf[512];
    size_t len;
    const troupe_msg *one[1] = {m};
    if (troupe_wire_encode_data(sender, 0, one, 1, buf, sizeof(buf), &len) ==
        TROUPE_OK)
        sp_send(fd, buf, len);
}

static troupe_addr
random_addr(uint32_t node)
{
    return (troupe_addr){node, (uint32_t)(1 + rnd() % 4096), (uint32_t)rnd()};
}

/* What an accepted fake peer sends before it lets go. */
static void
abuse(int fd, uint32_t me, uint32_t target)
{
    for (int k = 0; k < 8; k++) {
        troupe_msg *m = NULL;
        if (troupe_msg_create(&m, (uint32_t)(rnd() % 64), "\x91\x01", 2) !=
            TROUPE_OK)
            return;
        m->to = random_addr(target);
        switch (k % 4) {
        case 0: /* a reply to an ask it never saw */
            m->flags = TROUPE_MSG_REPLY;
            m->corr = rnd();
            m->from = random_addr(target);
            st.replies++;
            break;
        case 1: /* claims to be another node's actor */
            m->from = random_addr(me + 1 + (uint32_t)(rnd() % 100));
            m->corr = rnd();
            st.spoofed++;
            break;
        case 2: /* an ask to a random address */
            m->from = random_addr(me);
            m->corr = rnd();
            m->deadline = 0;
            st.asks++;
            break;
        default: /* the node address, with a kind it does not know */
            m->to = (troupe_addr){target, UINT32_MAX, 0};
            m->from = random_addr(me);
            m->corr = rnd();
            st.asks++;
            break;
        }
        send_data(fd, me, m);
        troupe_msg_destroy(m);
    }
    unsigned char junk[256];
    for (size_t i = 0; i < sizeof(junk); i++)
        junk[i] = (unsigned char)rnd();
    sp_send(fd, junk, sizeof(junk));
    st.garbage++;
    /* a frame in parts announcing the largest frame, then silence */
    unsigned char part[TROUPE_WIRE_PART_MAX + TROUPE_WIRE_PART_OVERHEAD];
    static unsigned char chunk[4096];
    size_t len;
    if (troupe_wire_encode_part(me, 0, chunk, TROUPE_WIRE_FRAME_MAX, 0,
                                sizeof(chunk), part, sizeof(part),
                                &len) == TROUPE_OK &&
        sp_send(fd, part, len) == 0)
        st.parts++;
}

#define PENDING_MAX 48
#define VERDICT_MS 300           /* a REFUSE comes well within this */
static int pending[PENDING_MAX]; /* handshakes whose verdict is due */
static uint64_t pending_at[PENDING_MAX];
static int n_pending;

/* Reads the verdict of each pending handshake once VERDICT_MS have passed
 * since its AUTH: a REFUSE (or the connection closed) means refused,
 * silence means accepted (the connection is then held). */
static void
verdicts(void)
{
    unsigned char buf[TROUPE_WIRE_CTL_MAX + 64];
    for (int i = 0; i < n_pending; i++) {
        int fd = pending[i];
        uint64_t due = pending_at[i] + VERDICT_MS, now = now_ms();
        struct pollfd pf = {fd, POLLIN, 0};
        troupe_frame_hdr h;
        if (poll(&pf, 1, due > now ? (int)(due - now) : 0) <= 0) {
            st.authed++; /* accepted, and still open */
            hold(fd);
            continue;
        }
        if (sp_recv(fd, buf, sizeof(buf), &h, 0) == 0 &&
            h.type == TROUPE_FRAME_REFUSE && h.refuse_err != TROUPE_EAUTH)
            st.authed++, st.cut++; /* accepted, then cut off (a budget) */
        else
            st.refused++;
        close(fd);
    }
    n_pending = 0;
}

static void
fake_hello(uint32_t me)
{
    int fd = sp_connect();
    if (fd < 0)
        return;
    st.connects++;
    uint8_t nonce[TROUPE_WIRE_NONCE_LEN];
    for (size_t i = 0; i < sizeof(nonce); i++)
        nonce[i] = (uint8_t)rnd();
    troupe_wire_ctl c = {.type = TROUPE_FRAME_HELLO,
                         .sender = me,
                         .incarnation = rnd() | 1,
                         .url = "tcp://127.0.0.1:1",
                         .nonce = nonce};
    unsigned char buf[TROUPE_WIRE_CTL_MAX + 64];
    size_t len;
    if (troupe_wire_encode_ctl(&c, buf, sizeof(buf), &len) != TROUPE_OK ||
        sp_send(fd, buf, len) != 0) {
        close(fd);
        return;
    }
    st.hellos++;
    troupe_frame_hdr h;
    if (sp_recv(fd, buf, sizeof(buf), &h, 500) != 0) {
        close(fd);
        return;
    }
    if (h.type != TROUPE_FRAME_HELLO_ACK) {
        st.refused++;
        close(fd);
        return;
    }
    st.acks++;
    troupe_wire_ctl a = {
        .type = TROUPE_FRAME_AUTH, .sender = me, .incarnation = c.incarnation};
    uint32_t target = h.sender;
    if (troupe_wire_encode_ctl(&a, buf, sizeof(buf), &len) != TROUPE_OK ||
        sp_send(fd, buf, len) != 0) {
        close(fd);
        return;
    }
    /* Refused (a secret or certificates) or accepted (open mode): the
     * verdict is read later, so that waiting for it does not slow the
     * flood; the abuse goes out at once either way. */
    abuse(fd, me, target);
    if (n_pending == PENDING_MAX)
        verdicts();
    pending_at[n_pending] = now_ms();
    pending[n_pending++] = fd;
}

static void
before_hello(void)
{
    int fd = sp_connect();
    if (fd < 0)
        return;
    st.connects++;
    troupe_msg *m = NULL;
    if (troupe_msg_create(&m, 1, NULL, 0) == TROUPE_OK) {
        m->to = random_addr((uint32_t)(1 + rnd() % 8));
        m->from = random_addr(77);
        send_data(fd, 77, m);
        troupe_msg_destroy(m);
        st.before_hello++;
    }
    close(fd);
}

static void
big_frames(void)
{
    int fd = sp_connect();
    if (fd < 0)
        return;
    st.connects++;
    /* announce far more than the inbox takes: refused by nng at once */
    unsigned char hdr[12] = {0, 0, 0, 0, 0x01, 0, 0, 0x04, 0, 0, 0, 1};
    send(fd, hdr, sizeof(hdr), MSG_NOSIGNAL);
    st.oversized++;
    close(fd);
    /* announce what the inbox takes and send all but a little of it */
    if ((fd = sp_connect()) < 0)
        return;
    st.connects++;
    uint64_t n = TROUPE_WIRE_PART_MAX;
    for (int i = 0; i < 8; i++)
        hdr[i] = (unsigned char)(n >> (56 - 8 * i));
    static unsigned char fill[TROUPE_WIRE_PART_MAX];
    if (send(fd, hdr, 8, MSG_NOSIGNAL) == 8 &&
        send(fd, fill, sizeof(fill) - 100, MSG_NOSIGNAL) > 0)
        st.partial++;
    hold(fd);
}

int
main(int argc, char **argv)
{
    if (argc < 3 || strncmp(argv[1], "tcp://127.0.0.1:", 16) != 0) {
        fprintf(stderr, "usage: hostile_peer tcp://127.0.0.1:PORT SECONDS "
                        "[SEED]\n");
        return 2;
    }
    port = (uint16_t)atoi(argv[1] + 16);
    uint64_t secs = strtoull(argv[2], NULL, 10);
    rng = argc > 3 ? strtoull(argv[3], NULL, 10) : (uint64_t)time(NULL);
    if (rng == 0)
        rng = 1;
    uint64_t end = now_ms() + secs * 1000;
    uint32_t id = 100000;
    while (now_ms() < end) {
        for (int i = 0; i < 50; i++)
            fake_hello(id++);
        before_hello();
        big_frames();
    }
    verdicts();
    for (int i = 0; i < n_held; i++)
        close(held[i]);
    printf("connects %lu\nhellos %lu\nacks %lu\nrefused %lu\nauthed %lu\n"
           "cut %lu\n"
           "before_hello %lu\noversized %lu\npartial %lu\nreplies %lu\n"
           "spoofed %lu\nasks %lu\ngarbage %lu\nparts %lu\n",
           st.connects, st.hellos, st.acks, st.refused, st.authed, st.cut,
           st.before_hello, st.oversized, st.partial, st.replies, st.spoofed,
           st.asks, st.garbage, st.parts);
    return 0;
}
