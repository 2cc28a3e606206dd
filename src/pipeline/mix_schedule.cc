#include "s3stream/mix_schedule.h"

#include <algorithm>
#include <numeric>
#include <queue>
#include <string>

namespace s3stream {
namespace {

// The next draw of one source: its k-th, at time (2k + 1) / (2 * count).
struct Next {
  uint32_t source;
  uint64_t draw;
  uint64_t count;
};

// Whether a's time is later than b's (the heap's order: the earliest on top; ties to the lower
// source). (2a.draw + 1) / a.count vs (2b.draw + 1) / b.count, cross-multiplied: both factors are
// below 2^49, so the products fit 128 bits exactly.
bool Later(const Next& a, const Next& b) {
  const unsigned __int128 ta = static_cast<unsigned __int128>(2 * a.draw + 1) * b.count;
  const unsigned __int128 tb = static_cast<unsigned __int128>(2 * b.draw + 1) * a.count;
  return ta != tb ? ta > tb : a.source > b.source;
}

}  // namespace

Result<MixSchedule> MixSchedule::Make(std::vector<uint64_t> counts) {
  if (counts.empty() || counts.size() > kMaxSources) {
    return InvalidArgument("a mix needs 1 to " + std::to_string(kMaxSources) + " sources, got " +
                           std::to_string(counts.size()));
  }
  MixSchedule schedule;
  for (uint64_t c : counts) {
    if (c > kMaxTotal - schedule.total_) {
      return InvalidArgument("a mix epoch may hold at most 2^48 samples");
    }
    schedule.total_ += c;
  }
  if (schedule.total_ == 0) return InvalidArgument("a mix epoch needs at least one sample: every count is 0");
  schedule.counts_ = std::move(counts);
  return schedule;
}

Result<std::vector<MixDraw>> MixSchedule::Locate(std::span<const uint64_t> positions) const {
  std::vector<MixDraw> out(positions.size());
  if (positions.empty()) return out;
  std::vector<size_t> by_position(positions.size());
  std::iota(by_position.begin(), by_position.end(), size_t{0});
  std::sort(by_position.begin(), by_position.end(),
            [&](size_t a, size_t b) { return positions[a] < positions[b]; });
  const uint64_t last = positions[by_position.back()];
  if (last >= total_) {
    return InvalidArgument("mix position " + std::to_string(last) + " is past the epoch's " +
                           std::to_string(total_) + " samples");
  }
  std::priority_queue<Next, std::vector<Next>, decltype(&Later)> heap(&Later);
  for (size_t s = 0; s < counts_.size(); ++s) {
    if (counts_[s] > 0) heap.push({static_cast<uint32_t>(s), 0, counts_[s]});
  }
  size_t i = 0;  // into by_position
  for (uint64_t position = 0; position <= last; ++position) {
    const Next next = heap.top();  // never empty: total_ > last draws remain
    heap.pop();
    for (; i < by_position.size() && positions[by_position[i]] == position; ++i) {
      out[by_position[i]] = {next.source, next.draw};
    }
    if (next.draw + 1 < next.count) heap.push({next.source, next.draw + 1, next.count});
  }
  return out;
}

}  // namespace s3stream
