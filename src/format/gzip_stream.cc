#include "format/gzip_stream.h"

#include <zlib.h>

#include <algorithm>

namespace s3stream::internal {

struct GzipInflater::ZState {
  z_stream s{};
  bool ready = false;
};

bool HasGzipMagic(std::span<const uint8_t> head) {
  return head.size() >= 2 && head[0] == 0x1f && head[1] == 0x8b;
}

bool IsGzipShardName(std::string_view name) {
  auto ends_with = [&](std::string_view suffix) {
    if (name.size() < suffix.size()) return false;
    std::string_view tail = name.substr(name.size() - suffix.size());
    return std::equal(tail.begin(), tail.end(), suffix.begin(),
                      [](char a, char b) { return (a >= 'A' && a <= 'Z' ? a - 'A' + 'a' : a) == b; });
  };
  return ends_with(".tgz") || ends_with(".tar.gz");
}

GzipInflater::GzipInflater(std::string source_name, size_t block_size)
    : source_(std::move(source_name)), block_size_(std::max<size_t>(block_size, 1)), z_(std::make_unique<ZState>()) {
  // 16 + MAX_WBITS: gzip framing only (header and CRC-32/ISIZE trailer checked), 32 KiB window.
  if (inflateInit2(&z_->s, 16 + MAX_WBITS) == Z_OK) {
    z_->ready = true;
  } else {
    state_ = State::kFailed;
    failed_ = Internal(source_ + ": zlib inflateInit2 failed (out of memory?)");
  }
}

GzipInflater::~GzipInflater() {
  if (z_->ready) inflateEnd(&z_->s);
}

Status GzipInflater::Fail(Status status) {
  state_ = State::kFailed;
  failed_ = status;
  return status;
}

Status GzipInflater::Emit(const OutputCallback& on_output) {
  if (block_.size() == emitted_) return Status::Ok();
  Buffer out = block_.Slice(emitted_, block_.size() - emitted_);
  emitted_ = block_.size();
  Status status = on_output(std::move(out));
  if (!status.ok()) return Fail(std::move(status));
  return Status::Ok();
}

Status GzipInflater::Feed(std::span<const uint8_t> input, const OutputCallback& on_output) {
  if (state_ == State::kFailed) return failed_;
  z_stream& s = z_->s;
  size_t pos = 0;
  while (pos < input.size()) {
    switch (state_) {
      case State::kBetween:
        if (input[pos] == 0 && seen_member_) {
          state_ = State::kTrailingZeros;
          break;
        }
        inflateReset(&s);
        member_start_ = compressed_offset_;
        seen_member_ = true;
        state_ = State::kMember;
        break;
      case State::kTrailingZeros:
        if (input[pos] != 0) {
          return Fail(Corrupt(source_ + ": trailing garbage after the last gzip member, at compressed offset " +
                              std::to_string(compressed_offset_)));
        }
        ++pos;
        ++compressed_offset_;
        break;
      case State::kMember: {
        if (!block_.valid() || block_.size() == block_.capacity()) {
          block_ = Buffer::Allocate(block_size_);
          emitted_ = 0;
        }
        const size_t in_avail = input.size() - pos;
        const size_t out_avail = block_.capacity() - block_.size();
        // zlib counts in uInt; chunks over 4 GiB are fed in slices.
        s.next_in = const_cast<Bytef*>(input.data() + pos);
        s.avail_in = static_cast<uInt>(std::min<size_t>(in_avail, 1u << 30));
        s.next_out = block_.data() + block_.size();
        s.avail_out = static_cast<uInt>(std::min<size_t>(out_avail, 1u << 30));
        const uInt in_before = s.avail_in;
        const uInt out_before = s.avail_out;
        int ret = inflate(&s, Z_NO_FLUSH);
        size_t consumed = in_before - s.avail_in;
        size_t produced = out_before - s.avail_out;
        pos += consumed;
        compressed_offset_ += consumed;
        block_.resize(block_.size() + produced);
        decompressed_offset_ += produced;
        if (ret == Z_STREAM_END) {
          state_ = State::kBetween;
        } else if (ret != Z_OK && ret != Z_BUF_ERROR) {
          std::string why = s.msg != nullptr ? s.msg : "zlib error " + std::to_string(ret);
          if (member_start_ == 0 && why == "incorrect header check") {
            return Fail(Corrupt(source_ + " is not gzip data (no gzip header at compressed offset 0)"));
          }
          return Fail(Corrupt(source_ + ": corrupt gzip data at compressed offset " +
                              std::to_string(compressed_offset_) + " (in the gzip member starting at " +
                              std::to_string(member_start_) + "): " + why));
        } else if (consumed == 0 && produced == 0) {
          return Fail(Internal(source_ + ": zlib made no progress at compressed offset " +
                               std::to_string(compressed_offset_)));
        }
        if (block_.size() == block_.capacity()) S3S_RETURN_IF_ERROR(Emit(on_output));
        break;
      }
      case State::kFailed:
        return failed_;
    }
  }
  return Emit(on_output);
}

Status GzipInflater::Finish() {
  switch (state_) {
    case State::kFailed:
      return failed_;
    case State::kMember:
      return Fail(Corrupt(source_ + ": truncated gzip stream: the input ends at compressed offset " +
                          std::to_string(compressed_offset_) + ", inside the gzip member starting at " +
                          std::to_string(member_start_)));
    case State::kBetween:
      if (!seen_member_) return Fail(Corrupt(source_ + " is empty (0 bytes): not gzip data"));
      return Status::Ok();
    case State::kTrailingZeros:
      return Status::Ok();
  }
  return Status::Ok();
}

}  // namespace s3stream::internal
