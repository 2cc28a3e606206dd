// SampleGrouper and the name rules of webdataset.tariterators, reimplemented without regexes.
#include "s3stream/webdataset.h"

namespace s3stream {
namespace {

uint64_t PaddedEnd(const TarMember& m) {
  return m.data_offset + m.size + (kTarBlockSize - m.size % kTarBlockSize) % kTarBlockSize;
}

std::string AsciiLower(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

}  // namespace

const Buffer* Sample::Find(std::string_view extension) const {
  for (const auto& [ext, data] : fields) {
    if (ext == extension) return &data;
  }
  return nullptr;
}

// re.match(r"^((?:.*/|)[^.]+)[.]([^/]*)$", name). A match always splits at the first dot of the
// basename (the extension may hold no '/'), so the question is only whether the regex can reach it:
// "[^.]+" must start after a '/' matched by ".*/" (which cannot cross a newline) or at 0, with no dot
// between there and the split, and must not be empty.
bool SplitKeyExtension(std::string_view name, std::string* key, std::string* extension) {
  size_t slash = name.rfind('/');
  size_t base = slash == std::string_view::npos ? 0 : slash + 1;
  size_t q = name.find('.', base);
  if (q == std::string_view::npos) return false;
  size_t last_dot = q == 0 ? std::string_view::npos : name.rfind('.', q - 1);
  bool reachable;
  if (last_dot == std::string_view::npos && q > 0) {
    reachable = true;  // "[^.]+" from position 0
  } else {
    size_t from = last_dot == std::string_view::npos ? 0 : last_dot + 1;
    size_t s = name.find('/', from);
    size_t newline = name.find('\n');
    reachable = s != std::string_view::npos && s + 1 < q && (newline == std::string_view::npos || newline > s);
  }
  if (!reachable) return false;
  *key = std::string(name.substr(0, q));
  *extension = std::string(name.substr(q + 1));
  return true;
}

// tar_file_iterator skips `"/" not in name and name.startswith("__") and name.endswith("__")` and
// names matching re.match(r"__[^/]*__($|/)", name), where "$" also matches before a final newline.
bool IsWebDatasetMetaName(std::string_view name) {
  if (!name.starts_with("__")) return false;
  if (name.find('/') == std::string_view::npos && name.ends_with("__")) return true;
  size_t component_end = std::min(name.find('/'), name.size());
  for (size_t j = 2; j + 2 <= component_end; ++j) {
    if (name[j] != '_' || name[j + 1] != '_') continue;
    size_t after = j + 2;
    if (after == name.size() || name[after] == '/' || (after + 1 == name.size() && name[after] == '\n')) {
      return true;
    }
  }
  return false;
}

SampleGrouper::SampleGrouper(std::string source_name) : source_(std::move(source_name)) {}

Status SampleGrouper::Add(TarMember&& member, const SampleCallback& on_sample) {
  if (IsWebDatasetMetaName(member.name)) return Status::Ok();
  std::string key, extension;
  if (!SplitKeyExtension(member.name, &key, &extension)) return Status::Ok();
  extension = AsciiLower(extension);
  if (!open_ || key != current_.key) {
    S3S_RETURN_IF_ERROR(Emit(on_sample));
    current_ = Sample{};
    current_.key = std::move(key);
    current_.offset = member.header_offset;
    open_ = true;
  }
  const std::string where = source_ + ": at offset " + std::to_string(member.header_offset) + ": ";
  if (extension == "__key__" || extension == "__url__") {
    return Corrupt(where + "member \"" + member.name + "\" has the extension \"" + extension +
                   "\", which WebDataset reserves for the sample's own key and URL (webdataset fails on it too)");
  }
  if (current_.Find(extension) != nullptr) {
    return Corrupt(where + "sample \"" + current_.key + "\" has the extension \"" + extension +
                   "\" twice (member \"" + member.name +
                   "\"): the shard repeats a file name, or two samples share a key; webdataset rejects it too");
  }
  current_.end_offset = PaddedEnd(member);
  current_.fields.emplace_back(std::move(extension), std::move(member.data));
  return Status::Ok();
}

Status SampleGrouper::Emit(const SampleCallback& on_sample) {
  if (!open_) return Status::Ok();
  open_ = false;
  // webdataset's valid_sample: a truthy "__bad__" field (non-empty bytes) drops the sample.
  const Buffer* bad = current_.Find("__bad__");
  if (bad != nullptr && !bad->empty()) return Status::Ok();
  return on_sample(std::move(current_));
}

Status SampleGrouper::Finish(const SampleCallback& on_sample) { return Emit(on_sample); }

}  // namespace s3stream
