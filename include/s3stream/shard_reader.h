// ShardSampleReader: delivers one DataLoader worker's share of an epoch plan, sample by sample, in
// plan order. For each batch it reads only the byte ranges its samples occupy (consecutive samples
// of a shard coalesce into one range), hands the ranges to the range engine (range_fetcher.h: long
// ranges split into parallel pieces, pinned to the shard's ETag, read ahead of the consumer),
// parses them with the tar parser (zero-copy slices of the fetched buffers), and checks every
// sample against the index.
//
// Read-ahead is sized by measurement: the window of bytes in flight starts small (two pieces) and
// doubles each time the consumer finds the data it needs still on the wire (its first batch
// included), until requests cover the store's time to first byte at the rate the consumer reads
// (the bandwidth-delay product) or max_bytes_ahead is reached. A consumer slower than the network
// leaves it at twice its start.
// Memory: fetched-but-undelivered bytes stay under max_bytes_ahead (a batch's bytes count until
// its last sample is delivered; one batch may exceed it alone).
// Threading: one consumer thread calls Next(); the store's threads do the I/O.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "s3stream/epoch_plan.h"
#include "s3stream/range_fetcher.h"
#include "s3stream/shard_set.h"
#include "s3stream/webdataset.h"

namespace s3stream {

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
  // Reads the positions EpochPlan::WorkerPositions(worker, num_workers, start) names, from the
  // shards the plan was made for, less the first `skip` of them (a worker resumed on its own, as
  // torchdata's StatefulDataLoader restores workers: whole batches, so batches stay aligned).
  ShardSampleReader(std::shared_ptr<const ShardSet> shards, const EpochPlan& plan, int worker, int num_workers,
                    uint64_t start, uint64_t skip = 0, ShardReaderOptions options = {});
  ~ShardSampleReader();
  ShardSampleReader(const ShardSampleReader&) = delete;
  ShardSampleReader& operator=(const ShardSampleReader&) = delete;

  // The next sample, or nullopt at the end of the worker's share.
  Result<std::optional<PlannedSample>> Next();

  // Samples this reader will deliver in all.
  uint64_t size() const { return refs_.size(); }
  ShardReaderStats stats() const;
  const ShardSet& shards() const { return *shards_; }

 private:
  struct Batch;
  struct Run;

  Batch& EnsureBatch(size_t number);           // batch `number` (its runs planned once, when first needed)
  std::optional<FetchRange> NextRange();       // the fetcher's source: every batch's runs, in order
  Status Parse(Batch& batch);

  const std::shared_ptr<const ShardSet> shards_;
  std::vector<uint64_t> positions_;
  std::vector<SampleRef> refs_;
  std::vector<std::pair<size_t, size_t>> batch_bounds_;  // [begin, end) into positions_
  std::deque<std::unique_ptr<Batch>> ahead_;             // planned, not fully delivered
  size_t first_batch_ = 0;                               // the number of ahead_.front()
  size_t source_batch_ = 0, source_run_ = 0;             // where NextRange() continues
  uint64_t runs_parsed_ = 0;
  RangeFetcher fetcher_;
  Status failed_;  // sticky: after an error every Next() reports it
};

}  // namespace s3stream
