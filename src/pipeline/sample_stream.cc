#include "pipeline/sample_stream.h"

namespace s3stream::internal {

SampleStream::SampleStream(std::string source, bool gzip, uint64_t start_offset)
    : parser_(source, start_offset), grouper_(source) {
  if (gzip) inflater_.emplace(source);
}

Status SampleStream::FeedTar(const Buffer& bytes, const SampleGrouper::SampleCallback& on_sample) {
  return parser_.Feed(bytes, [&](TarMember&& member) { return grouper_.Add(std::move(member), on_sample); });
}

Status SampleStream::Feed(const Buffer& bytes, const SampleGrouper::SampleCallback& on_sample) {
  if (!inflater_) return FeedTar(bytes, on_sample);
  return inflater_->Feed(bytes.span(), [&](Buffer out) { return FeedTar(out, on_sample); });
}

Status SampleStream::Finish(const SampleGrouper::SampleCallback& on_sample) {
  if (inflater_) S3S_RETURN_IF_ERROR(inflater_->Finish());
  S3S_RETURN_IF_ERROR(parser_.Finish());
  return grouper_.Finish(on_sample);
}

}  // namespace s3stream::internal
