#include "store/file/file_uploads.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <tuple>
#include <vector>

#include "store/file/file_util.h"

namespace s3stream::internal {
namespace {

// Longer than any key S3 allows (1,024 bytes): a longer key file was not written by this driver.
constexpr size_t kMaxKeyFileBytes = 4096;

// Threading: one walk per call, on one pool thread.
struct UploadWalk {
  const std::string& prefix;
  std::vector<UploadInfo> found;
  Status error;

  // The names in `dir` (files and directories alike); none when it vanished meanwhile.
  std::vector<std::pair<std::string, unsigned char>> ReadDir(const std::string& dir) {
    std::vector<std::pair<std::string, unsigned char>> out;
    DIR* d = ::opendir(dir.c_str());
    if (d == nullptr) {
      if (errno != ENOENT && errno != ENOTDIR && error.ok()) error = ErrnoStatus(errno, "file://" + dir);
      return out;
    }
    while (struct dirent* e = ::readdir(d)) {
      std::string_view name = e->d_name;
      if (name != "." && name != "..") out.emplace_back(std::string(name), e->d_type);
    }
    ::closedir(d);
    return out;
  }

  // The key an upload's staging directory names, or "" when it is not a whole upload of this
  // driver's (a half-created one, or something else planted there).
  static std::string StagedKey(const std::string& upload_dir, struct stat* st) {
    const std::string path = upload_dir + "/" + std::string(kUploadKeyFile);
    Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK));
    if (fd.get() < 0 || ::fstat(fd.get(), st) != 0 || !S_ISREG(st->st_mode)) return {};
    std::string key(kMaxKeyFileBytes + 1, '\0');
    size_t got = 0;
    while (got < key.size()) {
      const ssize_t n = ::read(fd.get(), key.data() + got, key.size() - got);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      got += static_cast<size_t>(n);
    }
    key.resize(got > kMaxKeyFileBytes ? 0 : got);
    return key;
  }

  // The uploads staged in directory `dir`, whose keys all start with `key_base` ("" or "a/b/").
  void VisitStaging(const std::string& dir, const std::string& key_base) {
    const std::string staging = JoinPath(dir, std::string(kStagingDir));
    for (const auto& entry : ReadDir(staging)) {
      const std::string& id = entry.first;
      struct stat st;
      const std::string key = StagedKey(JoinPath(staging, id), &st);
      // Only an upload of a key in this directory is one Abort would find again (UploadDir).
      const bool here = key.size() > key_base.size() && StartsWith(key, key_base) &&
                        key.find('/', key_base.size()) == std::string::npos;
      if (here && StartsWith(key, prefix)) found.push_back(UploadInfo{key, id, Iso8601(st.st_mtim)});
    }
  }

  void Walk(const std::string& dir, const std::string& key_base) {
    if (!StartsWith(key_base, prefix) && !StartsWith(prefix, key_base)) return;
    VisitStaging(dir, key_base);
    for (const auto& [name, type] : ReadDir(dir)) {
      if (!error.ok()) return;
      if (name == kStagingDir || StartsWith(name, kTempPrefix)) continue;
      const std::string path = JoinPath(dir, name);
      struct stat st;
      // lstat: a symlinked directory is not followed (it may lead out of the root, or in a loop).
      const bool is_dir = type == DT_DIR || (type == DT_UNKNOWN && ::lstat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode));
      if (is_dir) Walk(path, key_base + name + "/");
    }
  }
};

// Whether `u` comes after the markers: keys after key_marker, and with an upload id marker, the
// later uploads of key_marker too (S3's rule).
bool AfterMarkers(const UploadInfo& u, const UploadListRequest& r) {
  if (r.key_marker.empty()) return true;
  if (r.upload_id_marker.empty()) return u.key > r.key_marker;
  return std::tie(u.key, u.upload_id) > std::tie(r.key_marker, r.upload_id_marker);
}

}  // namespace

Result<UploadPage> ListStagedUploads(const std::string& root, const UploadListRequest& request) {
  const std::string& prefix = request.prefix;
  if (request.max_uploads < 0) {
    return InvalidArgument("listing the uploads under file://" + JoinRoot(root, prefix) + ": max_uploads must not be negative");
  }
  // Start at the directory holding the prefix's last (possibly partial) segment.
  const size_t slash = prefix.rfind('/');
  const std::string dir_key = slash == std::string::npos ? std::string() : prefix.substr(0, slash + 1);
  const std::string start_dir = dir_key.empty() ? root : JoinRoot(root, std::string_view(dir_key).substr(0, dir_key.size() - 1));
  for (std::string_view seg : dir_key.empty() ? std::vector<std::string_view>() : SplitSegments(std::string_view(dir_key).substr(0, dir_key.size() - 1))) {
    if (seg == "." || seg == "..") {
      return InvalidArgument("listing the uploads under file://" + JoinRoot(root, prefix) +
                             ": '.' and '..' segments are not allowed in a prefix");
    }
    if (seg.empty() || seg == kStagingDir || StartsWith(seg, kTempPrefix)) return UploadPage{};  // no key is there
  }
  UploadWalk walk{prefix, {}, Status::Ok()};
  walk.Walk(start_dir, dir_key);
  if (!walk.error.ok()) return walk.error;

  std::sort(walk.found.begin(), walk.found.end(),
            [](const UploadInfo& a, const UploadInfo& b) { return std::tie(a.key, a.upload_id) < std::tie(b.key, b.upload_id); });
  UploadPage page;
  const size_t max = static_cast<size_t>(std::min(request.max_uploads, kMaxListKeys));
  for (UploadInfo& upload : walk.found) {
    if (!AfterMarkers(upload, request)) continue;
    if (page.uploads.size() == max) {
      page.truncated = true;
      page.next_key_marker = page.uploads.back().key;
      page.next_upload_id_marker = page.uploads.back().upload_id;
      break;
    }
    page.uploads.push_back(std::move(upload));
  }
  return page;
}

}  // namespace s3stream::internal
