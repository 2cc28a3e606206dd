// Tar archives over byte spans, with no I/O: TarParser turns a stream of Buffers (the chunks of a
// ranged GET, in order) into members; TarWriter turns members into bytes for a sink.
//
// Formats read: POSIX ustar (name + prefix), pax ('x' per file, 'g' global: path, size), old V7
// and GNU headers, GNU long names ('L') and long link names ('K'), base-256 sizes. Only regular
// files are delivered; every other type is skipped, with its data. End of archive is the first
// all-zero block, as in GNU tar and Python's tarfile; anything after it is ignored.
//
// Damage is an error (kCorrupt with the source, the offset and what is wrong), never a silent stop:
// Python's tarfile, and so webdataset, ends iteration quietly at a bad header after the first one or
// at an archive cut inside a header, losing the rest of the shard without a word. GNU sparse members
// are refused (kCorrupt), not expanded.
//
// Threading: neither class is thread-safe; use one instance per stream. Buffers handed out may go to
// any thread (they share storage with the chunks fed in, which stay alive as long as they do).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "s3stream/buffer.h"
#include "s3stream/status.h"

namespace s3stream {

inline constexpr size_t kTarBlockSize = 512;

// One regular file of an archive. Offsets are absolute positions in the archive, so an index can
// record header_offset and a later reader can start a ranged GET there (see TarParser's start_offset).
struct TarMember {
  std::string name;        // after pax path / GNU long name / ustar prefix; raw bytes, usually UTF-8
  uint64_t header_offset;  // the first header of this member, including its pax or 'L' headers
  uint64_t data_offset;    // first data byte
  uint64_t size;           // data bytes (the data is padded to a 512-byte boundary in the archive)
  Buffer data;             // a Slice of a fed chunk when the data lay inside one, else a new Buffer
};

class TarParser {
 public:
  using MemberCallback = std::function<Status(TarMember&&)>;

  // `source_name` (e.g. "s3://b/shard-000.tar") names the archive in error messages. `start_offset`
  // is where the first fed byte lies in the archive: 0, or a member's header_offset from an index
  // (pax global headers before that point are then unknown, which is fine for ordinary shards).
  explicit TarParser(std::string source_name, uint64_t start_offset = 0);

  // Feeds the next bytes. Calls on_member for each complete regular file, in archive order; an error
  // from on_member stops parsing and is returned. After an error the parser stays failed.
  Status Feed(const Buffer& chunk, const MemberCallback& on_member);
  // End of input. OK after the end-of-archive block, or at a block boundary after a member's padding
  // (archives without end blocks are common). kCorrupt when the input stops inside a header, inside
  // a member's data or padding, or right after a pax/GNU extension header.
  Status Finish();

  // Absolute archive offset of the next byte the parser wants (bytes consumed, plus start_offset).
  // Stops growing at the end-of-archive block.
  uint64_t offset() const { return offset_; }
  // True once the end-of-archive block has been seen; later input is ignored.
  bool at_end() const { return state_ == State::kEnd; }

 private:
  enum class State { kHeader, kExtension, kData, kSkip, kEnd, kFailed };

  Status ParseHeader(const uint8_t* block, uint64_t header_offset);
  Status ApplyExtension();
  void AppendToAssembly(const uint8_t* bytes, size_t n);
  Status FinishData(const MemberCallback& on_member);
  Status Fail(Status status);
  std::string Where(uint64_t offset) const;

  std::string source_;
  uint64_t offset_;
  uint64_t start_offset_;
  State state_ = State::kHeader;
  Status failed_;
  bool seen_input_ = false;
  bool first_header_ = true;

  // A header split across chunks is gathered here.
  uint8_t header_[kTarBlockSize];
  size_t header_fill_ = 0;

  // Extension headers seen before the member they apply to. The first 'L' or pax path wins, as in
  // Python's tarfile (the reference for WebDataset).
  bool chain_pending_ = false;     // extension headers read, their member not yet
  uint64_t chain_first_offset_ = 0;
  bool chain_started_ = false;     // a per-member ('x', 'L', 'K') header was read
  uint64_t chain_offset_ = 0;      // ... at this offset: the member's header_offset
  std::optional<std::string> pending_name_;
  std::optional<uint64_t> pax_size_;
  std::optional<std::string> global_path_;
  std::optional<uint64_t> global_size_;

  // The extension header being read (pax records or a GNU long name).
  char extension_type_ = 0;
  uint64_t extension_offset_ = 0;
  std::string extension_;
  uint64_t extension_size_ = 0;

  // The member whose data is being read: its data bytes in the archive, what is left of them and
  // then of the padding.
  TarMember member_;
  struct {
    std::string name;
    uint64_t header_offset = 0;
    uint64_t data_offset = 0;
  } current_;  // what error messages say about member_
  bool deliver_ = false;  // false: the data is skipped (not a regular file)
  Buffer assembly_;       // data of a member split across chunks
  uint64_t data_bytes_ = 0;
  uint64_t data_left_ = 0;
  uint64_t skip_left_ = 0;
};

// Writes ustar members (a pax 'x' header when a name is not ASCII or fits neither the ustar name nor
// name + prefix fields, or a size needs more than 11 octal digits) with deterministic metadata: mode
// 0644, uid/gid 0, mtime 0, empty user and group names. The same inputs give the same bytes.
class TarWriter {
 public:
  using Sink = std::function<Status(std::span<const uint8_t>)>;

  explicit TarWriter(Sink sink);

  // kInvalidArgument for an empty name, a NUL in it, or a trailing '/' (that would read as a
  // directory); a failing sink's Status otherwise.
  Status Add(std::string_view name, std::span<const uint8_t> data);
  Status Add(std::string_view name, std::string_view data);
  // Writes the two end-of-archive blocks. Add after Finish is kInvalidArgument.
  Status Finish();

  uint64_t bytes_written() const { return written_; }
  // Bytes Add(name, data) writes for data of `size` bytes: lets a shard writer respect a size limit.
  static uint64_t MemberBytes(std::string_view name, uint64_t size);

 private:
  Status Write(std::span<const uint8_t> bytes);

  Sink sink_;
  uint64_t written_ = 0;
  bool finished_ = false;
};

// A whole archive in memory: for tests and small shards.
std::string TarToString(std::span<const std::pair<std::string, std::string>> members);

}  // namespace s3stream
