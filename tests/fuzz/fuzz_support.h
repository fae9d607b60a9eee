/*
 * What the fuzz targets share: a failed property aborts with a message
 * (libFuzzer then saves the input as a crash), a reader over the input's
 * bytes, temporary directories that are removed at exit.
 */
#ifndef TROUPE_FUZZ_SUPPORT_H
#define TROUPE_FUZZ_SUPPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "troupe/err.h"

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int
LLVMFuzzerInitialize(int *argc, char ***argv);

/* Prints "property failed: <what> at file:line" and aborts. */
#define FZ_CHECK(cond, ...)                                                    \
    do {                                                                       \
        if (!(cond))                                                           \
            fz_fail(__FILE__, __LINE__, #cond, __VA_ARGS__);                   \
    } while (0)

/* Aborts unless e is one of the n errors listed after it (OK counts only
 * when listed). */
#define FZ_ERR_IN(e, ...)                                                      \
    fz_err_in(__FILE__, __LINE__, #e, (e), (const troupe_err[]){__VA_ARGS__},  \
              sizeof((const troupe_err[]){__VA_ARGS__}) / sizeof(troupe_err))

_Noreturn void
fz_fail(const char *file, int line, const char *cond, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
void
fz_err_in(const char *file, int line, const char *what, troupe_err e,
          const troupe_err *ok, size_t n);

/* The input as a stream of fields. Reads past the end give zeros and
 * empty spans. */
typedef struct fz_in {
    const uint8_t *p;
    size_t n;
} fz_in;

uint8_t
fz_u8(fz_in *in);
uint32_t
fz_u32(fz_in *in);
uint64_t
fz_u64(fz_in *in);
/* The next min(n, left) bytes. */
const uint8_t *
fz_take(fz_in *in, size_t n, size_t *got);
/* A span whose length is the next byte (at most what is left). */
const uint8_t *
fz_span8(fz_in *in, size_t *got);
/* A span whose length is the next two bytes, big-endian. */
const uint8_t *
fz_span16(fz_in *in, size_t *got);

/* Whether a[0..an) and b[0..bn) are the same bytes. */
bool
fz_same(const void *a, size_t an, const void *b, size_t bn);

/* A new empty directory under $TMPDIR, removed (with what it holds) at
 * exit. Aborts if none can be made. */
char *
fz_tempdir(const char *tag);

#endif
