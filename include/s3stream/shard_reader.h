// ShardSampleReader: delivers one DataLoader worker's share of an epoch plan, sample by sample, in
// plan order. For each batch it reads only the byte ranges its samples occupy (consecutive samples
// of a shard coalesce into one ranged GET, long ranges split into parallel pieces), keeps batches
// ahead of the consumer in flight up to a byte budget, parses them with the tar parser (zero-copy
// slices of the fetched buffers), and checks every sample against the index.
//
// Read-ahead is sized by measurement: the window of bytes in flight starts small (two pieces) and
// doubles each time the consumer finds the data it needs still on the wire (its first batch
// included), until requests cover the store's time to first byte at the rate the consumer reads
// (the bandwidth-delay product) or max_bytes_ahead is reached. A consumer slower than the network
// leaves it at twice its start.
// Memory: fetched-but-undelivered bytes stay under max_bytes_ahead (one batch may exceed it alone).
// Threading: one consumer thread calls Next(); the store's threads do the I/O.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "s3stream/epoch_plan.h"
#include "s3stream/object_store.h"
#include "s3stream/webdataset.h"

namespace s3stream {

struct ShardSource {
  std::shared_ptr<ObjectStore> store;
  std::string key;
  std::string url;                // reported with each sample (__url__)
  std::string etag;               // reads are pinned to it; empty: not pinned
  std::vector<uint64_t> offsets;  // from the shard's index
  bool gzip = false;
};

struct ShardReaderOptions {
  size_t max_bytes_ahead = 64 << 20;
  size_t piece_size = 8 << 20;
};

struct ShardReaderStats {
  uint64_t window_bytes = 0;  // current read-ahead window
  uint64_t stalls = 0;        // times the consumer waited for data still in flight
  uint64_t bytes_fetched = 0;
};

struct PlannedSample {
  uint64_t position = 0;  // in the rank's epoch order
  uint32_t shard = 0;
  Sample sample;
};

class ShardSampleReader {
 public:
  // Reads the positions EpochPlan::WorkerPositions(worker, num_workers, start) names.
  ShardSampleReader(std::vector<ShardSource> shards, const EpochPlan& plan, int worker, int num_workers,
                    uint64_t start, ShardReaderOptions options = {});
  ~ShardSampleReader();
  ShardSampleReader(const ShardSampleReader&) = delete;
  ShardSampleReader& operator=(const ShardSampleReader&) = delete;

  // The next sample, or nullopt at the end of the worker's share.
  Result<std::optional<PlannedSample>> Next();

  // Samples this reader will deliver in all.
  uint64_t size() const { return refs_.size(); }
  const ShardReaderStats& stats() const { return stats_; }

 private:
  struct Batch;
  struct Run;

  Status Fill();  // requests batches up to the byte budget
  void Request(Batch& batch);
  Status Parse(Batch& batch);

  std::vector<ShardSource> shards_;
  ShardReaderOptions options_;
  std::vector<uint64_t> positions_;
  std::vector<SampleRef> refs_;
  std::vector<std::pair<size_t, size_t>> batch_bounds_;  // [begin, end) into positions_
  size_t next_batch_ = 0;                                 // next batch to request
  std::deque<std::unique_ptr<Batch>> ahead_;             // requested, not fully delivered
  size_t bytes_ahead_ = 0;
  uint64_t delivered_batches_ = 0;
  ShardReaderStats stats_;
  Status failed_;  // sticky: after an error every Next() reports it
};

}  // namespace s3stream
