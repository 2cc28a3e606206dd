#include "s3stream/shard_set.h"

#include <limits>

namespace s3stream {

ShardSet::ShardSet(std::vector<ShardLocation> locations, std::vector<ShardLayout> layouts)
    : locations_(std::move(locations)), layouts_(std::move(layouts)) {}

Result<std::shared_ptr<const ShardSet>> ShardSet::Make(Client& client, std::vector<ShardEntry> entries) {
  if (entries.size() > std::numeric_limits<uint32_t>::max()) {
    return InvalidArgument("a dataset holds at most 2^32 - 1 shards, got " + std::to_string(entries.size()));
  }
  std::vector<ShardLocation> locations;
  std::vector<ShardLayout> layouts;
  locations.reserve(entries.size());
  layouts.reserve(entries.size());
  for (ShardEntry& e : entries) {
    // Offsets come from a sidecar or a cache file: untrusted until checked.
    if (e.offsets.empty()) return InvalidArgument(e.uri + ": its index has no offsets; rebuild it (s3stream index)");
    if (e.offsets.size() - 1 > std::numeric_limits<uint32_t>::max()) {
      return InvalidArgument(e.uri + ": a shard holds at most 2^32 - 1 samples");
    }
    for (size_t i = 1; i < e.offsets.size(); ++i) {
      if (e.offsets[i] <= e.offsets[i - 1]) {
        return InvalidArgument(e.uri + ": its index is corrupt (offset " + std::to_string(i) + " is " +
                               std::to_string(e.offsets[i]) + ", not after " + std::to_string(e.offsets[i - 1]) +
                               "); rebuild it (s3stream index " + e.uri + ")");
      }
    }
    S3S_ASSIGN_OR_RETURN(Client::Location where, client.Locate(e.uri));
    locations.push_back(ShardLocation{std::move(where.store), std::move(where.key), e.uri, std::move(e.etag)});
    layouts.push_back(ShardLayout{std::move(e.offsets), !e.gzip});
  }
  return std::make_shared<const ShardSet>(std::move(locations), std::move(layouts));
}

}  // namespace s3stream
