// EpochPlan: which samples a rank reads in an epoch, in which order, and which DataLoader worker
// reads which of them. A pure function of (the shards' sample layout, seed, epoch, world size,
// rank, options): every process computes its own share without talking to the others, and the same
// inputs give the same order on every machine.
//
// Guarantees (docs/epoch_plan.md has the reasoning):
// * The epoch's global sequence (shard order, interleaving, chunk shuffle) does not depend on the
//   world size; ranks take turns of `stripe` consecutive positions of it (rank_split.h), so a run
//   stopped mid-epoch can continue with any number of ranks (elastic resume).
// * Every sample appears exactly once per epoch across all ranks; the remainder that does not
//   split evenly is dropped (kDrop) or filled by repeating samples from the start of the pass
//   (kPad), so every rank has exactly samples_per_rank() samples and DDP cannot hang.
// * Sample granularity: fewer shards than ranks x workers is fine.
// * The rank's order does not depend on the number of DataLoader workers: positions are dealt to
//   workers batch by batch in DataLoader's round-robin order, so a DataLoader with any number of
//   workers delivers the same sequence, and resuming at any position continues it exactly.
// * Shuffling (when on): the shard order changes every epoch; `interleave` shards are read
//   round-robin in chunks of consecutive samples (one ranged GET each); a seeded buffer of
//   `shuffle_chunks` chunks reorders chunks.
#pragma once

#include <cstdint>
#include <vector>

#include "s3stream/rank_split.h"
#include "s3stream/status.h"

namespace s3stream {

struct PlanOptions {
  uint64_t seed = 0;
  uint64_t epoch = 0;
  int world_size = 1;
  int rank = 0;
  bool shuffle = true;
  Remainder remainder = Remainder::kDrop;
  int batch_size = 1;             // the DataLoader's batch size: the unit dealt to workers
  int interleave = 4;             // shards the sequence reads round-robin at once
  uint64_t chunk_bytes = 4 << 20;  // consecutive samples read together (at least one sample)
  int shuffle_chunks = 64;        // chunk-level shuffle buffer
  uint64_t stripe = 0;            // consecutive positions a rank takes per turn (0: DefaultStripe)
};

// One shard as the plan sees it: sample i spans bytes [offsets[i], offsets[i+1]).
struct ShardLayout {
  std::vector<uint64_t> offsets;  // samples + 1 entries, ascending
  // False for compressed shards, which cannot be entered mid-way: the plan then reads a shard's
  // whole share as one chunk instead of splitting it by chunk_bytes.
  bool splittable = true;
  uint64_t samples() const { return offsets.empty() ? 0 : offsets.size() - 1; }
};

struct SampleRef {
  uint32_t shard = 0;
  uint32_t index = 0;  // sample number within the shard
  bool operator==(const SampleRef&) const = default;
};

// The map-style plan's order: a seeded Fisher-Yates permutation of [0, n) for (seed, epoch), with
// the same generator as the shard plan (s3stream.EpochSampler splits it between ranks).
std::vector<uint64_t> EpochPermutation(uint64_t n, uint64_t seed, uint64_t epoch);

// About chunk_bytes worth of samples (at the dataset's mean sample size): the stripe of the rank
// split when PlanOptions::stripe is 0. A pure function of the layout, so every rank agrees.
uint64_t DefaultStripe(const std::vector<ShardLayout>& shards, uint64_t chunk_bytes);

class EpochPlan {
 public:
  // The whole epoch. Fails (kInvalidArgument) on an empty dataset, bad options, or, with kDrop,
  // fewer samples than ranks (then every rank would get nothing: use kPad).
  static Result<EpochPlan> Make(const std::vector<ShardLayout>& shards, const PlanOptions& options);
  // What a stopped run left of the epoch (positions of its global sequence, RankSplit::After), split
  // between options.world_size ranks: elastic resume. Empty `remaining`: every rank gets nothing.
  static Result<EpochPlan> Make(const std::vector<ShardLayout>& shards, const PlanOptions& options,
                                std::vector<PositionRange> remaining);

  uint64_t total_samples() const { return total_samples_; }
  int batch_size() const { return batch_size_; }
  uint64_t samples_per_rank() const { return order_.size(); }
  // The rank's samples in the order the training loop receives them ...
  const std::vector<SampleRef>& order() const { return order_; }
  // ... and their positions in the epoch's global sequence.
  const std::vector<uint64_t>& positions() const { return positions_; }
  // How this pass deals the global sequence to ranks (for the resume arithmetic).
  const RankSplit& split() const { return split_; }

  // Positions (into order()) that DataLoader worker `worker` of `num_workers` yields, in order,
  // when iteration starts at position `start` (0, or where a resumed run left off). Batches of
  // batch_size positions counted from `start` go to workers round-robin.
  std::vector<uint64_t> WorkerPositions(int worker, int num_workers, uint64_t start = 0) const;

 private:
  uint64_t total_samples_ = 0;
  int batch_size_ = 1;
  std::vector<SampleRef> order_;
  std::vector<uint64_t> positions_;
  RankSplit split_;
};

}  // namespace s3stream
