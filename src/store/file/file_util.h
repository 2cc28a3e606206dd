// What the file driver's operations share: the reserved names, the errno -> Status mapping (one
// place, so every operation's codes match the S3 driver's), ETags from stat, paths, and file I/O.
#pragma once

#include <sys/stat.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "s3stream/object_store.h"
#include "s3stream/status.h"

namespace s3stream::internal {

inline constexpr size_t kChunkBytes = 1 << 20;  // one pread, one OnData call
inline constexpr int kMaxListKeys = 1000;       // S3's cap on max-keys
inline constexpr int kMaxPartNumber = 10000;    // S3's limit
inline constexpr uint64_t kMinPartBytes = 5ull << 20;
inline constexpr std::string_view kStagingDir = ".s3stream-multipart";
inline constexpr std::string_view kTempPrefix = ".s3stream-tmp-";
inline constexpr std::string_view kUploadKeyFile = "key";

bool StartsWith(std::string_view s, std::string_view prefix);
Status ErrnoStatus(int err, const std::string& object);
// Hex of `bytes` random bytes; seeded per thread and again after fork.
std::string RandomHex(size_t bytes);
uint64_t MtimeNs(const struct stat& st);
// Not an MD5 (see file_store.h): "<size>-<mtime ns>-<inode>" in hex.
std::string MakeEtag(const struct stat& st);
std::string Iso8601(const struct timespec& t);
// S3 reports ETags in quotes and callers may pass them either way.
std::string_view StripQuotes(std::string_view s);
std::string RangeText(const ByteRange& r);
std::string JoinPath(const std::string& dir, const std::string& name);
// The file of key `rel` under `root` (absolute, normalised, no trailing '/' unless it is "/").
std::string JoinRoot(const std::string& root, std::string_view rel);
std::vector<std::string_view> SplitSegments(std::string_view s);

// Closes the descriptor when it goes out of scope.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd();
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  // Closes now, reporting the error close() may carry for buffered writes.
  int Close();

 private:
  int fd_;
};

Status WriteAll(int fd, std::span<const uint8_t> bytes, const std::string& object);
// Appends the whole of `src_fd` (from offset 0) to `dst_fd`.
Status CopyFd(int src_fd, int dst_fd, uint64_t size, const std::string& object);

}  // namespace s3stream::internal
