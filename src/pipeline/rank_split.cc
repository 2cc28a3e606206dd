#include "s3stream/rank_split.h"

#include <algorithm>
#include <string>

namespace s3stream {

uint64_t SamplesPerRank(uint64_t total, int world_size, Remainder remainder) {
  const auto world = static_cast<uint64_t>(std::max(1, world_size));
  return remainder == Remainder::kDrop ? total / world : total / world + (total % world != 0);
}

Result<RankSplit> RankSplit::Make(std::vector<PositionRange> remaining, int world_size, uint64_t stripe,
                                  Remainder remainder) {
  if (world_size < 1) return InvalidArgument("world_size must be >= 1, got " + std::to_string(world_size));
  if (stripe < 1) return InvalidArgument("stripe must be >= 1");
  RankSplit split;
  split.starts_.reserve(remaining.size());
  for (size_t i = 0; i < remaining.size(); ++i) {
    const PositionRange& r = remaining[i];
    if (r.begin >= r.end || (i > 0 && r.begin < remaining[i - 1].end)) {
      return InvalidArgument("remaining positions must be non-empty ranges in ascending order without overlap "
                             "(range " + std::to_string(i) + " is [" + std::to_string(r.begin) + ", " +
                             std::to_string(r.end) + "))");
    }
    split.starts_.push_back(split.count_);
    split.count_ += r.end - r.begin;
  }
  split.remaining_ = std::move(remaining);
  split.world_size_ = world_size;
  split.stripe_ = stripe;
  split.remainder_ = remainder;
  split.per_rank_ = SamplesPerRank(split.count_, world_size, remainder);
  return split;
}

std::vector<PositionRange> RankSplit::RankSlots(int rank, uint64_t count) const {
  std::vector<PositionRange> out;
  const uint64_t world = static_cast<uint64_t>(world_size_);
  const uint64_t r = static_cast<uint64_t>(rank);
  const uint64_t turns = per_rank_ / stripe_;  // full turns of `stripe` entries
  const uint64_t tail = per_rank_ - turns * stripe_;
  count = std::min(count, per_rank_);
  for (uint64_t s = 0; s < turns && count > 0; ++s) {
    const uint64_t first = s * world * stripe_ + r * stripe_;
    const uint64_t take = std::min(count, stripe_);
    out.push_back({first, first + take});
    count -= take;
  }
  if (count > 0) {  // the last, shorter turn: equal blocks of what is left
    const uint64_t first = turns * world * stripe_ + r * tail;
    out.push_back({first, first + std::min(count, tail)});
  }
  return out;
}

void RankSplit::AppendRuns(uint64_t first, uint64_t last, std::vector<PositionRange>& out) const {
  for (uint64_t v = first; v < last;) {
    const uint64_t i = v % count_;  // kPad: past the end, V starts over
    const size_t j = std::upper_bound(starts_.begin(), starts_.end(), i) - starts_.begin() - 1;
    const uint64_t within = i - starts_[j];
    const uint64_t run = std::min(last - v, (remaining_[j].end - remaining_[j].begin) - within);
    out.push_back({remaining_[j].begin + within, remaining_[j].begin + within + run});
    v += run;
  }
}

std::vector<uint64_t> RankSplit::RankPositions(int rank) const {
  std::vector<uint64_t> out;
  if (rank < 0 || rank >= world_size_ || per_rank_ == 0) return out;
  out.reserve(per_rank_);
  std::vector<PositionRange> runs;
  for (const PositionRange& slot : RankSlots(rank, per_rank_)) AppendRuns(slot.begin, slot.end, runs);
  for (const PositionRange& run : runs) {
    for (uint64_t p = run.begin; p < run.end; ++p) out.push_back(p);
  }
  return out;
}

Result<std::vector<PositionRange>> RankSplit::After(uint64_t consumed) const {
  if (consumed > per_rank_) {
    return InvalidArgument("consumed=" + std::to_string(consumed) + " is past this pass's " +
                           std::to_string(per_rank_) + " samples per rank");
  }
  // Positions delivered, as ranges of the global sequence. A repeat (kPad, past V's end) counts as
  // its position delivered: a continued run does not read it a second time.
  std::vector<PositionRange> used;
  for (int rank = 0; rank < world_size_; ++rank) {
    for (const PositionRange& slot : RankSlots(rank, consumed)) AppendRuns(slot.begin, slot.end, used);
  }
  std::sort(used.begin(), used.end(), [](const auto& a, const auto& b) { return a.begin < b.begin; });
  std::vector<PositionRange> out;
  size_t u = 0;
  for (const PositionRange& r : remaining_) {
    uint64_t at = r.begin;
    for (; u < used.size() && used[u].begin < r.end; ++u) {
      if (used[u].begin > at) out.push_back({at, used[u].begin});
      at = std::max(at, used[u].end);
    }
    if (at < r.end) out.push_back({at, r.end});
  }
  return out;
}

}  // namespace s3stream
