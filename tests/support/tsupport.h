/*
 * Test support shared by every Check suite: assertions that print the error's
 * name and text, temp dirs, and a loop driver that runs until a predicate
 * holds or a deadline passes (never a sleep standing in for a condition).
 */
#ifndef TROUPE_TSUPPORT_H
#define TROUPE_TSUPPORT_H

#include <check.h>
#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "troupe/err.h"

#define ck_assert_ok(expr)                                                     \
    do {                                                                       \
        troupe_err ck_e_ = (expr);                                             \
        ck_assert_msg(ck_e_ == TROUPE_OK, "%s: %s (%s)", #expr,                \
                      troupe_err_name(ck_e_), troupe_strerror(ck_e_));         \
    } while (0)

#define ck_assert_err(expr, want)                                              \
    do {                                                                       \
        troupe_err ck_e_ = (expr);                                             \
        troupe_err ck_w_ = (want);                                             \
        ck_assert_msg(ck_e_ == ck_w_, "%s: got %s (%s), want %s", #expr,       \
                      troupe_err_name(ck_e_), troupe_strerror(ck_e_),          \
                      troupe_err_name(ck_w_));                                 \
    } while (0)

/* Creates a fresh empty directory under $TMPDIR; returns a malloc'd path. */
char *
ts_tempdir(const char *tag);
/* Removes a directory tree (rm -rf); frees nothing. */
void
ts_rmtree(const char *path);

/* A directory's files, one line "name size mtime_ns hash" each, in name
 * order: equal texts before and after a call say it wrote nothing there
 * (not a byte, not an mtime). Fails the test on a subdirectory (a db
 * directory holds files only), or more than 256 files or the text. */
typedef struct ts_listing {
    char text[16384];
    int files;
} ts_listing;
void
ts_list_dir(const char *dir, ts_listing *l);

/*
 * Runs `loop` in UV_RUN_ONCE/NOWAIT steps until pred(arg) is true or
 * timeout_ms of wall time pass. Returns pred's final value. The deadline is a
 * safety net for a broken implementation, not a timing assertion.
 */
bool
ts_run_until(uv_loop_t *loop, bool (*pred)(void *), void *arg,
             uint64_t timeout_ms);

/* Waits (no loop) until pred(arg) or timeout; polls with a short yield. */
bool
ts_wait_until(bool (*pred)(void *), void *arg, uint64_t timeout_ms);

/* Little-endian reads of packed records (the dispatch's, for one). */
static inline uint64_t
ts_rd64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

static inline uint32_t
ts_rd32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
           (uint32_t)p[3] << 24;
}

/* Monotonic milliseconds. */
uint64_t
ts_now_ms(void);

/* Seed for randomised tests: $TROUPE_SEED or the clock; printed once. */
uint64_t
ts_seed(const char *suite);
/* xorshift64* step. */
uint64_t
ts_rand(uint64_t *state);

/* Closes every handle of `loop`, runs it to completion, returns uv_loop_close.
 */
int
ts_loop_close(uv_loop_t *loop);

/* Runs the suites with fork mode on; returns the process exit status. */
int
ts_run_suites(Suite **suites, int n);

#endif
