// RankSplit: how the positions of an epoch's global sequence that a pass still has to read are
// dealt to the ranks of a job, and what remains when every rank stops after the same count.
//
// The epoch's global sequence (shards and samples in the order of epoch_plan.h, or a permutation
// of a map-style dataset) does not depend on the world size. A pass reads `remaining`, a list of
// position ranges of that sequence (the whole epoch, or what a stopped run left), as one virtual
// list V: with kDrop its first world_size * per_rank() entries, with kPad followed by V's own start
// again until every rank has per_rank(). Ranks take turns of `stripe` consecutive entries of V
// (rank 0 the first stripe, rank 1 the next, ...); when fewer than world_size * stripe entries are
// left, each rank takes an equal block of them. Every rank gets exactly per_rank() entries, so DDP
// ranks run the same number of steps.
//
// Elastic resume: when every rank has consumed `c` entries of its share (DDP keeps ranks in step),
// After(c) lists what no rank has delivered. A job of any other size continues from there with a
// new split, and every remaining sample is delivered exactly once. The state of one rank is enough.
#pragma once

#include <cstdint>
#include <vector>

#include "s3stream/status.h"

namespace s3stream {

enum class Remainder { kDrop, kPad };

// Samples per rank: total / world_size with kDrop (the rest is left out), rounded up with kPad
// (the rest repeats samples from the start of the pass). Every plan, the shard one and the
// map-style one (s3stream.EpochSampler), splits by this.
uint64_t SamplesPerRank(uint64_t total, int world_size, Remainder remainder);

struct PositionRange {
  uint64_t begin = 0;
  uint64_t end = 0;  // exclusive
  bool operator==(const PositionRange&) const = default;
};

class RankSplit {
 public:
  // Fails (kInvalidArgument) on overlapping, unordered or empty ranges, a world_size < 1, or a
  // stripe of 0. `remaining` may be empty (nothing left of the epoch: every rank gets nothing).
  static Result<RankSplit> Make(std::vector<PositionRange> remaining, int world_size, uint64_t stripe,
                                Remainder remainder);

  // The whole epoch of `total` positions.
  static Result<RankSplit> WholeEpoch(uint64_t total, int world_size, uint64_t stripe, Remainder remainder) {
    return Make(total == 0 ? std::vector<PositionRange>{} : std::vector<PositionRange>{{0, total}}, world_size,
                stripe, remainder);
  }

  const std::vector<PositionRange>& remaining() const { return remaining_; }
  int world_size() const { return world_size_; }
  uint64_t stripe() const { return stripe_; }
  Remainder remainder() const { return remainder_; }
  uint64_t remaining_count() const { return count_; }
  // Entries each rank reads in this pass.
  uint64_t per_rank() const { return per_rank_; }

  // Rank `rank`'s share as positions of the global sequence, in the order it reads them.
  std::vector<uint64_t> RankPositions(int rank) const;

  // What remains of the epoch once every rank has consumed the first `consumed` (<= per_rank())
  // entries of its share: `remaining` less every position delivered (a kPad repeat included: a
  // continued run does not read it again).
  Result<std::vector<PositionRange>> After(uint64_t consumed) const;

 private:
  // Ranges of V indices holding the first `count` entries of rank `rank`'s share.
  std::vector<PositionRange> RankSlots(int rank, uint64_t count) const;
  // Appends the global positions of V indices [first, last) to `out`, as runs of consecutive ones.
  void AppendRuns(uint64_t first, uint64_t last, std::vector<PositionRange>& out) const;

  std::vector<PositionRange> remaining_;
  std::vector<uint64_t> starts_;  // V index of each remaining range's first entry
  int world_size_ = 1;
  uint64_t stripe_ = 1;
  Remainder remainder_ = Remainder::kDrop;
  uint64_t count_ = 0;
  uint64_t per_rank_ = 0;
};

}  // namespace s3stream
