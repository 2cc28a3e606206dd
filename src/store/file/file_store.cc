#include "store/file/file_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <functional>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "store/file/file_list.h"
#include "store/file/file_uploads.h"
#include "store/file/file_util.h"
#include "util/thread_pool.h"

namespace s3stream {
namespace internal {
namespace {

// The directory driver. Threading: every public method only copies its arguments into a task for
// pool_; the tasks share nothing mutable but the file system, so no lock is needed here. root_ is
// immutable after construction.
class FileStore final : public ObjectStore {
 public:
  explicit FileStore(std::string root) : root_(std::move(root)) {}

  std::string Describe(const std::string& key) const override { return "file://" + JoinRoot(key); }

  Future<Status> Get(const std::string& key, const GetOptions& options, std::shared_ptr<BodySink> sink) override {
    return Run<Status>([this, key, options, sink]() mutable {
      Status status = DoGet(key, options, *sink);
      sink.reset();  // release the caller's sink before it learns the GET is over
      return status;
    });
  }

  Future<Result<ObjectInfo>> Head(const std::string& key) override {
    return Run<Result<ObjectInfo>>([this, key] { return DoHead(key); });
  }

  Future<Result<ListPage>> List(const ListRequest& request) override {
    return Run<Result<ListPage>>([this, request] { return ListTree(root_, request); });
  }

  Future<Result<std::string>> Put(const std::string& key, Buffer data) override {
    return Run<Result<std::string>>([this, key, data] { return DoPut(key, data); });
  }

  Future<Status> Delete(const std::string& key) override {
    return Run<Status>([this, key] { return DoDelete(key); });
  }

  Future<Result<std::string>> CreateMultipartUpload(const std::string& key) override {
    return Run<Result<std::string>>([this, key] { return DoCreateMultipart(key); });
  }

  Future<Result<std::string>> UploadPart(const std::string& key, const std::string& upload_id, int part_number,
                                         Buffer data) override {
    return Run<Result<std::string>>(
        [this, key, upload_id, part_number, data] { return DoUploadPart(key, upload_id, part_number, data); });
  }

  Future<Status> CompleteMultipartUpload(const std::string& key, const std::string& upload_id,
                                         const std::vector<CompletedPart>& parts) override {
    return Run<Status>([this, key, upload_id, parts] { return DoCompleteMultipart(key, upload_id, parts); });
  }

  Future<Status> AbortMultipartUpload(const std::string& key, const std::string& upload_id) override {
    return Run<Status>([this, key, upload_id] { return DoAbortMultipart(key, upload_id); });
  }

  Future<Result<UploadPage>> ListMultipartUploads(const UploadListRequest& request) override {
    return Run<Result<UploadPage>>([this, request] { return ListStagedUploads(root_, request); });
  }

 private:
  template <typename T, typename Fn>
  Future<T> Run(Fn fn) {
    Promise<T> promise;
    Future<T> future = promise.future();
    pool_.Submit([promise, fn = std::move(fn)]() mutable { promise.Set(fn()); });
    return future;
  }

  std::string JoinRoot(std::string_view rel) const { return internal::JoinRoot(root_, rel); }

  Status CheckKey(const std::string& key) const {
    auto invalid = [&](const std::string& why) {
      return InvalidArgument("invalid key \"" + key + "\" for " + Describe("") + ": " + why);
    };
    if (key.empty()) return invalid("the key is empty");
    if (key.find('\0') != std::string::npos) return invalid("keys cannot contain NUL bytes");
    const auto segments = SplitSegments(key);
    for (std::string_view seg : segments) {
      if (seg.empty()) return invalid("the file store cannot hold keys with empty segments (leading, trailing or doubled '/')");
      if (seg == "." || seg == "..") return invalid("'.' and '..' segments are not allowed; keys must stay inside the root");
      if (StartsWith(seg, kTempPrefix)) return invalid("names starting with \".s3stream-tmp-\" are reserved");
      if (seg == kStagingDir) return invalid("\".s3stream-multipart\" is reserved for multipart uploads");
    }
    return Status::Ok();
  }

  // mkdir -p for the directories above `key` (which CheckKey accepted).
  Status MakeParents(const std::string& key) const {
    std::error_code ec;
    std::filesystem::create_directories(root_, ec);
    if (ec) return ErrnoStatus(ec.value(), Describe(""));
    size_t slash = key.find('/');
    while (slash != std::string::npos) {
      const std::string dir = JoinRoot(std::string_view(key).substr(0, slash));
      if (::mkdir(dir.c_str(), 0777) != 0 && errno != EEXIST) return ErrnoStatus(errno, "file://" + dir);
      struct stat st;
      if (::stat(dir.c_str(), &st) != 0) return ErrnoStatus(errno, "file://" + dir);
      if (!S_ISDIR(st.st_mode)) {
        return InvalidArgument(Describe(key) + " cannot be created: file://" + dir +
                               " is a file, and the file store cannot hold both a key and keys below it");
      }
      slash = key.find('/', slash + 1);
    }
    return Status::Ok();
  }

  // Writes a new file beside `target` and renames it into place, so readers see the old content or
  // the new, never a partial file. Returns the new ETag.
  Result<std::string> WriteAtomically(const std::string& target, const std::string& object,
                                      const std::function<Status(int fd)>& write_body) const {
    const std::string dir = target.substr(0, target.rfind('/') + 1);
    std::string tmp;
    int raw_fd = -1;
    for (int attempt = 0; attempt < 8 && raw_fd < 0; ++attempt) {
      tmp = dir + std::string(kTempPrefix) + RandomHex(8);
      raw_fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
      if (raw_fd < 0 && errno != EEXIST) return ErrnoStatus(errno, object);
    }
    if (raw_fd < 0) return Internal(object + ": could not create a unique temporary file");
    Fd fd(raw_fd);
    auto fail = [&](Status s) -> Result<std::string> {
      ::unlink(tmp.c_str());
      return s;
    };

    Status status = write_body(fd.get());
    // fsync before rename: a PUT that returned OK survives a crash, as on S3.
    if (status.ok() && ::fsync(fd.get()) != 0) status = ErrnoStatus(errno, object);
    if (!status.ok()) return fail(status);

    struct stat st;
    if (::fstat(fd.get(), &st) != 0) return fail(ErrnoStatus(errno, object));
    // Make the new mtime strictly later than the replaced file's: with coarse file system clocks two
    // quick PUTs could otherwise share (size, mtime) and, through inode reuse, an ETag.
    struct stat old;
    if (::stat(target.c_str(), &old) == 0 && S_ISREG(old.st_mode) && MtimeNs(st) <= MtimeNs(old)) {
      const uint64_t ns = MtimeNs(old) + 1;
      struct timespec times[2];
      times[0].tv_sec = 0;
      times[0].tv_nsec = UTIME_OMIT;
      times[1].tv_sec = static_cast<time_t>(ns / 1000000000ull);
      times[1].tv_nsec = static_cast<long>(ns % 1000000000ull);
      if (::futimens(fd.get(), times) != 0 || ::fstat(fd.get(), &st) != 0) return fail(ErrnoStatus(errno, object));
    }
    if (fd.Close() != 0) return fail(ErrnoStatus(errno, object));
    if (::rename(tmp.c_str(), target.c_str()) != 0) {
      const int err = errno;
      if (err == EISDIR || err == ENOTEMPTY || err == EEXIST) {
        return fail(InvalidArgument(object + " is a directory; the file store cannot hold both a key and keys below it"));
      }
      return fail(ErrnoStatus(err, object));
    }
    return MakeEtag(st);
  }

  Status DoGet(const std::string& key, const GetOptions& options, BodySink& sink) const {
    S3S_RETURN_IF_ERROR(CheckKey(key));
    const std::string path = JoinRoot(key);
    const std::string object = Describe(key);
    // O_NONBLOCK: opening a FIFO planted under the root must not hang a pool thread.
    Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY));
    if (fd.get() < 0) return ErrnoStatus(errno, object);
    struct stat st;
    if (::fstat(fd.get(), &st) != 0) return ErrnoStatus(errno, object);
    // S3 has no directories: a key naming one names no object.
    if (S_ISDIR(st.st_mode)) return NotFound(object + " does not exist (it is a directory)");
    if (!S_ISREG(st.st_mode)) return NotFound(object + " does not exist (it is not a regular file)");

    const std::string etag = MakeEtag(st);
    if (!options.if_match.empty() && StripQuotes(options.if_match) != etag) {
      return Status(StatusCode::kPreconditionFailed,
                    object + " has changed: its ETag is " + etag + ", expected " + std::string(StripQuotes(options.if_match)) +
                        "; restart the read to see the new version");
    }

    const uint64_t size = static_cast<uint64_t>(st.st_size);
    uint64_t start = 0;
    uint64_t end = size;
    if (options.range) {
      start = options.range->start;
      end = options.range->end.value_or(size);
      if (options.clamp_end) end = std::min(end, std::max(start, size));
      if (start > end || start > size || end > size) {
        return OutOfRange(object + ": byte range " + RangeText(*options.range) + " is outside the object, which is " +
                          std::to_string(size) + " bytes; a range must satisfy start <= end <= size");
      }
    }

    S3S_RETURN_IF_ERROR(sink.OnStart(GetStart{size, end - start, etag}));
    if (start == end) return Status::Ok();
    std::vector<uint8_t> buf(std::min<uint64_t>(kChunkBytes, end - start));
    uint64_t pos = start;
    while (pos < end) {
      if (!sink.Wanted()) return Cancelled("GET " + object + " is no longer wanted");
      const ssize_t n = ::pread(fd.get(), buf.data(), std::min<uint64_t>(buf.size(), end - pos), static_cast<off_t>(pos));
      if (n < 0) {
        if (errno == EINTR) continue;
        return ErrnoStatus(errno, object);
      }
      if (n == 0) {
        return Status(StatusCode::kPreconditionFailed,
                      object + " was truncated while being read (at byte " + std::to_string(pos) + ")");
      }
      S3S_RETURN_IF_ERROR(sink.OnData({buf.data(), static_cast<size_t>(n)}));
      pos += static_cast<uint64_t>(n);
    }
    return Status::Ok();
  }

  Result<ObjectInfo> DoHead(const std::string& key) const {
    S3S_RETURN_IF_ERROR(CheckKey(key));
    const std::string object = Describe(key);
    struct stat st;
    if (::stat(JoinRoot(key).c_str(), &st) != 0) return ErrnoStatus(errno, object);
    if (S_ISDIR(st.st_mode)) return NotFound(object + " does not exist (it is a directory)");
    if (!S_ISREG(st.st_mode)) return NotFound(object + " does not exist (it is not a regular file)");
    return ObjectInfo{key, static_cast<uint64_t>(st.st_size), MakeEtag(st), Iso8601(st.st_mtim)};
  }

  Result<std::string> DoPut(const std::string& key, const Buffer& data) const {
    S3S_RETURN_IF_ERROR(CheckKey(key));
    S3S_RETURN_IF_ERROR(MakeParents(key));
    const std::string object = Describe(key);
    return WriteAtomically(JoinRoot(key), object, [&](int fd) { return WriteAll(fd, data.span(), object); });
  }

  Status DoDelete(const std::string& key) const {
    S3S_RETURN_IF_ERROR(CheckKey(key));
    if (::unlink(JoinRoot(key).c_str()) == 0) return Status::Ok();
    // Deleting what is not an object succeeds on S3; a directory is not an object and stays.
    if (errno == ENOENT || errno == ENOTDIR || errno == EISDIR) return Status::Ok();
    return ErrnoStatus(errno, Describe(key));
  }

  // ---- multipart: parts are files part-00001.. in <dir of key>/.s3stream-multipart/<id>/, beside a
  // file `key` naming the upload's key (S3 rejects an upload id used with another key). Staging beside
  // the target, not under the root, matters for the root "/" (file:// URLs): the user can write the
  // target's directory, not "/", and the assembled object is renamed within one file system.

  // <dir of key>/.s3stream-multipart
  std::string StagingRoot(const std::string& key) const {
    const size_t slash = key.rfind('/');
    const std::string dir = slash == std::string::npos ? root_ : JoinRoot(std::string_view(key).substr(0, slash));
    return JoinPath(dir, std::string(kStagingDir));
  }

  // Removes an upload's directory, and the staging root once no upload is left in it.
  void RemoveUpload(const std::string& key, const std::string& dir, std::error_code& ec) const {
    std::filesystem::remove_all(dir, ec);
    ::rmdir(StagingRoot(key).c_str());  // fails harmlessly (ENOTEMPTY) while other uploads are staged
  }

  Result<std::string> DoCreateMultipart(const std::string& key) const {
    S3S_RETURN_IF_ERROR(CheckKey(key));
    S3S_RETURN_IF_ERROR(MakeParents(key));
    const std::string staging = StagingRoot(key);
    std::error_code ec;
    for (int attempt = 0; attempt < 8; ++attempt) {
      if (::mkdir(staging.c_str(), 0777) != 0 && errno != EEXIST) return ErrnoStatus(errno, "file://" + staging);
      const std::string id = RandomHex(16);
      const std::string dir = staging + "/" + id;
      if (::mkdir(dir.c_str(), 0777) != 0) {
        // EEXIST: an id collision; ENOENT: the last upload here just removed the staging root.
        if (errno == EEXIST || errno == ENOENT) continue;
        return ErrnoStatus(errno, "file://" + dir);
      }
      const std::string key_file = dir + "/" + std::string(kUploadKeyFile);
      Fd fd(::open(key_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666));
      Status status = fd.get() < 0 ? ErrnoStatus(errno, "file://" + key_file)
                                   : WriteAll(fd.get(), {reinterpret_cast<const uint8_t*>(key.data()), key.size()},
                                              "file://" + key_file);
      if (status.ok() && fd.Close() != 0) status = ErrnoStatus(errno, "file://" + key_file);
      if (!status.ok()) {
        RemoveUpload(key, dir, ec);
        return status;
      }
      return id;
    }
    return Internal(Describe(key) + ": could not create a unique multipart upload id");
  }

  // The staging directory of an upload of `key`, or kNotFound.
  Result<std::string> UploadDir(const std::string& key, const std::string& upload_id) const {
    S3S_RETURN_IF_ERROR(CheckKey(key));
    auto no_such = [&] {
      return NotFound("no such multipart upload: " + upload_id + " for " + Describe(key) +
                      " (it was completed, aborted or never created)");
    };
    // Ids are what DoCreateMultipart makes; anything else (a path, "..") names no upload.
    if (upload_id.empty() || upload_id.size() > 64 ||
        !std::all_of(upload_id.begin(), upload_id.end(), [](char c) { return std::isxdigit(static_cast<unsigned char>(c)); })) {
      return no_such();
    }
    const std::string dir = StagingRoot(key) + "/" + upload_id;
    Fd fd(::open((dir + "/" + std::string(kUploadKeyFile)).c_str(), O_RDONLY | O_CLOEXEC));
    if (fd.get() < 0) {
      if (errno == ENOENT || errno == ENOTDIR) return no_such();
      return ErrnoStatus(errno, "file://" + dir);
    }
    std::string stored(key.size() + 1, '\0');
    size_t got = 0;
    while (got < stored.size()) {
      const ssize_t n = ::read(fd.get(), stored.data() + got, stored.size() - got);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return ErrnoStatus(errno, "file://" + dir);
      if (n == 0) break;
      got += static_cast<size_t>(n);
    }
    stored.resize(got);
    if (stored != key) return no_such();
    return dir;
  }

  static std::string PartPath(const std::string& dir, int part_number) {
    char name[32];
    std::snprintf(name, sizeof name, "/part-%05d", part_number);
    return dir + name;
  }

  Result<std::string> DoUploadPart(const std::string& key, const std::string& upload_id, int part_number,
                                   const Buffer& data) const {
    S3S_ASSIGN_OR_RETURN(const std::string dir, UploadDir(key, upload_id));
    if (part_number < 1 || part_number > kMaxPartNumber) {
      return InvalidArgument(Describe(key) + ": part number " + std::to_string(part_number) +
                             " is outside 1.." + std::to_string(kMaxPartNumber));
    }
    const std::string object = Describe(key) + " (part " + std::to_string(part_number) + ")";
    return WriteAtomically(PartPath(dir, part_number), object,
                           [&](int fd) { return WriteAll(fd, data.span(), object); });
  }

  Status DoCompleteMultipart(const std::string& key, const std::string& upload_id,
                             const std::vector<CompletedPart>& parts) const {
    S3S_ASSIGN_OR_RETURN(const std::string dir, UploadDir(key, upload_id));
    const std::string object = Describe(key);
    if (parts.empty()) return InvalidArgument(object + ": completing a multipart upload needs at least one part");

    // Checks a listed part against the uploaded file's stat. The copy pass checks the opened file
    // again, so the bytes copied are the bytes verified even if a part is re-uploaded meanwhile.
    auto check_part = [&](size_t i, const struct stat& st) -> Status {
      const CompletedPart& part = parts[i];
      if (MakeEtag(st) != StripQuotes(part.etag)) {
        return InvalidArgument(object + ": part " + std::to_string(part.part_number) + " has ETag " + MakeEtag(st) +
                               " but was listed with ETag " + part.etag + "; list the ETag UploadPart returned");
      }
      if (i + 1 < parts.size() && static_cast<uint64_t>(st.st_size) < kMinPartBytes) {
        return InvalidArgument(object + ": part " + std::to_string(part.part_number) + " is " +
                               std::to_string(st.st_size) + " bytes; every part but the last must be at least " +
                               std::to_string(kMinPartBytes) + " bytes (5 MiB)");
      }
      return Status::Ok();
    };
    auto missing = [&](int part_number) {
      return InvalidArgument(object + ": part " + std::to_string(part_number) + " of upload " + upload_id +
                             " was not uploaded");
    };

    // First pass: fail fast, before writing anything.
    for (size_t i = 0; i < parts.size(); ++i) {
      const int n = parts[i].part_number;
      if (i > 0 && n <= parts[i - 1].part_number) {
        return InvalidArgument(object + ": parts must be listed in ascending order without repeats; part " +
                               std::to_string(n) + " follows part " + std::to_string(parts[i - 1].part_number));
      }
      if (n < 1 || n > kMaxPartNumber) return missing(n);
      struct stat st;
      if (::stat(PartPath(dir, n).c_str(), &st) != 0) {
        if (errno == ENOENT) return missing(n);
        return ErrnoStatus(errno, object);
      }
      S3S_RETURN_IF_ERROR(check_part(i, st));
    }

    S3S_RETURN_IF_ERROR(MakeParents(key));
    auto written = WriteAtomically(JoinRoot(key), object, [&](int out_fd) -> Status {
      for (size_t i = 0; i < parts.size(); ++i) {
        Fd part_fd(::open(PartPath(dir, parts[i].part_number).c_str(), O_RDONLY | O_CLOEXEC));
        if (part_fd.get() < 0) return errno == ENOENT ? missing(parts[i].part_number) : ErrnoStatus(errno, object);
        struct stat st;
        if (::fstat(part_fd.get(), &st) != 0) return ErrnoStatus(errno, object);
        S3S_RETURN_IF_ERROR(check_part(i, st));
        S3S_RETURN_IF_ERROR(CopyFd(part_fd.get(), out_fd, static_cast<uint64_t>(st.st_size), object));
      }
      return Status::Ok();
    });
    if (!written.ok()) return written.status();
    std::error_code ec;
    RemoveUpload(key, dir, ec);  // the object is in place; a leftover staging dir is harmless
    return Status::Ok();
  }

  Status DoAbortMultipart(const std::string& key, const std::string& upload_id) const {
    S3S_ASSIGN_OR_RETURN(const std::string dir, UploadDir(key, upload_id));
    std::error_code ec;
    RemoveUpload(key, dir, ec);
    if (ec) return ErrnoStatus(ec.value(), "file://" + dir);
    return Status::Ok();
  }

  const std::string root_;  // absolute, normalised, no trailing '/' (unless it is "/")
  ThreadPool pool_;         // last: destroyed (and drained) while the members above still exist
};

}  // namespace
}  // namespace internal

std::unique_ptr<ObjectStore> MakeFileStore(std::string root_dir) {
  std::error_code ec;
  std::filesystem::path root = std::filesystem::absolute(root_dir.empty() ? "." : root_dir, ec);
  if (ec) root = root_dir;
  std::string normal = root.lexically_normal().string();
  while (normal.size() > 1 && normal.back() == '/') normal.pop_back();
  return std::make_unique<internal::FileStore>(std::move(normal));
}

}  // namespace s3stream
