#include "s3stream/epoch_plan.h"

#include <algorithm>
#include <deque>
#include <numeric>

#include "pipeline/prng.h"

namespace s3stream {
namespace {

using internal::Prng;

// Stage tags keep the generators of different stages independent.
enum Stage : uint64_t { kShardOrder = 1, kChunkBuffer = 2, kBatchShuffle = 3, kMapOrder = 4 };

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

// The rank's share of the epoch's sample sequence (shards in epoch order, samples in shard order),
// as segments. Positions past the end wrap around to the start (padding).
std::vector<Segment> RankSegments(const std::vector<ShardLayout>& shards, const std::vector<uint32_t>& shard_order,
                                  uint64_t total, uint64_t begin, uint64_t count) {
  std::vector<Segment> out;
  // Cumulative start of each shard in epoch order.
  std::vector<uint64_t> starts(shard_order.size());
  uint64_t acc = 0;
  for (size_t i = 0; i < shard_order.size(); ++i) {
    starts[i] = acc;
    acc += shards[shard_order[i]].samples();
  }
  uint64_t pos = begin % total;
  while (count > 0) {
    size_t i = std::upper_bound(starts.begin(), starts.end(), pos) - starts.begin() - 1;
    while (shards[shard_order[i]].samples() == 0) ++i;  // skip empty shards sharing a start
    const uint64_t within = pos - starts[i];
    const uint64_t take = std::min(count, shards[shard_order[i]].samples() - within);
    out.push_back({shard_order[i], within, take});
    count -= take;
    pos = (pos + take) % total;
  }
  return out;
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

uint64_t SamplesPerRank(uint64_t total, int world_size, Remainder remainder) {
  const auto world = static_cast<uint64_t>(std::max(1, world_size));
  return remainder == Remainder::kDrop ? total / world : total / world + (total % world != 0);
}

Result<EpochPlan> EpochPlan::Make(const std::vector<ShardLayout>& shards, const PlanOptions& o) {
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
  const auto world = static_cast<uint64_t>(o.world_size);
  const uint64_t per_rank = SamplesPerRank(total, o.world_size, o.remainder);
  if (per_rank == 0) {
    return InvalidArgument("the dataset has " + std::to_string(total) + " samples, fewer than the " +
                           std::to_string(world) + " ranks: with drop every rank would get none; use pad");
  }

  std::vector<uint32_t> shard_order(shards.size());
  std::iota(shard_order.begin(), shard_order.end(), 0);
  if (o.shuffle) Prng::For({o.seed, o.epoch, kShardOrder}).Shuffle(shard_order.begin(), shard_order.end());

  std::vector<Segment> segments = RankSegments(shards, shard_order, total, o.rank * per_rank, per_rank);
  // Without shuffling the order is simply the epoch's sequence: no interleaving either.
  PlanOptions mix = o;
  if (!o.shuffle) mix.interleave = 1;
  std::vector<Segment> chunks = Interleave(shards, segments, mix);
  if (o.shuffle) {
    chunks = ShuffleBuffer(std::move(chunks), o.shuffle_chunks, Prng::For({o.seed, o.epoch, (uint64_t)o.rank, kChunkBuffer}));
  }

  EpochPlan plan;
  plan.total_samples_ = total;
  plan.batch_size_ = o.batch_size;
  plan.order_.reserve(per_rank);
  for (const Segment& c : chunks) {
    for (uint64_t i = 0; i < c.count; ++i) plan.order_.push_back({c.shard, static_cast<uint32_t>(c.first + i)});
  }
  if (o.shuffle && o.batch_size > 1) {
    Prng rng = Prng::For({o.seed, o.epoch, (uint64_t)o.rank, kBatchShuffle});
    for (size_t b = 0; b < plan.order_.size(); b += o.batch_size) {
      auto first = plan.order_.begin() + b;
      rng.Shuffle(first, first + std::min<size_t>(o.batch_size, plan.order_.size() - b));
    }
  }
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
