#include "store/file/file_list.h"

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <vector>

#include "store/file/file_util.h"

namespace s3stream::internal {
namespace {

// ListObjectsV2 over a directory tree. Keys come out in byte order without sorting the whole tree:
// within a directory, entries are sorted by their key text ("name" for a file, "name/" for a
// directory), and every key below a directory "d" starts with "d/", so the keys of a directory form
// one contiguous run. That also lets the walk skip whole directories: those before the continuation
// token, those outside the prefix, and those rolled up into one common prefix.
//
// Threading: one ListState per List call, on one pool thread.
struct ListState {
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

}  // namespace

Result<ListPage> ListTree(const std::string& root, const ListRequest& request) {
  auto Describe = [&](const std::string& key) { return "file://" + JoinRoot(root, key); };
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

  char* resolved_root = ::realpath(root.c_str(), nullptr);
  if (resolved_root == nullptr) {
    if (errno == ENOENT || errno == ENOTDIR) return ListPage{};
    return ErrnoStatus(errno, Describe(""));
  }
  const std::string root_real = resolved_root;
  std::free(resolved_root);

  const std::string start_dir = dir_key.empty() ? root : JoinRoot(root, std::string_view(dir_key).substr(0, dir_key.size() - 1));
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

  // start_after (first page only) resumes like a token that is a plain key: items after it. One
  // outside the prefix is before all of its keys or after all of them.
  const std::string& start_after = request.start_after;
  const bool use_start_after = request.continuation_token.empty() && !start_after.empty();
  if (use_start_after && !StartsWith(start_after, prefix) && start_after > prefix) return ListPage{};
  const std::string no_token;
  const std::string& token = use_start_after ? (StartsWith(start_after, prefix) ? start_after : no_token)
                                             : request.continuation_token;
  ListState state(prefix, request.delimiter, token);
  state.token_is_prefix = !use_start_after && !request.delimiter.empty() && !request.continuation_token.empty() &&
                          request.continuation_token.find(request.delimiter, prefix.size()) != std::string::npos;
  state.max_keys = static_cast<size_t>(std::min(request.max_keys, kMaxListKeys));
  state.root_real = root_real;
  std::vector<std::string> ancestors{start_real};
  state.Walk(start_dir, start_real, dir_key, ancestors);
  if (!state.error.ok()) return state.error;
  return std::move(state.page);
}

}  // namespace s3stream::internal
