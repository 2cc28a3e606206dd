// SampleStream: a shard's bytes in, WebDataset samples out. Chains the gzip inflater (for .tgz
// shards), the tar parser and the sample grouper, so readers and the index builder share one path.
//
// Threading: not thread-safe; one stream per shard read.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "format/gzip_stream.h"
#include "s3stream/tar.h"
#include "s3stream/webdataset.h"

namespace s3stream::internal {

class SampleStream {
 public:
  // `start_offset`: where the first fed byte lies in the (decompressed) archive. A gzip stream must
  // start at 0: compressed shards cannot be entered mid-way.
  SampleStream(std::string source, bool gzip, uint64_t start_offset = 0);

  Status Feed(const Buffer& bytes, const SampleGrouper::SampleCallback& on_sample);
  Status Finish(const SampleGrouper::SampleCallback& on_sample);

 private:
  Status FeedTar(const Buffer& bytes, const SampleGrouper::SampleCallback& on_sample);

  std::optional<GzipInflater> inflater_;
  TarParser parser_;
  SampleGrouper grouper_;
};

}  // namespace s3stream::internal
