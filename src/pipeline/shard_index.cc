#include "s3stream/shard_index.h"

#include "format/gzip_stream.h"
#include "pipeline/sample_stream.h"

namespace s3stream {

Result<ShardIndex> BuildShardIndex(std::shared_ptr<ObjectStore> store, const std::string& key, ReaderOptions options) {
  const std::string source = store->Describe(key);
  S3S_ASSIGN_OR_RETURN(std::unique_ptr<ObjectReader> reader, ObjectReader::Open(store, key, options));
  ShardIndex index;
  index.object = reader->info();

  S3S_ASSIGN_OR_RETURN(Buffer first, reader->ReadBuffer(options.chunk_size));
  index.gzip = internal::IsGzipShardName(key) || internal::HasGzipMagic(first.span());
  internal::SampleStream stream(source, index.gzip);
  uint64_t end = 0;
  auto on_sample = [&](Sample&& sample) {
    index.offsets.push_back(sample.offset);
    index.keys.push_back(std::move(sample.key));
    end = sample.end_offset;
    return Status::Ok();
  };
  for (Buffer chunk = std::move(first); !chunk.empty();) {
    S3S_RETURN_IF_ERROR(stream.Feed(chunk, on_sample));
    S3S_ASSIGN_OR_RETURN(chunk, reader->ReadBuffer(options.chunk_size));
  }
  S3S_RETURN_IF_ERROR(stream.Finish(on_sample));
  index.offsets.push_back(end);
  return index;
}

}  // namespace s3stream
