/*
 * The power-loss model shared by the LD_PRELOAD shim
 * (tests/shims/powerloss_shim.c, libtroupe_powerloss_shim.so) and the
 * restore step (powerloss_restore.c, tool `powerloss_restore`).
 *
 * The shim watches one flat directory (TROUPE_POWERLOSS_DIR) and keeps, in a
 * side directory (the journal, TROUPE_POWERLOSS_JOURNAL, default
 * "<DIR>.powerloss"), what a power loss would leave of it:
 *
 *   <journal>/names   the durable directory: one line per file,
 *                     "<fid> <name>\n". Replaced atomically (write
 *                     names.tmp, rename) at every fsync of the directory.
 *                     Written last at shim start-up (before main runs), so
 *                     no names file means the process never got to touch
 *                     the directory and there is nothing to restore.
 *   <journal>/f<fid>  the durable content of file <fid>: its bytes as of
 *                     its last successful fsync/fdatasync. Absent: the file
 *                     was never synced and its durable content is empty.
 *
 * A file id (fid) names an inode for the life of one process, so a rename
 * keeps the file's content and only the directory decides under which name
 * it survives. At start-up every file already in the directory is taken as
 * durable (the previous restore made it so) and copied into the journal.
 *
 * Restore (after the process was SIGKILLed; without the shim): every file
 * not in names is deleted, every name in names gets exactly the content of
 * its f<fid> (empty when absent), and the journal is emptied.
 */
#ifndef TROUPE_POWERLOSS_H
#define TROUPE_POWERLOSS_H

#include <stdint.h>

#define PL_ENV_DIR "TROUPE_POWERLOSS_DIR"
#define PL_ENV_JOURNAL "TROUPE_POWERLOSS_JOURNAL"
#define PL_JOURNAL_SUFFIX ".powerloss"
#define PL_NAMES "names"
#define PL_NAMES_TMP "names.tmp"
/*
 * One name the model leaves alone: troupe's reserve file (storage/src/
 * space.c), space held back and never read. It is not copied at start-up,
 * not watched and never durably named, so a restore deletes it: a power
 * loss may really take it (troupe never syncs it), and the next open makes
 * it again. Copying its 32 MiB in and out of the journal every cycle made
 * the power-loss loops a third slower for nothing.
 */
#define PL_UNTRACKED "TROUPE-RESERVE"

typedef struct pl_restore_stats {
    int journal;           /* 1 when a journal was found and applied */
    unsigned files_kept;   /* names restored to their durable content */
    unsigned files_cut;    /* of which the content changed */
    unsigned files_gone;   /* files deleted (not durably named) */
    uint64_t bytes_before; /* total size of the directory before */
    uint64_t bytes_after;  /* and after */
} pl_restore_stats;

/*
 * Rolls `dir` back to what `journal` says is durable (see above) and
 * empties the journal. journal NULL: "<dir>.powerloss". Returns 0, or -1
 * with errno set and a line on stderr. With no journal (the process never
 * started) the directory is left as it is and st->journal is 0.
 */
int
pl_restore(const char *dir, const char *journal, pl_restore_stats *st);

#endif
