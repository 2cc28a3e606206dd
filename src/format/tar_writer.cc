// TarWriter: ustar headers, plus a pax 'x' header for what ustar cannot hold. Output is
// deterministic (no clock, no user names), so a shard written twice has the same bytes and ETag.
#include <algorithm>
#include <array>
#include <cstring>

#include "s3stream/tar.h"

namespace s3stream {
namespace {

using Block = std::array<uint8_t, kTarBlockSize>;

constexpr size_t kNameField = 100;
constexpr size_t kPrefixField = 155;
constexpr uint64_t kMaxOctalSize = (uint64_t{1} << 33) - 1;  // 11 octal digits

uint64_t Padding(uint64_t size) { return (kTarBlockSize - size % kTarBlockSize) % kTarBlockSize; }

bool IsAscii(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return c > 0 && static_cast<unsigned char>(c) < 0x80; });
}

// `digits` octal digits, zero-padded, then a NUL.
void PutOctal(uint8_t* field, size_t digits, uint64_t value) {
  for (size_t i = digits; i-- > 0;) {
    field[i] = static_cast<uint8_t>('0' + (value & 7));
    value >>= 3;
  }
  field[digits] = 0;
}

// GNU base-256: for sizes beyond 8 GiB - 1 (the pax size record is authoritative, this is for
// readers without pax support).
void PutBase256(uint8_t* field, size_t n, uint64_t value) {
  std::memset(field, 0, n);
  field[0] = 0x80;
  for (size_t i = n; i-- > 1 && value != 0;) {
    field[i] = static_cast<uint8_t>(value & 0xff);
    value >>= 8;
  }
}

// Splits `name` into ustar prefix and name fields, preferring the shortest prefix (as Python's
// tarfile does). Returns false when no split fits.
bool SplitUstar(std::string_view name, std::string_view* prefix, std::string_view* rest) {
  if (name.size() <= kNameField) {
    *prefix = {};
    *rest = name;
    return true;
  }
  for (size_t slash = name.find('/'); slash != std::string_view::npos; slash = name.find('/', slash + 1)) {
    if (slash > kPrefixField) return false;
    std::string_view tail = name.substr(slash + 1);
    if (slash > 0 && !tail.empty() && tail.size() <= kNameField) {
      *prefix = name.substr(0, slash);
      *rest = tail;
      return true;
    }
  }
  return false;
}

// "%d %s=%s\n", where %d counts the whole record, itself included.
std::string PaxRecord(std::string_view keyword, std::string_view value) {
  size_t base = keyword.size() + value.size() + 3;  // ' ', '=', '\n'
  size_t digits = 1;
  while (std::to_string(base + digits).size() != digits) ++digits;
  return std::to_string(base + digits) + " " + std::string(keyword) + "=" + std::string(value) + "\n";
}

// The pax records `name` and `size` need, or "" when plain ustar holds them.
std::string PaxRecords(std::string_view name, uint64_t size) {
  std::string records;
  std::string_view prefix, rest;
  if (!IsAscii(name) || !SplitUstar(name, &prefix, &rest)) records += PaxRecord("path", name);
  if (size > kMaxOctalSize) records += PaxRecord("size", std::to_string(size));
  return records;
}

Block MakeHeader(std::string_view name, std::string_view prefix, uint64_t size, char type) {
  Block b{};
  if (!name.empty()) std::memcpy(b.data(), name.data(), std::min(name.size(), kNameField));
  PutOctal(b.data() + 100, 7, 0644);  // mode
  PutOctal(b.data() + 108, 7, 0);     // uid
  PutOctal(b.data() + 116, 7, 0);     // gid
  if (size > kMaxOctalSize) {
    PutBase256(b.data() + 124, 12, size);
  } else {
    PutOctal(b.data() + 124, 11, size);
  }
  PutOctal(b.data() + 136, 11, 0);  // mtime
  b[156] = static_cast<uint8_t>(type);
  std::memcpy(b.data() + 257, "ustar\0" "00", 8);
  if (!prefix.empty()) std::memcpy(b.data() + 345, prefix.data(), std::min(prefix.size(), kPrefixField));
  // The checksum is computed with its own field as spaces, then stored as 6 digits, NUL, space.
  std::memset(b.data() + 148, ' ', 8);
  uint32_t sum = 0;
  for (uint8_t c : b) sum += c;
  PutOctal(b.data() + 148, 6, sum);
  b[155] = ' ';
  return b;
}

// The name in the ustar header of a member whose real name is in a pax record: printable ASCII, so
// that readers without pax support still get a usable (if inexact) name.
std::string FallbackName(std::string_view name) {
  std::string out(name.substr(0, kNameField));
  for (char& c : out) {
    if (c <= 0 || static_cast<unsigned char>(c) >= 0x80) c = '_';
  }
  while (!out.empty() && out.back() == '/') out.back() = '_';
  return out;
}

}  // namespace

TarWriter::TarWriter(Sink sink) : sink_(std::move(sink)) {}

Status TarWriter::Write(std::span<const uint8_t> bytes) {
  S3S_RETURN_IF_ERROR(sink_(bytes));
  written_ += bytes.size();
  return Status::Ok();
}

Status TarWriter::Add(std::string_view name, std::string_view data) {
  return Add(name, std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(data.data()), data.size()));
}

Status TarWriter::Add(std::string_view name, std::span<const uint8_t> data) {
  if (finished_) return InvalidArgument("TarWriter::Add(\"" + std::string(name) + "\") after Finish()");
  if (name.empty()) return InvalidArgument("tar member name is empty");
  if (name.find('\0') != std::string_view::npos) {
    return InvalidArgument("tar member name contains a NUL byte");
  }
  if (name.back() == '/') {
    return InvalidArgument("tar member name \"" + std::string(name) + "\" ends with '/' (a directory name)");
  }
  static constexpr Block kZeros{};
  std::string records = PaxRecords(name, data.size());
  std::string_view prefix, rest;
  if (!records.empty()) {
    std::string fallback = FallbackName(name);
    Block pax = MakeHeader("././@PaxHeader", {}, records.size(), 'x');
    S3S_RETURN_IF_ERROR(Write(pax));
    S3S_RETURN_IF_ERROR(Write({reinterpret_cast<const uint8_t*>(records.data()), records.size()}));
    S3S_RETURN_IF_ERROR(Write({kZeros.data(), Padding(records.size())}));
    if (IsAscii(name) && SplitUstar(name, &prefix, &rest)) {
      S3S_RETURN_IF_ERROR(Write(MakeHeader(rest, prefix, data.size(), '0')));
    } else {
      S3S_RETURN_IF_ERROR(Write(MakeHeader(fallback, {}, data.size(), '0')));
    }
  } else {
    SplitUstar(name, &prefix, &rest);
    S3S_RETURN_IF_ERROR(Write(MakeHeader(rest, prefix, data.size(), '0')));
  }
  S3S_RETURN_IF_ERROR(Write(data));
  return Write({kZeros.data(), Padding(data.size())});
}

Status TarWriter::Finish() {
  if (finished_) return Status::Ok();
  finished_ = true;
  static constexpr std::array<uint8_t, 2 * kTarBlockSize> kEnd{};
  return Write(kEnd);
}

uint64_t TarWriter::MemberBytes(std::string_view name, uint64_t size) {
  std::string records = PaxRecords(name, size);
  uint64_t pax = records.empty() ? 0 : kTarBlockSize + records.size() + Padding(records.size());
  return pax + kTarBlockSize + size + Padding(size);
}

std::string TarToString(std::span<const std::pair<std::string, std::string>> members) {
  std::string out;
  TarWriter writer([&](std::span<const uint8_t> bytes) {
    out.append(reinterpret_cast<const char*>(bytes.data()), bytes.size());
    return Status::Ok();
  });
  for (const auto& [name, data] : members) {
    Status status = writer.Add(name, data);
    assert(status.ok() && "TarToString: invalid member name");
    (void)status;
  }
  (void)writer.Finish();
  return out;
}

}  // namespace s3stream
