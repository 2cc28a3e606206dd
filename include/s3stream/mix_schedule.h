// MixSchedule: the order in which one epoch of a mix of datasets (s3stream.Mix) draws from its
// sources, given how many samples each source contributes to the epoch.
//
// Source s contributes counts[s] draws; its k-th draw (k = 0 .. counts[s]-1) is placed at time
// (k + 1/2) / counts[s] of the epoch, and the epoch lists every draw by time, ties going to the lower
// source. So the sources are spread evenly, never in blocks: any run of consecutive positions holds
// each source in its epoch's proportion to within about one sample (the seat order of the Sainte-Laguë
// divisor method, with the counts as votes). Times are compared exactly, in integers.
//
// The schedule does not depend on the world size or the number of DataLoader workers: they split
// its positions (rank_split.h), and each asks here which draws its positions are.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "s3stream/status.h"

namespace s3stream {

struct MixDraw {
  uint32_t source = 0;
  uint64_t draw = 0;  // which of the source's draws in this epoch: 0 .. counts[source]-1
  bool operator==(const MixDraw&) const = default;
};

class MixSchedule {
 public:
  // The counts come from a user's weights and epoch length (and from a saved state): at most
  // kMaxSources sources, a total of at least 1 and at most kMaxTotal. Zero counts are allowed (a
  // source weighted 0 takes no part).
  static constexpr size_t kMaxSources = 1 << 16;
  static constexpr uint64_t kMaxTotal = uint64_t{1} << 48;
  static Result<MixSchedule> Make(std::vector<uint64_t> counts);

  uint64_t total() const { return total_; }
  const std::vector<uint64_t>& counts() const { return counts_; }

  // The draw at each of `positions` (in any order, repeats allowed; each below total()). Walks the
  // schedule once up to the largest position: O(max position x log sources).
  Result<std::vector<MixDraw>> Locate(std::span<const uint64_t> positions) const;

 private:
  std::vector<uint64_t> counts_;
  uint64_t total_ = 0;
};

}  // namespace s3stream
