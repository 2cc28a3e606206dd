// ShardSet: the shards of one dataset as the pipeline sees them (where each one is, its ETag, and
// its sample layout), built once per process and shared, immutable, by every epoch's plan and
// every reader. Each shard's sample offsets are held once, in its layout.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "s3stream/client.h"
#include "s3stream/epoch_plan.h"
#include "s3stream/object_store.h"

namespace s3stream {

struct ShardLocation {
  std::shared_ptr<ObjectStore> store;
  std::string key;
  std::string url;   // reported with each sample (__url__)
  std::string etag;  // reads are pinned to it; empty: not pinned
};

// One shard as its index describes it.
struct ShardEntry {
  std::string uri;
  std::string etag;
  std::vector<uint64_t> offsets;  // sample i spans [offsets[i], offsets[i+1])
  bool gzip = false;
};

class ShardSet {
 public:
  ShardSet(std::vector<ShardLocation> locations, std::vector<ShardLayout> layouts);

  // Locates every shard through `client` (its driver, by URI scheme) and checks each layout
  // (ascending offsets, at least one sample): kInvalidArgument names the shard otherwise.
  static Result<std::shared_ptr<const ShardSet>> Make(Client& client, std::vector<ShardEntry> entries);

  size_t size() const { return locations_.size(); }
  const ShardLocation& location(size_t shard) const { return locations_[shard]; }
  const ShardLayout& layout(size_t shard) const { return layouts_[shard]; }
  const std::vector<ShardLayout>& layouts() const { return layouts_; }
  bool gzip(size_t shard) const { return !layouts_[shard].splittable; }

 private:
  std::vector<ShardLocation> locations_;
  std::vector<ShardLayout> layouts_;
};

}  // namespace s3stream
