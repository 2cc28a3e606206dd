#include "store/file/file_util.h"

#include <fcntl.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <ctime>
#include <random>
#include <system_error>

namespace s3stream::internal {
namespace {

std::string ErrnoText(int err) { return std::error_code(err, std::generic_category()).message(); }

}  // namespace

bool StartsWith(std::string_view s, std::string_view prefix) { return s.substr(0, prefix.size()) == prefix; }

// One errno -> Status mapping for every operation, so the codes match the S3 driver's.
Status ErrnoStatus(int err, const std::string& object) {
  switch (err) {
    case ENOENT:
    case ENOTDIR:
      return NotFound(object + " does not exist");
    case EACCES:
    case EPERM:
    case EROFS:
      return PermissionDenied(object + ": " + ErrnoText(err) + "; check the file's permissions");
    case ENAMETOOLONG:
      return InvalidArgument(object + ": a path segment is too long for the local file system");
    default:
      return Internal(object + ": " + ErrnoText(err));
  }
}

std::string RandomHex(size_t bytes) {
  // Seeded per thread from the OS, and again after fork (a child inherits its parent's generator
  // state and would otherwise draw the same temp names and upload ids).
  thread_local std::mt19937_64 rng;
  thread_local pid_t seeded_for = 0;
  if (seeded_for != ::getpid()) {
    std::random_device rd;
    seeded_for = ::getpid();
    rng.seed((uint64_t{rd()} << 32) ^ rd() ^ static_cast<uint64_t>(seeded_for));
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes * 2);
  for (size_t i = 0; i < bytes; ++i) {
    const auto b = static_cast<uint8_t>(rng());
    out.push_back(kHex[b >> 4]);
    out.push_back(kHex[b & 15]);
  }
  return out;
}

uint64_t MtimeNs(const struct stat& st) {
  return static_cast<uint64_t>(st.st_mtim.tv_sec) * 1000000000ull + static_cast<uint64_t>(st.st_mtim.tv_nsec);
}

// Cheap to compute from one stat, and different for every version this driver writes.
std::string MakeEtag(const struct stat& st) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%" PRIx64 "-%" PRIx64 "-%" PRIx64, static_cast<uint64_t>(st.st_size),
                MtimeNs(st), static_cast<uint64_t>(st.st_ino));
  return buf;
}

std::string Iso8601(const struct timespec& t) {
  struct tm tm {};
  time_t secs = t.tv_sec;
  gmtime_r(&secs, &tm);
  char buf[96];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1,
                tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<int>(t.tv_nsec / 1000000));
  return buf;
}

std::string_view StripQuotes(std::string_view s) {
  if (s.size() >= 2 && s.front() == '"' && s.back() == '"') return s.substr(1, s.size() - 2);
  return s;
}

std::string RangeText(const ByteRange& r) {
  return "[" + std::to_string(r.start) + ", " + (r.end ? std::to_string(*r.end) : std::string("end")) + ")";
}

std::string JoinPath(const std::string& dir, const std::string& name) {
  return dir == "/" ? "/" + name : dir + "/" + name;
}

std::string JoinRoot(const std::string& root, std::string_view rel) {
  if (rel.empty()) return root;
  return root == "/" ? "/" + std::string(rel) : root + "/" + std::string(rel);
}

std::vector<std::string_view> SplitSegments(std::string_view s) {
  std::vector<std::string_view> out;
  size_t begin = 0;
  while (true) {
    const size_t slash = s.find('/', begin);
    out.push_back(s.substr(begin, slash == std::string_view::npos ? std::string_view::npos : slash - begin));
    if (slash == std::string_view::npos) return out;
    begin = slash + 1;
  }
}

Fd::~Fd() {
  if (fd_ >= 0) ::close(fd_);
}

int Fd::Close() {
  const int rc = ::close(fd_);
  fd_ = -1;
  return rc;
}

Status WriteAll(int fd, std::span<const uint8_t> bytes, const std::string& object) {
  while (!bytes.empty()) {
    const ssize_t n = ::write(fd, bytes.data(), bytes.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus(errno, object);
    }
    bytes = bytes.subspan(static_cast<size_t>(n));
  }
  return Status::Ok();
}

// Appends the whole of `src_fd` (from offset 0) to `dst_fd`: copy_file_range lets the kernel move
// the bytes (or share extents), with a read/write fallback where it is unsupported.
Status CopyFd(int src_fd, int dst_fd, uint64_t size, const std::string& object) {
  uint64_t done = 0;
  bool use_copy_range = true;
  std::vector<uint8_t> buf;
  while (done < size) {
    if (use_copy_range) {
      loff_t in_off = static_cast<loff_t>(done);
      const ssize_t n = ::copy_file_range(src_fd, &in_off, dst_fd, nullptr, size - done, 0);
      if (n > 0) {
        done += static_cast<uint64_t>(n);
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EXDEV || errno == EINVAL || errno == ENOSYS || errno == EOPNOTSUPP)) {
        use_copy_range = false;
        continue;
      }
      if (n == 0) return Internal(object + ": a part shrank while being assembled");
      return ErrnoStatus(errno, object);
    }
    if (buf.empty()) buf.resize(kChunkBytes);
    const ssize_t n = ::pread(src_fd, buf.data(), std::min<uint64_t>(buf.size(), size - done),
                              static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoStatus(errno, object);
    if (n == 0) return Internal(object + ": a part shrank while being assembled");
    S3S_RETURN_IF_ERROR(WriteAll(dst_fd, {buf.data(), static_cast<size_t>(n)}, object));
    done += static_cast<uint64_t>(n);
  }
  return Status::Ok();
}

}  // namespace s3stream::internal
