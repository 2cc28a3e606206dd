// TarParser: a push parser, one state per kind of bytes it is waiting for. Header fields are read
// the way Python's tarfile reads them (WebDataset's reference), except that we report corruption
// where tarfile silently stops iterating (a bad header after the first one, a truncated archive).
#include <algorithm>
#include <cstring>

#include "s3stream/tar.h"

namespace s3stream {
namespace {

// Extension headers (pax records, GNU long names) are read into memory; real ones are a few
// hundred bytes, so anything this large is corrupt (and must not make us allocate gigabytes).
constexpr uint64_t kMaxExtensionBytes = 1 << 20;
// A member split across chunks is assembled into one Buffer. Up to this size it is allocated at
// once; above, it grows as bytes arrive, so a corrupt size field cannot trigger a huge allocation.
constexpr uint64_t kEagerAllocBytes = 16 << 20;

// Bytes up to the first NUL: how tar stores strings that may fill their field.
std::string_view NulTerminated(const void* p, size_t n) {
  const char* s = static_cast<const char*>(p);
  return {s, static_cast<size_t>(std::find(s, s + n, '\0') - s)};
}

// A numeric header field: octal text (leading and trailing spaces allowed, stops at a NUL; empty is
// 0, as in tarfile), or GNU base-256 when the first byte is 0x80 (0xff, negative, is refused).
Result<uint64_t> ParseNumericField(const uint8_t* p, size_t n) {
  if (p[0] == 0x80) {
    uint64_t v = 0;
    for (size_t i = 1; i < n; ++i) {
      if (v >> 55) return Corrupt("base-256 value too large");
      v = (v << 8) | p[i];
    }
    if (v >> 62) return Corrupt("base-256 value too large");
    return v;
  }
  if (p[0] & 0x80) return Corrupt("negative or malformed base-256 value");
  std::string_view s = NulTerminated(p, n);
  auto space = [](char c) { return c == ' ' || (c >= '\t' && c <= '\r'); };
  while (!s.empty() && space(s.front())) s.remove_prefix(1);
  while (!s.empty() && space(s.back())) s.remove_suffix(1);
  uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '7') {
      std::string shown;
      for (char d : NulTerminated(p, n)) shown += (d >= 0x20 && d < 0x7f) ? d : '?';
      return Corrupt("bad octal field \"" + shown + "\"");
    }
    v = v * 8 + static_cast<uint64_t>(c - '0');
  }
  return v;
}

uint64_t Padding(uint64_t size) { return (kTarBlockSize - size % kTarBlockSize) % kTarBlockSize; }

bool AllZero(const uint8_t* p, size_t n) {
  return std::all_of(p, p + n, [](uint8_t b) { return b == 0; });
}

// Names what a non-tar object looks like, for the "not a tar archive" message.
std::string FormatHint(const uint8_t* p, size_t n) {
  auto starts = [&](std::initializer_list<uint8_t> magic) {
    return n >= magic.size() && std::equal(magic.begin(), magic.end(), p);
  };
  if (starts({0x1f, 0x8b})) return "; it is gzip-compressed: name it .tar.gz or .tgz to read it through gzip";
  if (starts({0x28, 0xb5, 0x2f, 0xfd})) return "; it is zstd-compressed, which is not supported";
  if (starts({'B', 'Z', 'h'})) return "; it is bzip2-compressed, which is not supported";
  if (starts({0xfd, '7', 'z', 'X', 'Z', 0})) return "; it is xz-compressed, which is not supported";
  if (starts({'P', 'K', 3, 4})) return "; it is a zip archive";
  return "";
}

// The header checksum: the sum of all bytes with the checksum field taken as spaces. Historic tars
// summed signed chars, so both sums are accepted (as GNU tar and Python's tarfile do).
bool ChecksumMatches(const uint8_t* block, uint64_t stored) {
  int64_t unsigned_sum = 0;
  int64_t signed_sum = 0;
  for (size_t i = 0; i < kTarBlockSize; ++i) {
    uint8_t b = (i >= 148 && i < 156) ? ' ' : block[i];
    unsigned_sum += b;
    signed_sum += static_cast<int8_t>(b);
  }
  return static_cast<int64_t>(stored) == unsigned_sum || static_cast<int64_t>(stored) == signed_sum;
}

}  // namespace

TarParser::TarParser(std::string source_name, uint64_t start_offset)
    : source_(std::move(source_name)), offset_(start_offset), start_offset_(start_offset) {}

std::string TarParser::Where(uint64_t offset) const {
  return source_ + ": at offset " + std::to_string(offset) + ": ";
}

Status TarParser::Fail(Status status) {
  state_ = State::kFailed;
  failed_ = status;
  return status;
}

Status TarParser::Feed(const Buffer& chunk, const MemberCallback& on_member) {
  if (state_ == State::kFailed) return failed_;
  if (state_ == State::kEnd) return Status::Ok();
  const uint8_t* bytes = chunk.data();
  const size_t n = chunk.size();
  size_t pos = 0;
  if (n > 0) seen_input_ = true;
  while (pos < n && state_ != State::kEnd) {
    const size_t avail = n - pos;
    switch (state_) {
      case State::kHeader: {
        const uint8_t* block;
        uint64_t header_offset;
        if (header_fill_ == 0 && avail >= kTarBlockSize) {
          block = bytes + pos;  // the common case: no copy
          header_offset = offset_;
          pos += kTarBlockSize;
          offset_ += kTarBlockSize;
        } else {
          size_t take = std::min(kTarBlockSize - header_fill_, avail);
          std::memcpy(header_ + header_fill_, bytes + pos, take);
          header_fill_ += take;
          pos += take;
          offset_ += take;
          if (header_fill_ < kTarBlockSize) continue;
          block = header_;
          header_offset = offset_ - kTarBlockSize;
          header_fill_ = 0;
        }
        S3S_RETURN_IF_ERROR(ParseHeader(block, header_offset));
        if (state_ == State::kData && data_left_ == 0) {
          member_.data = chunk.Slice(pos, 0);
          S3S_RETURN_IF_ERROR(FinishData(on_member));
        }
        break;
      }
      case State::kExtension: {
        size_t take = static_cast<size_t>(std::min<uint64_t>(extension_size_ - extension_.size(), avail));
        extension_.append(reinterpret_cast<const char*>(bytes + pos), take);
        pos += take;
        offset_ += take;
        if (extension_.size() == extension_size_) {
          S3S_RETURN_IF_ERROR(ApplyExtension());
          skip_left_ = Padding(extension_size_);
          state_ = skip_left_ > 0 ? State::kSkip : State::kHeader;
        }
        break;
      }
      case State::kData: {
        size_t take = static_cast<size_t>(std::min<uint64_t>(data_left_, avail));
        if (deliver_) {
          if (!assembly_.valid() && take == member_.size) {
            member_.data = chunk.Slice(pos, take);  // the whole member is inside this chunk
          } else {
            AppendToAssembly(bytes + pos, take);
          }
        }
        pos += take;
        offset_ += take;
        data_left_ -= take;
        if (data_left_ == 0) S3S_RETURN_IF_ERROR(FinishData(on_member));
        break;
      }
      case State::kSkip: {
        size_t take = static_cast<size_t>(std::min<uint64_t>(skip_left_, avail));
        pos += take;
        offset_ += take;
        skip_left_ -= take;
        if (skip_left_ == 0) state_ = State::kHeader;
        break;
      }
      case State::kEnd:
      case State::kFailed:
        break;
    }
  }
  return Status::Ok();
}

void TarParser::AppendToAssembly(const uint8_t* bytes, size_t n) {
  if (!assembly_.valid()) {
    assembly_ = Buffer::Allocate(static_cast<size_t>(std::min(member_.size, kEagerAllocBytes)));
  }
  if (assembly_.size() + n > assembly_.capacity()) {
    uint64_t want = std::max<uint64_t>(2 * assembly_.capacity(), assembly_.size() + n);
    Buffer bigger = Buffer::Allocate(static_cast<size_t>(std::min(want, member_.size)));
    bigger.Append(assembly_.span());
    assembly_ = std::move(bigger);
  }
  assembly_.Append({bytes, n});
}

Status TarParser::FinishData(const MemberCallback& on_member) {
  skip_left_ = Padding(data_bytes_);
  state_ = skip_left_ > 0 ? State::kSkip : State::kHeader;
  if (!deliver_) return Status::Ok();
  if (assembly_.valid()) member_.data = std::move(assembly_);
  assembly_ = Buffer();
  Status status = on_member(std::move(member_));
  member_ = TarMember{};
  if (!status.ok()) return Fail(std::move(status));
  return Status::Ok();
}

Status TarParser::ParseHeader(const uint8_t* block, uint64_t header_offset) {
  const bool first = first_header_;
  first_header_ = false;
  if (AllZero(block, kTarBlockSize)) {
    if (chain_pending_) {
      return Fail(Corrupt(Where(chain_first_offset_) +
                          "extension header (pax or GNU long name) is followed by the end of the archive, "
                          "not by a member"));
    }
    state_ = State::kEnd;
    return Status::Ok();
  }

  auto checksum = ParseNumericField(block + 148, 8);
  if (!checksum.ok() || !ChecksumMatches(block, *checksum)) {
    if (first && header_offset == 0) {
      return Fail(Corrupt(source_ + " is not a tar archive (no valid header at offset 0" +
                          FormatHint(block, kTarBlockSize) + ")"));
    }
    if (first) {
      return Fail(Corrupt(Where(header_offset) +
                          "no valid tar header where reading started (was the offset taken from an index "
                          "of another version of this object?)"));
    }
    return Fail(Corrupt(Where(header_offset) + "bad tar header checksum (corrupt or not a tar header)"));
  }

  auto size_field = ParseNumericField(block + 124, 12);
  if (!size_field.ok()) {
    return Fail(Corrupt(Where(header_offset) + "bad size field in tar header: " + size_field.status().message()));
  }
  const char type = static_cast<char>(block[156]);
  const bool posix_ustar = std::memcmp(block + 257, "ustar\0", 6) == 0;

  if (type == 'L' || type == 'K' || type == 'x' || type == 'X' || type == 'g') {
    if (*size_field > kMaxExtensionBytes) {
      return Fail(Corrupt(Where(header_offset) + "extension header of " + std::to_string(*size_field) +
                          " bytes (type '" + type + "'): too large to be real"));
    }
    if (!chain_pending_) chain_first_offset_ = header_offset;
    if (!chain_started_ && type != 'g') {
      chain_started_ = true;
      chain_offset_ = header_offset;
    }
    chain_pending_ = true;
    extension_type_ = type;
    extension_offset_ = header_offset;
    extension_size_ = *size_field;
    extension_.clear();
    state_ = State::kExtension;
    if (extension_size_ == 0) {
      S3S_RETURN_IF_ERROR(ApplyExtension());
      state_ = State::kHeader;
    }
    return Status::Ok();
  }
  if (type == 'S') {
    return Fail(Corrupt(Where(header_offset) +
                        "GNU sparse member (type 'S') is not supported: repack the shard without --sparse"));
  }

  // The member's name: a GNU long name or pax path, else a pax global path, else the header's own
  // name field (with the ustar prefix in front when the header is POSIX ustar).
  std::string header_name(NulTerminated(block, 100));
  std::string name;
  if (pending_name_) {
    name = std::move(*pending_name_);
  } else if (global_path_) {
    name = *global_path_;
  } else {
    name = header_name;
    std::string_view prefix = NulTerminated(block + 345, 155);
    if (posix_ustar && !prefix.empty()) name = std::string(prefix) + "/" + name;
  }
  uint64_t size = pax_size_ ? *pax_size_ : global_size_ ? *global_size_ : *size_field;

  // Old V7 tars mark a directory as a regular file whose name ends in '/'.
  const bool v7_directory = type == '\0' && !header_name.empty() && header_name.back() == '/';
  const bool regular = (type == '0' || type == '\0' || type == '7') && !v7_directory;
  // Links, devices, directories and FIFOs have no data, whatever the size field says (tarfile
  // ignores it too); unknown types are skipped like files.
  const bool no_data = v7_directory || (type >= '1' && type <= '6');

  member_ = TarMember{};
  member_.name = std::move(name);
  member_.header_offset = chain_started_ ? chain_offset_ : header_offset;
  member_.data_offset = header_offset + kTarBlockSize;
  member_.size = no_data ? 0 : size;
  current_ = {member_.name, member_.header_offset, member_.data_offset};  // member_ is moved out
  data_bytes_ = member_.size;
  data_left_ = member_.size;
  deliver_ = regular;
  pending_name_.reset();
  pax_size_.reset();
  chain_pending_ = false;
  chain_started_ = false;
  state_ = State::kData;
  return Status::Ok();
}

Status TarParser::ApplyExtension() {
  const std::string what = extension_type_ == 'L'   ? "GNU long name"
                           : extension_type_ == 'K' ? "GNU long link name"
                           : extension_type_ == 'g' ? "pax global header"
                                                    : "pax header";
  if (extension_type_ == 'L') {
    // The first name seen for a member wins, as in tarfile (the outermost header is applied last).
    if (!pending_name_) pending_name_ = std::string(NulTerminated(extension_.data(), extension_.size()));
    return Status::Ok();
  }
  if (extension_type_ == 'K') return Status::Ok();  // link targets are not needed

  const bool global = extension_type_ == 'g';
  auto error = [&](const std::string& why) {
    return Fail(Corrupt(Where(extension_offset_) + what + " malformed: " + why));
  };
  std::string_view records = extension_;
  size_t pos = 0;
  bool have_path = false;
  bool have_size = false;
  while (pos < records.size()) {
    std::string_view rest = records.substr(pos);
    // Some writers pad the records with NULs.
    if (AllZero(reinterpret_cast<const uint8_t*>(rest.data()), rest.size())) break;
    size_t space = rest.find(' ');
    if (space == 0 || space == std::string_view::npos || space > 20) {
      return error("record at byte " + std::to_string(pos) + " does not start with a length");
    }
    uint64_t length = 0;
    for (size_t i = 0; i < space; ++i) {
      if (rest[i] < '0' || rest[i] > '9') {
        return error("record at byte " + std::to_string(pos) + " has a non-decimal length");
      }
      length = length * 10 + static_cast<uint64_t>(rest[i] - '0');
    }
    if (length <= space + 2 || length > rest.size() || rest[length - 1] != '\n') {
      return error("record at byte " + std::to_string(pos) + " has a bad length " + std::to_string(length));
    }
    std::string_view record = rest.substr(space + 1, length - space - 2);
    size_t eq = record.find('=');
    if (eq == 0 || eq == std::string_view::npos) {
      return error("record at byte " + std::to_string(pos) + " has no keyword=value");
    }
    std::string_view keyword = record.substr(0, eq);
    std::string_view value = record.substr(eq + 1);
    if (keyword.starts_with("GNU.sparse.")) {
      return Fail(Corrupt(Where(extension_offset_) +
                          "GNU sparse member (pax GNU.sparse.*) is not supported: repack the shard without "
                          "--sparse"));
    }
    if (keyword == "path") {
      // tarfile strips trailing slashes from a pax path. An empty value unsets the keyword (POSIX).
      while (!value.empty() && value.back() == '/') value.remove_suffix(1);
      if (global) {
        if (value.empty()) global_path_.reset(); else global_path_ = std::string(value);
      } else if (!have_path && !pending_name_ && !value.empty()) {
        pending_name_ = std::string(value);
      }
      have_path = true;
    } else if (keyword == "size") {
      std::optional<uint64_t> size;
      if (!value.empty()) {
        uint64_t v = 0;
        for (char c : value) {
          if (c < '0' || c > '9' || v > (uint64_t{1} << 62) / 10) {
            return error("size=" + std::string(value.substr(0, 40)) + " is not a decimal number of bytes");
          }
          v = v * 10 + static_cast<uint64_t>(c - '0');
        }
        size = v;
      }
      if (global) {
        global_size_ = size;
      } else if (!have_size && !pax_size_) {
        pax_size_ = size;
      }
      have_size = true;
    }
    pos += length;
  }
  return Status::Ok();
}

Status TarParser::Finish() {
  switch (state_) {
    case State::kFailed:
      return failed_;
    case State::kEnd:
      return Status::Ok();
    case State::kHeader:
      if (!seen_input_) {
        return Fail(Corrupt(source_ + " is empty (0 bytes from offset " + std::to_string(start_offset_) +
                            "): not a tar archive"));
      }
      if (first_header_) {
        return Fail(Corrupt(source_ + " is not a tar archive (no valid header at offset " +
                            std::to_string(start_offset_) + ": only " + std::to_string(header_fill_) +
                            " bytes" + FormatHint(header_, header_fill_) + ")"));
      }
      if (header_fill_ > 0) {
        return Fail(Corrupt(Where(offset_ - header_fill_) + "truncated archive: the input ends inside a header " +
                            "(expected 512 bytes, got " + std::to_string(header_fill_) + ")"));
      }
      if (chain_pending_) break;
      return Status::Ok();
    case State::kExtension:
      return Fail(Corrupt(Where(extension_offset_) + "truncated archive: the input ends inside an extension " +
                          "header (expected " + std::to_string(extension_size_) + " bytes, got " +
                          std::to_string(extension_.size()) + ")"));
    case State::kData:
    case State::kSkip: {
      if (chain_pending_) break;  // padding of an extension header
      uint64_t got = offset_ - current_.data_offset;
      if (got < data_bytes_) {
        return Fail(Corrupt(Where(current_.header_offset) + "truncated member \"" + current_.name +
                            "\": expected " + std::to_string(data_bytes_) + " bytes, got " +
                            std::to_string(got)));
      }
      return Fail(Corrupt(Where(current_.header_offset) + "truncated archive: the input ends inside the " +
                          "padding after member \"" + current_.name + "\""));
    }
  }
  return Fail(Corrupt(Where(chain_first_offset_) + "truncated archive: the input ends after an extension "
                      "header (pax or GNU long name), before the member it describes"));
}

}  // namespace s3stream
