#include "s3stream/epoch_plan.h"

#include <algorithm>
#include <deque>
#include <numeric>

#include "pipeline/prng.h"

namespace s3stream {
namespace {

using internal::Prng;

// Stage tags keep the generators of different stages independent.
// (3 was a within-batch shuffle, dropped: a batch is a set, its order taught nothing.)
enum Stage : uint64_t { kShardOrder = 1, kChunkBuffer = 2, kMapOrder = 4 };

// A run of consecutive samples of one shard.
struct Segment {
  uint32_t shard;
  uint64_t first;
  uint64_t count;
};

Status ValidateOptions(const PlanOptions& o) {
  if (o.world_size < 1) return InvalidArgument("world_size must be >= 1, got " + std::to_string(o.world_size));
  if (o.rank < 0 || o.rank >= o.world_size) {
    return InvalidArgument("rank " + std::to_string(o.rank) + " is outside world_size " + std::to_string(o.world_size));
  }
  if (o.batch_size < 1) return InvalidArgument("batch_size must be >= 1, got " + std::to_string(o.batch_size));
  if (o.interleave < 1) return InvalidArgument("interleave must be >= 1, got " + std::to_string(o.interleave));
  if (o.shuffle_chunks < 1) return InvalidArgument("shuffle_chunks must be >= 1");
  return Status::Ok();
}

// Splits segments into chunks of consecutive samples of about chunk_bytes (at least one sample).
std::deque<Segment> Chunks(const std::vector<ShardLayout>& shards, const Segment& s, uint64_t chunk_bytes) {
  std::deque<Segment> out;
  const auto& off = shards[s.shard].offsets;
  uint64_t i = s.first;
  const uint64_t end = s.first + s.count;
  while (i < end) {
    uint64_t j = i + 1;
    while (j < end && (!shards[s.shard].splittable || off[j + 1] - off[i] <= chunk_bytes)) ++j;
    out.push_back({s.shard, i, j - i});
    i = j;
  }
  return out;
}

// Round-robin over `interleave` open segments, one chunk at a time.
std::vector<Segment> Interleave(const std::vector<ShardLayout>& shards, const std::vector<Segment>& segments,
                                const PlanOptions& o) {
  std::vector<Segment> out;
  std::vector<std::deque<Segment>> open;
  size_t next = 0;
  while (open.size() < static_cast<size_t>(o.interleave) && next < segments.size())
    open.push_back(Chunks(shards, segments[next++], o.chunk_bytes));
  size_t turn = 0;
  while (!open.empty()) {
    turn %= open.size();
    out.push_back(open[turn].front());
    open[turn].pop_front();
    if (open[turn].empty()) {
      if (next < segments.size()) {
        open[turn] = Chunks(shards, segments[next++], o.chunk_bytes);
      } else {
        open.erase(open.begin() + turn);
        continue;  // the next segment slid into this slot
      }
    }
    ++turn;
  }
  return out;
}

// A shuffle buffer of `capacity` chunks, as a streaming loader would run it, but over indices.
std::vector<Segment> ShuffleBuffer(std::vector<Segment> chunks, size_t capacity, Prng rng) {
  std::vector<Segment> out;
  out.reserve(chunks.size());
  std::vector<Segment> buffer;
  for (const Segment& c : chunks) {
    if (buffer.size() < capacity) {
      buffer.push_back(c);
      continue;
    }
    size_t j = rng.Below(buffer.size());
    out.push_back(buffer[j]);
    buffer[j] = c;
  }
  rng.Shuffle(buffer.begin(), buffer.end());
  out.insert(out.end(), buffer.begin(), buffer.end());
  return out;
}

}  // namespace

std::vector<uint64_t> EpochPermutation(uint64_t n, uint64_t seed, uint64_t epoch) {
  std::vector<uint64_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  Prng::For({seed, epoch, kMapOrder}).Shuffle(order.begin(), order.end());
  return order;
}


uint64_t DefaultStripe(const std::vector<ShardLayout>& shards, uint64_t chunk_bytes) {
  uint64_t samples = 0, bytes = 0;
  for (const ShardLayout& s : shards) {
    if (s.samples() == 0) continue;
    samples += s.samples();
    bytes += s.offsets.back() - s.offsets.front();
  }
  if (samples == 0 || bytes == 0) return 1;
  // samples * chunk_bytes / bytes, in floating point: the product can pass 2^64.
  const double stripe = static_cast<double>(samples) * static_cast<double>(chunk_bytes) / static_cast<double>(bytes);
  return stripe < 1 ? 1 : stripe > static_cast<double>(samples) ? samples : static_cast<uint64_t>(stripe + 0.5);
}

Result<EpochPlan> EpochPlan::Make(const std::vector<ShardLayout>& shards, const PlanOptions& o) {
  uint64_t total = 0;
  for (const ShardLayout& s : shards) total += s.samples();
  return Make(shards, o, total == 0 ? std::vector<PositionRange>{} : std::vector<PositionRange>{{0, total}});
}

Result<EpochPlan> EpochPlan::Make(const std::vector<ShardLayout>& shards, const PlanOptions& o,
                                  std::vector<PositionRange> remaining) {
  S3S_RETURN_IF_ERROR(ValidateOptions(o));
  uint64_t total = 0;
  for (size_t i = 0; i < shards.size(); ++i) {
    const auto& off = shards[i].offsets;
    if (!std::is_sorted(off.begin(), off.end())) {
      return InvalidArgument("shard " + std::to_string(i) + " has a malformed layout (offsets must ascend)");
    }
    total += shards[i].samples();
  }
  if (total == 0) return InvalidArgument("the dataset is empty: its shards contain no samples");
  if (!remaining.empty() && remaining.back().end > total) {
    return InvalidArgument("the remaining positions reach " + std::to_string(remaining.back().end) +
                           ", past the epoch's " + std::to_string(total) + " samples (a state from other data?)");
  }
  const bool whole = remaining.size() == 1 && remaining[0] == PositionRange{0, total};
  const uint64_t stripe = o.stripe != 0 ? o.stripe : DefaultStripe(shards, o.chunk_bytes);
  S3S_ASSIGN_OR_RETURN(RankSplit split, RankSplit::Make(std::move(remaining), o.world_size, stripe, o.remainder));
  if (whole && split.per_rank() == 0) {
    return InvalidArgument("the dataset has " + std::to_string(total) + " samples, fewer than the " +
                           std::to_string(o.world_size) + " ranks: with drop every rank would get none; use pad");
  }

  // The epoch's global sequence, the same whatever the world size: shards in epoch order, read
  // `interleave` at a time in chunks, reordered by a shuffle buffer of chunks.
  std::vector<uint32_t> shard_order(shards.size());
  std::iota(shard_order.begin(), shard_order.end(), 0);
  if (o.shuffle) Prng::For({o.seed, o.epoch, kShardOrder}).Shuffle(shard_order.begin(), shard_order.end());
  std::vector<Segment> segments;
  for (uint32_t s : shard_order) {
    if (shards[s].samples() > 0) segments.push_back({s, 0, shards[s].samples()});
  }
  PlanOptions mix = o;
  if (!o.shuffle) mix.interleave = 1;  // without shuffling: shards in order, samples in order
  std::vector<Segment> chunks = Interleave(shards, segments, mix);
  if (o.shuffle) chunks = ShuffleBuffer(std::move(chunks), o.shuffle_chunks, Prng::For({o.seed, o.epoch, kChunkBuffer}));
  std::vector<uint64_t> chunk_starts(chunks.size());
  uint64_t acc = 0;
  for (size_t i = 0; i < chunks.size(); ++i) {
    chunk_starts[i] = acc;
    acc += chunks[i].count;
  }

  EpochPlan plan;
  plan.total_samples_ = total;
  plan.batch_size_ = o.batch_size;
  plan.positions_ = split.RankPositions(o.rank);
  plan.order_.reserve(plan.positions_.size());
  for (uint64_t p : plan.positions_) {
    const size_t c = std::upper_bound(chunk_starts.begin(), chunk_starts.end(), p) - chunk_starts.begin() - 1;
    plan.order_.push_back({chunks[c].shard, static_cast<uint32_t>(chunks[c].first + (p - chunk_starts[c]))});
  }
  plan.split_ = std::move(split);
  return plan;
}

std::vector<uint64_t> EpochPlan::WorkerPositions(int worker, int num_workers, uint64_t start) const {
  std::vector<uint64_t> out;
  const uint64_t n = order_.size();
  const uint64_t b = batch_size_;
  for (uint64_t batch = worker; start + batch * b < n; batch += num_workers) {
    for (uint64_t p = start + batch * b; p < std::min(n, start + (batch + 1) * b); ++p) out.push_back(p);
  }
  return out;
}

}  // namespace s3stream
