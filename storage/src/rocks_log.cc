/*
 * RocksDB's info log, written by troupe.
 *
 * Why not RocksDB's own. Its logger (EnvLogger in 7.8.3) buffers lines in a
 * WritableFileWriter and ignores a failed flush, but the writer remembers
 * the failure, and Debian builds RocksDB with assertions: the next line
 * written after a failed flush (the very "IO error" line RocksDB logs when
 * the WAL write fails on a full disk, or the warning about an OPTIONS file
 * it could not write during a column family creation) hits
 * WritableFileWriter::AssertFalseAndGetStatusForPrevError and aborts the
 * process. Measured before this file: 14 of 15 runs filling a 50 MiB
 * filesystem aborted. The C API of 7.8 accepts a logger object
 * (rocksdb_options_set_info_log) but offers no way to make one, so this one
 * file is C++.
 *
 * What this logger does instead: one write(2) per line, no buffer, under a
 * mutex. A line that cannot be written is dropped and counted; nothing
 * remembers the failure, so the next line simply tries again (the disk
 * may have room by then), and the operator is told once per streak of
 * failures through the db's logger. The file is bounded: at
 * TROUPE_ROCKS_LOG_MAX bytes (or the size given) it becomes LOG.old and a new
 * LOG begins, so the info log never holds more than twice that. At open the
 * previous LOG becomes LOG.old, where RocksDB would have named it
 * LOG.old.<time> and kept keep_log_file_num of them.
 *
 * Lines look like RocksDB's (time, thread id, message; "[WARN] " and the
 * like come from rocksdb::Logger's level dispatch), so tools that read a
 * RocksDB LOG read this one. Nothing here may throw into RocksDB: the
 * only allocation after construction is a malloc for a line longer than
 * the stack buffer.
 */
#include "rocks_log.h"

#include <fcntl.h>
#include <pthread.h>
#include <sys/time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <memory>
#include <mutex>
#include <new>
#include <string>

#include <rocksdb/env.h>

/*
 * The C API's wrapper exactly as RocksDB's c.cc defines it (one shared
 * pointer; 8.x's rocksdb_logger_create_stderr_logger fills the same
 * struct). rocksdb_options_set_info_log copies the pointer, so the options
 * and the db each hold a reference and the logger lives until the last
 * one is gone.
 */
struct rocksdb_logger_t {
    std::shared_ptr<rocksdb::Logger> rep;
};

namespace
{

constexpr size_t kStackLine = 512;

/* What both of our loggers answer (no dynamic_cast: RocksDB's RTTI is
 * not ours to rely on). */
class TroupeLog : public rocksdb::Logger
{
  public:
    explicit TroupeLog(rocksdb::InfoLogLevel level) : rocksdb::Logger(level)
    {
    }
    virtual uint64_t Dropped() const = 0;
};
constexpr size_t kMaxLine = 64 * 1024;

class InfoLog final : public TroupeLog
{
  public:
    InfoLog(std::string path, size_t max_bytes, const troupe_logger &lg)
        : TroupeLog(rocksdb::InfoLogLevel::INFO_LEVEL), path_(std::move(path)),
          old_(path_ + ".old"), max_(max_bytes), lg_(lg)
    {
        std::lock_guard<std::mutex> g(mu_);
        (void)rename(path_.c_str(), old_.c_str()); /* absent: fine */
        OpenLocked();
    }

    ~InfoLog() override
    {
        if (fd_ >= 0)
            close(fd_);
    }

    using rocksdb::Logger::Logv;
    void Logv(const char *format, va_list ap) override;

    uint64_t Dropped() const override
    {
        return dropped_.load(std::memory_order_relaxed);
    }

  protected:
    rocksdb::Status CloseImpl() override
    {
        std::lock_guard<std::mutex> g(mu_);
        if (fd_ >= 0)
            close(fd_);
        fd_ = -1;
        closed_for_good_ = true;
        return rocksdb::Status::OK();
    }

  private:
    void OpenLocked()
    {
        fd_ = open(path_.c_str(),
                   O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644);
        size_ = 0;
        /* ENOENT: the db directory does not exist yet (RocksDB creates it
         * later in the open); the next line tries again. */
        if (fd_ < 0 && errno != ENOENT)
            NoteFailureLocked(errno);
    }

    void NoteFailureLocked(int err)
    {
        dropped_.fetch_add(1, std::memory_order_relaxed);
        if (failing_)
            return;
        failing_ = true;
        const troupe_log_field f[] = {{"file", path_.c_str()}};
        troupe_log_fields(&lg_, TROUPE_LOG_WARN, "storage", f, 1,
                          "info log %s: %s; RocksDB's log lines are "
                          "dropped until it can be written again",
                          path_.c_str(), strerror(err));
    }

    void Put(const char *line, size_t n);

    const std::string path_, old_;
    const size_t max_;
    const troupe_logger lg_;
    std::mutex mu_; /* guards everything below */
    int fd_ = -1;
    size_t size_ = 0;
    bool failing_ = false;
    bool closed_for_good_ = false;
    std::atomic<uint64_t> dropped_{0};
};

void
InfoLog::Put(const char *line, size_t n)
{
    std::lock_guard<std::mutex> g(mu_);
    if (closed_for_good_) {
        dropped_.fetch_add(1, std::memory_order_relaxed);
        return;
    }
    if (fd_ >= 0 && size_ > 0 && size_ + n > max_) {
        close(fd_);
        (void)rename(path_.c_str(), old_.c_str()); /* if not, O_TRUNC */
        OpenLocked();
    }
    if (fd_ < 0) {
        OpenLocked();
        if (fd_ < 0) {
            dropped_.fetch_add(1, std::memory_order_relaxed);
            return;
        }
    }
    ssize_t w = write(fd_, line, n);
    if (w == static_cast<ssize_t>(n)) {
        size_ += n;
        failing_ = false;
        return;
    }
    int err = w < 0 ? errno : ENOSPC;
    /* A short write left part of the line: cut it, so that the next line
     * starts on a line of its own. */
    if (w > 0 && ftruncate(fd_, static_cast<off_t>(size_)) != 0)
        size_ += static_cast<size_t>(w);
    NoteFailureLocked(err);
}

void
InfoLog::Logv(const char *format, va_list ap)
{
    char stack[kStackLine];
    char *buf = stack;
    size_t cap = sizeof(stack);
    struct timeval tv;
    gettimeofday(&tv, nullptr);
    struct tm t;
    localtime_r(&tv.tv_sec, &t);
    for (int attempt = 0; attempt < 2; attempt++) {
        int p = snprintf(buf, cap, "%04d/%02d/%02d-%02d:%02d:%02d.%06ld %llx ",
                         t.tm_year + 1900, t.tm_mon + 1, t.tm_mday, t.tm_hour,
                         t.tm_min, t.tm_sec, static_cast<long>(tv.tv_usec),
                         static_cast<unsigned long long>(pthread_self()));
        size_t len = p > 0 ? static_cast<size_t>(p) : 0;
        if (len < cap) {
            va_list copy;
            va_copy(copy, ap);
            int m = vsnprintf(buf + len, cap - len, format, copy);
            va_end(copy);
            len += m > 0 ? static_cast<size_t>(m) : 0;
        }
        if (len >= cap - 1 && attempt == 0) {
            char *big = static_cast<char *>(malloc(kMaxLine));
            if (big != nullptr) {
                buf = big;
                cap = kMaxLine;
                continue;
            }
        }
        if (len > cap - 2)
            len = cap - 2; /* cut, leaving room for the newline */
        if (len == 0 || buf[len - 1] != '\n')
            buf[len++] = '\n';
        Put(buf, len);
        break;
    }
    if (buf != stack)
        free(buf);
}

/*
 * The info log of a read-only db: no file (a read-only open writes
 * nothing in the directory), each line a record of the db's logger, sys
 * "rocksdb". RocksDB's levels map one step down, since the caller gets
 * every failure as a troupe_err anyway: DEBUG, INFO and HEADER lines are
 * troupe DEBUG, WARN is INFO, ERROR and FATAL are WARN.
 */
class ForwardLog final : public TroupeLog
{
  public:
    explicit ForwardLog(const troupe_logger &lg)
        : TroupeLog(rocksdb::InfoLogLevel::DEBUG_LEVEL), lg_(lg)
    {
    }

    uint64_t Dropped() const override
    {
        return 0;
    }

    void Logv(const char *format, va_list ap) override
    {
        Forward(TROUPE_LOG_DEBUG, format, ap);
    }

    void Logv(const rocksdb::InfoLogLevel level, const char *format,
              va_list ap) override
    {
        troupe_log_level l = TROUPE_LOG_DEBUG;
        if (level == rocksdb::InfoLogLevel::WARN_LEVEL)
            l = TROUPE_LOG_INFO;
        else if (level == rocksdb::InfoLogLevel::ERROR_LEVEL ||
                 level == rocksdb::InfoLogLevel::FATAL_LEVEL)
            l = TROUPE_LOG_WARN;
        Forward(l, format, ap);
    }

  private:
    void Forward(troupe_log_level l, const char *format, va_list ap)
    {
        if (!troupe_log_enabled(&lg_, l))
            return; /* not even formatted */
        char buf[kStackLine];
        va_list copy;
        va_copy(copy, ap);
        int n = vsnprintf(buf, sizeof(buf), format, copy);
        va_end(copy);
        if (n < 0)
            return;
        size_t len = static_cast<size_t>(n) < sizeof(buf)
                         ? static_cast<size_t>(n)
                         : sizeof(buf) - 1;
        while (len > 0 && buf[len - 1] == '\n')
            buf[--len] = '\0';
        troupe_log(&lg_, l, "rocksdb", "%s", buf);
    }

    const troupe_logger lg_;
};

} // namespace

extern "C" rocksdb_logger_t *
troupe__rocks_log_create_forward(const troupe_logger *lg)
{
    if (lg == nullptr)
        return nullptr;
    try {
        std::unique_ptr<rocksdb_logger_t> l(new rocksdb_logger_t);
        l->rep = std::make_shared<ForwardLog>(*lg);
        return l.release();
    } catch (...) {
        return nullptr;
    }
}

extern "C" rocksdb_logger_t *
troupe__rocks_log_create(const char *dir, size_t max_bytes,
                         const troupe_logger *lg)
{
    if (dir == nullptr || max_bytes == 0 || lg == nullptr)
        return nullptr;
    try {
        std::unique_ptr<rocksdb_logger_t> l(new rocksdb_logger_t);
        l->rep = std::make_shared<InfoLog>(std::string(dir) + "/LOG", max_bytes,
                                           *lg);
        return l.release();
    } catch (...) {
        return nullptr;
    }
}

extern "C" void
troupe__rocks_log_destroy(rocksdb_logger_t *l)
{
    delete l;
}

extern "C" uint64_t
troupe__rocks_log_dropped(const rocksdb_logger_t *l)
{
    if (l == nullptr || !l->rep)
        return 0;
    return static_cast<const TroupeLog *>(l->rep.get())->Dropped();
}
