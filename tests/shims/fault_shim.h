/*
 * Control interface of the LD_PRELOAD fault-injection shim
 * (libtroupe_fault_shim.so). A test finds these through
 * dlsym(RTLD_DEFAULT, ...): when the shim is not preloaded they are absent,
 * and a fault test must fail rather than pass vacuously.
 *
 * What it does: after `after` more successful matching calls, every later
 * matching call fails with errno (EIO unless set), until disarmed; a dead
 * disk does not come back. Matching calls are the selected kinds on file
 * descriptors whose path (/proc/self/fd) begins with `path_prefix` (NULL
 * or "": any descriptor; avoid that, the test harness writes too).
 *
 * The same can be armed at process start with environment variables:
 *   TROUPE_FAULT_SYNC_AFTER=N   fsync, fdatasync, sync_file_range, syncfs
 *   TROUPE_FAULT_WRITE_AFTER=N  write, pwrite, pwrite64, writev, pwritev
 *   TROUPE_FAULT_PATH=/prefix   restricts both
 *   TROUPE_FAULT_ERRNO=5        errno to fail with
 */
#ifndef TROUPE_FAULT_SHIM_H
#define TROUPE_FAULT_SHIM_H

#define TROUPE_FAULT_SYNC 1
#define TROUPE_FAULT_WRITE 2

/* Arms `kinds` (a mask of the above); replaces any previous arming. */
typedef void (*troupe_fault_arm_fn)(int kinds, long after,
                                    const char *path_prefix, int err);
/* Back to pass-through. */
typedef void (*troupe_fault_disarm_fn)(void);
/* Calls failed since the last arm. */
typedef long (*troupe_fault_hits_fn)(void);

#define TROUPE_FAULT_ARM_SYM "troupe_fault_arm"
#define TROUPE_FAULT_DISARM_SYM "troupe_fault_disarm"
#define TROUPE_FAULT_HITS_SYM "troupe_fault_hits"

#endif
