// The shard index: where each sample of a tar shard starts. With it the epoch plan can split shards
// between ranks and workers at sample granularity and a reader can start mid-shard with one ranged
// GET. Built by one streaming pass over the shard; stored by the Python layer as a JSON sidecar.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "s3stream/object_reader.h"
#include "s3stream/object_store.h"

namespace s3stream {

struct ShardIndex {
  ObjectInfo object;               // size and ETag of the shard the index describes
  bool gzip = false;               // offsets are then in the decompressed stream
  std::vector<uint64_t> offsets;   // sample i spans [offsets[i], offsets[i+1]); samples + 1 entries
  std::vector<std::string> keys;   // sample keys, for messages and checks
};

// Reads the whole shard once, sequentially with read-ahead. Blocks the calling thread.
// Compression is detected from the name (.tgz, .tar.gz) or the gzip magic bytes.
Result<ShardIndex> BuildShardIndex(std::shared_ptr<ObjectStore> store, const std::string& key,
                                   ReaderOptions options = {});

}  // namespace s3stream
