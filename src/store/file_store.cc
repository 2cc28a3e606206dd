#include "store/file_store.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <cinttypes>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <deque>
#include <filesystem>
#include <functional>
#include <mutex>
#include <random>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

namespace s3stream {
namespace internal {
namespace {

constexpr size_t kChunkBytes = 1 << 20;  // one pread, one OnData call
constexpr int kMaxListKeys = 1000;       // S3's cap on max-keys
constexpr int kMaxPartNumber = 10000;    // S3's limit
constexpr uint64_t kMinPartBytes = 5ull << 20;
constexpr std::string_view kStagingDir = ".s3stream-multipart";
constexpr std::string_view kTempPrefix = ".s3stream-tmp-";
constexpr std::string_view kUploadKeyFile = "key";

bool StartsWith(std::string_view s, std::string_view prefix) { return s.substr(0, prefix.size()) == prefix; }

std::string ErrnoText(int err) { return std::error_code(err, std::generic_category()).message(); }

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

// Not an MD5 (see file_store.h): cheap to compute from one stat, and different for every version
// this driver writes.
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

// S3 reports ETags in quotes and callers may pass them either way.
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

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  // Closes now, reporting the error close() may carry for buffered writes.
  int Close() {
    const int rc = ::close(fd_);
    fd_ = -1;
    return rc;
  }

 private:
  int fd_;
};

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

// Runs tasks on 2-4 threads, started on the first Submit so an unused store costs no threads.
//
// Threading and ownership: Submit is thread-safe. The destructor finishes every queued task (running
// some itself) and then joins the workers. If the last owner destroys the pool from inside a task
// (a Future callback dropping the store), that worker is detached instead of joining itself; it only
// touches the shared State afterwards, which it co-owns.
// fork(): the child has none of the parent's workers, and the parent's State may have been locked at
// the instant of the fork, so a child never touches it: its first Submit installs a fresh State and
// leaks the old one (with the parent's queued tasks, which are the parent's business).
class ThreadPool {
 public:
  ThreadPool() : current_(new Current{std::make_shared<State>()}) {}
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  ~ThreadPool() {
    Current* current = current_.load(std::memory_order_acquire);
    const std::shared_ptr<State> state = current->state;
    if (state->pid != ::getpid()) return;  // inherited across fork and never used here: leak it
    delete current;
    std::vector<std::thread> threads;
    {
      std::lock_guard<std::mutex> lock(state->mu);
      state->stopping = true;
      threads.swap(state->threads);
    }
    state->cv.notify_all();
    // Help drain, so no task runs after the store's members are gone even if the caller is a worker.
    while (RunOne(*state)) {
    }
    for (auto& t : threads) {
      if (t.get_id() == std::this_thread::get_id()) {
        t.detach();
      } else {
        t.join();
      }
    }
  }

  void Submit(std::function<void()> task) {
    const std::shared_ptr<State> state = StateForThisProcess();
    bool have_workers = false;
    {
      std::lock_guard<std::mutex> lock(state->mu);
      state->tasks.push_back(std::move(task));
      if (state->threads.empty()) StartWorkers(state);
      have_workers = !state->threads.empty();
    }
    if (have_workers) {
      state->cv.notify_one();
    } else {
      // No thread could be started: run inline rather than never completing the future.
      while (RunOne(*state)) {
      }
    }
  }

 private:
  struct State {
    std::mutex mu;
    std::condition_variable cv;
    std::deque<std::function<void()>> tasks;
    std::vector<std::thread> threads;
    const pid_t pid = ::getpid();
    bool stopping = false;
  };
  // Boxed so a forked child can swap it atomically without touching the parent's State.
  struct Current {
    std::shared_ptr<State> state;
  };

  std::shared_ptr<State> StateForThisProcess() {
    Current* current = current_.load(std::memory_order_acquire);
    if (current->state->pid == ::getpid()) return current->state;
    auto* fresh = new Current{std::make_shared<State>()};
    if (current_.compare_exchange_strong(current, fresh, std::memory_order_acq_rel)) return fresh->state;
    delete fresh;  // another thread of this child installed one first
    return current->state;
  }

  // Called with state.mu held.
  static void StartWorkers(const std::shared_ptr<State>& state) {
    const unsigned n = std::clamp(std::thread::hardware_concurrency(), 2u, 4u);
    for (unsigned i = 0; i < n; ++i) {
      try {
        state->threads.emplace_back(&ThreadPool::WorkerLoop, state);
      } catch (const std::system_error&) {
        break;
      }
    }
  }

  static bool RunOne(State& state) {
    std::function<void()> task;
    {
      std::lock_guard<std::mutex> lock(state.mu);
      if (state.tasks.empty()) return false;
      task = std::move(state.tasks.front());
      state.tasks.pop_front();
    }
    task();
    return true;
  }

  static void WorkerLoop(std::shared_ptr<State> state) {
    while (true) {
      std::function<void()> task;
      {
        std::unique_lock<std::mutex> lock(state->mu);
        state->cv.wait(lock, [&] { return state->stopping || !state->tasks.empty(); });
        if (state->tasks.empty()) return;
        task = std::move(state->tasks.front());
        state->tasks.pop_front();
      }
      task();
    }
  }

  std::atomic<Current*> current_;
};

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
    return Run<Result<ListPage>>([this, request] { return DoList(request); });
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

 private:
  struct ListState;

  template <typename T, typename Fn>
  Future<T> Run(Fn fn) {
    Promise<T> promise;
    Future<T> future = promise.future();
    pool_.Submit([promise, fn = std::move(fn)]() mutable { promise.Set(fn()); });
    return future;
  }

  std::string JoinRoot(std::string_view rel) const {
    if (rel.empty()) return root_;
    return root_ == "/" ? "/" + std::string(rel) : root_ + "/" + std::string(rel);
  }

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

  // ---- List

  Result<ListPage> DoList(const ListRequest& request) const;

  const std::string root_;  // absolute, normalised, no trailing '/' (unless it is "/")
  ThreadPool pool_;         // last: destroyed (and drained) while the members above still exist
};

// ListObjectsV2 over a directory tree. Keys come out in byte order without sorting the whole tree:
// within a directory, entries are sorted by their key text ("name" for a file, "name/" for a
// directory), and every key below a directory "d" starts with "d/", so the keys of a directory form
// one contiguous run. That also lets the walk skip whole directories: those before the continuation
// token, those outside the prefix, and those rolled up into one common prefix.
//
// Threading: one ListState per List call, on one pool thread.
struct FileStore::ListState {
  struct Entry {
    std::string name;
    std::string sort_key;  // name, or name + "/" for a directory
    bool is_dir = false;
    std::string real_path;  // for a symlinked directory: where it leads
  };

  ListState(const std::string& prefix_in, const std::string& delimiter_in, const std::string& token_in)
      : prefix(prefix_in), delimiter(delimiter_in), token(token_in) {}

  const std::string& prefix;
  const std::string& delimiter;
  const std::string& token;  // the last item of the previous page; "" on the first page
  bool token_is_prefix = false;
  size_t max_keys = 0;
  std::string root_real;

  ListPage page;
  size_t count = 0;
  std::string last;
  bool last_is_prefix = false;
  bool stop = false;
  Status error;

  // `real` is the directory's path with symlinks resolved; `ancestors` the real paths of the
  // directories above it on the walk (to refuse symlink loops).
  std::vector<Entry> ReadDir(const std::string& dir, const std::string& real) {
    std::vector<Entry> out;
    DIR* d = ::opendir(dir.c_str());
    if (d == nullptr) {
      // A directory deleted during the walk, or a prefix naming none, just holds no keys.
      if (errno != ENOENT && errno != ENOTDIR) {
        error = ErrnoStatus(errno, "file://" + dir);
        stop = true;
      }
      return out;
    }
    while (struct dirent* e = ::readdir(d)) {
      std::string_view name = e->d_name;
      if (name == "." || name == ".." || name == kStagingDir || StartsWith(name, kTempPrefix)) continue;
      Entry entry;
      entry.name = std::string(name);
      unsigned char type = e->d_type;
      if (type == DT_UNKNOWN || type == DT_LNK) {
        struct stat st;
        const std::string path = JoinPath(dir, entry.name);
        if (::stat(path.c_str(), &st) != 0) continue;  // dangling link or raced delete
        if (S_ISDIR(st.st_mode)) {
          if (type == DT_LNK) {
            // Follow a symlinked directory only while it stays inside the root.
            char* resolved = ::realpath(path.c_str(), nullptr);
            if (resolved == nullptr) continue;
            entry.real_path = resolved;
            std::free(resolved);
            if (!StartsWith(entry.real_path, root_real == "/" ? "/" : root_real + "/")) continue;
          } else {
            entry.real_path = JoinPath(real, entry.name);
          }
          type = DT_DIR;
        } else if (S_ISREG(st.st_mode)) {
          type = DT_REG;
        } else {
          continue;
        }
      } else if (type == DT_DIR) {
        entry.real_path = JoinPath(real, entry.name);
      }
      if (type != DT_REG && type != DT_DIR) continue;  // FIFOs, sockets, devices are not objects
      entry.is_dir = type == DT_DIR;
      entry.sort_key = entry.is_dir ? entry.name + "/" : entry.name;
      out.push_back(std::move(entry));
    }
    ::closedir(d);
    std::sort(out.begin(), out.end(), [](const Entry& a, const Entry& b) { return a.sort_key < b.sort_key; });
    return out;
  }

  static bool IsLoop(const std::string& real, const std::vector<std::string>& ancestors) {
    // Descending into a directory that contains (or is) one already on the walk would revisit it.
    for (const auto& a : ancestors) {
      if (a == real || StartsWith(a, real + "/")) return true;
    }
    return false;
  }

  // Whether any key lives below `dir` (S3 has no empty "directories", so neither do common prefixes).
  bool HasAnyKey(const std::string& dir, const std::string& real, std::vector<std::string>& ancestors) {
    for (const Entry& e : ReadDir(dir, real)) {
      if (stop) return false;
      if (!e.is_dir) return true;
      if (IsLoop(e.real_path, ancestors)) continue;
      ancestors.push_back(e.real_path);
      const bool found = HasAnyKey(JoinPath(dir, e.name), e.real_path, ancestors);
      ancestors.pop_back();
      if (found) return true;
    }
    return false;
  }

  // The common prefix `item` would roll up into under the delimiter, or "".
  std::string RollUp(const std::string& item) const {
    if (delimiter.empty() || !StartsWith(item, prefix)) return {};
    const size_t pos = item.find(delimiter, prefix.size());
    if (pos == std::string::npos) return {};
    return item.substr(0, pos + delimiter.size());
  }

  // Adds one item to the page; on the first item past max_keys, stops the walk instead.
  bool Full() {
    if (count < max_keys) return false;
    stop = true;
    page.next_continuation_token = last;
    return true;
  }

  void EmitPrefix(const std::string& cp) {
    if (last_is_prefix && last == cp) return;  // the run of keys under it continues
    if (Full()) return;
    page.common_prefixes.push_back(cp);
    last = cp;
    last_is_prefix = true;
    ++count;
  }

  void VisitFile(const std::string& key, const std::string& path) {
    if (!StartsWith(key, prefix)) return;
    if (const std::string cp = RollUp(key); !cp.empty()) {
      if (token.empty() || cp > token) EmitPrefix(cp);
      return;
    }
    if (!token.empty() && (key <= token || (token_is_prefix && StartsWith(key, token)))) return;
    if (Full()) return;
    struct stat st;
    if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return;  // deleted since readdir
    page.objects.push_back(ObjectInfo{key, static_cast<uint64_t>(st.st_size), MakeEtag(st), Iso8601(st.st_mtim)});
    last = key;
    last_is_prefix = false;
    ++count;
  }

  // `block` is "<dir key>/": every key below the directory starts with it.
  void VisitDir(const std::string& block, const std::string& path, const std::string& real,
                std::vector<std::string>& ancestors) {
    if (!StartsWith(block, prefix) && !StartsWith(prefix, block)) return;
    if (IsLoop(real, ancestors)) return;
    ancestors.push_back(real);
    if (const std::string cp = RollUp(block); !cp.empty()) {
      // Every key below rolls up into cp: emit it (once) without listing the directory.
      if ((token.empty() || cp > token) && !(last_is_prefix && last == cp) && HasAnyKey(path, real, ancestors)) {
        EmitPrefix(cp);
      }
    } else if (token.empty() || StartsWith(token, block) ||
               (block > token && !(token_is_prefix && StartsWith(block, token)))) {
      // Skipped otherwise: every key below sorts before the token, or was rolled up into it.
      Walk(path, real, block, ancestors);
    }
    ancestors.pop_back();
  }

  void Walk(const std::string& dir, const std::string& real, const std::string& key_base,
            std::vector<std::string>& ancestors) {
    for (const Entry& e : ReadDir(dir, real)) {
      if (stop) return;
      const std::string path = JoinPath(dir, e.name);
      if (e.is_dir) {
        VisitDir(key_base + e.sort_key, path, e.real_path, ancestors);
      } else {
        VisitFile(key_base + e.name, path);
      }
    }
  }
};

Result<ListPage> FileStore::DoList(const ListRequest& request) const {
  const std::string& prefix = request.prefix;
  if (request.max_keys < 0) return InvalidArgument("listing " + Describe(prefix) + ": max_keys must not be negative");
  if (!request.continuation_token.empty() && !StartsWith(request.continuation_token, prefix)) {
    return InvalidArgument("listing " + Describe(prefix) +
                           ": the continuation token belongs to another listing; start again without it");
  }
  if (request.max_keys == 0) return ListPage{};

  // Start at the directory holding the prefix's last (possibly partial) segment.
  const size_t slash = prefix.rfind('/');
  const std::string dir_key = slash == std::string::npos ? std::string() : prefix.substr(0, slash + 1);
  if (!dir_key.empty()) {
    const auto segments = SplitSegments(std::string_view(dir_key).substr(0, dir_key.size() - 1));
    for (std::string_view seg : segments) {
      if (seg == "." || seg == "..") {
        return InvalidArgument("listing " + Describe(prefix) + ": '.' and '..' segments are not allowed in a prefix");
      }
      // No key has an empty segment or a reserved name (temp files, multipart staging).
      if (seg.empty() || seg == kStagingDir || StartsWith(seg, kTempPrefix)) return ListPage{};
    }
  }

  char* resolved_root = ::realpath(root_.c_str(), nullptr);
  if (resolved_root == nullptr) {
    if (errno == ENOENT || errno == ENOTDIR) return ListPage{};
    return ErrnoStatus(errno, Describe(""));
  }
  const std::string root_real = resolved_root;
  std::free(resolved_root);

  const std::string start_dir = dir_key.empty() ? root_ : JoinRoot(std::string_view(dir_key).substr(0, dir_key.size() - 1));
  std::string start_real = root_real;
  if (!dir_key.empty()) {
    char* resolved = ::realpath(start_dir.c_str(), nullptr);
    if (resolved == nullptr) {
      if (errno == ENOENT || errno == ENOTDIR) return ListPage{};
      return ErrnoStatus(errno, Describe(dir_key));
    }
    start_real = resolved;
    std::free(resolved);
    // The prefix leads through a symlink out of the root: not followed, as in the walk.
    if (!StartsWith(start_real, root_real == "/" ? "/" : root_real + "/")) return ListPage{};
  }

  ListState state(prefix, request.delimiter, request.continuation_token);
  state.token_is_prefix = !request.delimiter.empty() && !request.continuation_token.empty() &&
                          request.continuation_token.find(request.delimiter, prefix.size()) != std::string::npos;
  state.max_keys = static_cast<size_t>(std::min(request.max_keys, kMaxListKeys));
  state.root_real = root_real;
  std::vector<std::string> ancestors{start_real};
  state.Walk(start_dir, start_real, dir_key, ancestors);
  if (!state.error.ok()) return state.error;
  return std::move(state.page);
}

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
