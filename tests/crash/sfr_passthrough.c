/*
 * A companion preload for the I/O-error sweep, loaded before the EIO shim
 * (tests/shims/fault_shim.c): sync_file_range goes straight to the kernel.
 *
 * Why: the EIO shim fails sync_file_range with the other sync calls, but
 * RocksDB 7.8.3 probes it with flags 0 (a no-op that a real disk, healthy
 * or dying, answers with 0) each time it opens a file for writing, and
 * Debian's assertion-enabled build aborts when that probe fails with
 * anything but ENOSYS (io_posix.cc, IsSyncFileRangeSupported). That abort
 * is an artifact of the injection, not a behaviour to test; the sweep
 * targets write and fsync/fdatasync, which the EIO shim still fails.
 * sync_file_range is not a durability point anyway (see powerloss_shim.c).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>

int
sync_file_range(int fd, off_t off, off_t n, unsigned int flags)
{
    return (int)syscall(SYS_sync_file_range, fd, off, n, flags);
}
