#include "s3stream/shard_reader.h"

#include <algorithm>
#include <unordered_map>

#include "pipeline/sample_stream.h"

namespace s3stream {
namespace {

uint64_t RefKey(uint32_t shard, uint64_t index) { return (uint64_t{shard} << 32) | index; }

}  // namespace

// Consecutive samples of one shard, fetched together.
struct ShardSampleReader::Run {
  uint32_t shard = 0;
  uint64_t first = 0, last = 0;  // sample indices, inclusive
  uint64_t start = 0, end = 0;   // bytes of the (decompressed) archive
  std::vector<Future<Result<Buffer>>> pieces;
};

struct ShardSampleReader::Batch {
  size_t begin = 0, end = 0;  // into positions_
  size_t next = 0;            // next position to deliver
  uint64_t bytes = 0;
  std::vector<Run> runs;
  bool parsed = false;
  std::unordered_map<uint64_t, Sample> samples;  // by RefKey, once parsed
};

ShardSampleReader::ShardSampleReader(std::vector<ShardSource> shards, const EpochPlan& plan, int worker,
                                     int num_workers, uint64_t start, ShardReaderOptions options)
    : shards_(std::move(shards)), options_(options) {
  stats_.window_bytes = std::min<uint64_t>(options_.max_bytes_ahead, 2 * options_.piece_size);
  positions_ = plan.WorkerPositions(worker, num_workers, start);
  refs_.reserve(positions_.size());
  for (uint64_t p : positions_) refs_.push_back(plan.order()[p]);
  // WorkerPositions lists whole batches back to back: a batch ends at a gap or after batch_size.
  const size_t batch_size = plan.batch_size();
  for (size_t i = 0; i < positions_.size();) {
    size_t j = i + 1;
    while (j < positions_.size() && j - i < batch_size && positions_[j] == positions_[j - 1] + 1) ++j;
    batch_bounds_.emplace_back(i, j);
    i = j;
  }
}

ShardSampleReader::~ShardSampleReader() = default;

Status ShardSampleReader::Fill() {
  while (next_batch_ < batch_bounds_.size()) {
    auto batch = std::make_unique<Batch>();
    std::tie(batch->begin, batch->end) = batch_bounds_[next_batch_];
    batch->next = batch->begin;

    // The batch's samples, sorted, coalesced into runs of consecutive indices per shard.
    std::vector<SampleRef> wanted(refs_.begin() + batch->begin, refs_.begin() + batch->end);
    std::sort(wanted.begin(), wanted.end(),
              [](const SampleRef& a, const SampleRef& b) { return RefKey(a.shard, a.index) < RefKey(b.shard, b.index); });
    wanted.erase(std::unique(wanted.begin(), wanted.end()), wanted.end());
    for (const SampleRef& ref : wanted) {
      const ShardSource& shard = shards_[ref.shard];
      if (ref.index + 1 >= shard.offsets.size()) {
        return Internal("the plan names sample " + std::to_string(ref.index) + " of " + shard.url + ", which has " +
                        std::to_string(shard.offsets.size() - 1));
      }
      Run* run = batch->runs.empty() ? nullptr : &batch->runs.back();
      // Compressed shards are read from their start anyway: one run per shard and batch.
      if (run && run->shard == ref.shard && (shard.gzip || run->last + 1 == ref.index)) {
        run->last = ref.index;
      } else {
        batch->runs.push_back(Run{ref.shard, ref.index, ref.index});
      }
    }
    for (Run& run : batch->runs) {
      const ShardSource& shard = shards_[run.shard];
      run.start = shard.gzip ? 0 : shard.offsets[run.first];
      run.end = shard.offsets[run.last + 1];
      batch->bytes += run.end - run.start;
    }
    if (!ahead_.empty() && bytes_ahead_ + batch->bytes > stats_.window_bytes) break;
    Request(*batch);
    bytes_ahead_ += batch->bytes;
    stats_.bytes_fetched += batch->bytes;
    ahead_.push_back(std::move(batch));
    ++next_batch_;
  }
  return Status::Ok();
}

void ShardSampleReader::Request(Batch& batch) {
  for (Run& run : batch.runs) {
    const ShardSource& shard = shards_[run.shard];
    GetOptions get;
    get.if_match = shard.etag;
    if (shard.gzip) {
      run.pieces.push_back(GetBuffer(*shard.store, shard.key, get));
      continue;
    }
    for (uint64_t at = run.start; at < run.end; at += options_.piece_size) {
      get.range = ByteRange{at, std::min<uint64_t>(run.end, at + options_.piece_size)};
      run.pieces.push_back(GetBuffer(*shard.store, shard.key, get));
    }
  }
}

Status ShardSampleReader::Parse(Batch& batch) {
  // The consumer caught up with the network: the window does not cover the time to first byte at
  // this rate; double it. The very first batch counts too: it always waits, and waiting for the
  // second one as well costs a whole request's latency before the pipeline is full.
  bool waiting = false;
  for (Run& run : batch.runs) {
    for (auto& piece : run.pieces) waiting |= !piece.ready();
  }
  if (waiting) {
    ++stats_.stalls;
    stats_.window_bytes = std::min<uint64_t>(options_.max_bytes_ahead, stats_.window_bytes * 2);
  }
  ++delivered_batches_;
  for (Run& run : batch.runs) {
    const ShardSource& shard = shards_[run.shard];
    internal::SampleStream stream(shard.url, shard.gzip, run.start);
    const auto& off = shard.offsets;
    auto on_sample = [&](Sample&& sample) -> Status {
      auto it = std::lower_bound(off.begin(), off.end() - 1, sample.offset);
      if (it == off.end() - 1 || *it != sample.offset) {
        return Corrupt(shard.url + " changed since it was indexed: a sample starts at offset " +
                       std::to_string(sample.offset) + ", which the index does not list; rebuild the index "
                       "(s3stream index " + shard.url + ")");
      }
      const uint64_t index = it - off.begin();
      if (index >= run.first && index <= run.last) batch.samples.emplace(RefKey(run.shard, index), std::move(sample));
      return Status::Ok();
    };
    // A parse error inside a range the index vouched for usually means a stale index.
    auto explain = [&](Status s) {
      if (s.code() != StatusCode::kCorrupt || s.message().find("rebuild the index") != std::string::npos) return s;
      return Corrupt(s.message() + " (reading samples " + std::to_string(run.first) + "-" + std::to_string(run.last) +
                     " from offset " + std::to_string(run.start) + "; if the shard changed after it was indexed, "
                     "rebuild the index: s3stream index " + shard.url + ")");
    };
    for (auto& piece : run.pieces) {
      Result<Buffer> bytes = piece.Take();
      if (!bytes.ok()) return bytes.status();
      if (Status s = stream.Feed(*bytes, on_sample); !s.ok()) return explain(s);
    }
    run.pieces.clear();
    if (Status s = stream.Finish(on_sample); !s.ok()) return explain(s);
  }
  for (size_t i = batch.begin; i < batch.end; ++i) {
    if (!batch.samples.count(RefKey(refs_[i].shard, refs_[i].index))) {
      const ShardSource& shard = shards_[refs_[i].shard];
      return Corrupt(shard.url + " changed since it was indexed: sample " + std::to_string(refs_[i].index) +
                     " (offset " + std::to_string(shard.offsets[refs_[i].index]) + ") is missing; rebuild the index "
                     "(s3stream index " + shard.url + ")");
    }
  }
  batch.parsed = true;
  return Status::Ok();
}

Result<std::optional<PlannedSample>> ShardSampleReader::Next() {
  if (!failed_.ok()) return failed_;
  for (;;) {
    if (Status s = Fill(); !s.ok()) return failed_ = s;
    if (ahead_.empty()) return std::optional<PlannedSample>();
    Batch& batch = *ahead_.front();
    if (!batch.parsed) {
      if (Status s = Parse(batch); !s.ok()) return failed_ = s;
    }
    if (batch.next < batch.end) {
      const size_t i = batch.next++;
      PlannedSample out;
      out.position = positions_[i];
      out.shard = refs_[i].shard;
      out.sample = batch.samples.at(RefKey(refs_[i].shard, refs_[i].index));
      return std::optional<PlannedSample>(std::move(out));
    }
    bytes_ahead_ -= batch.bytes;
    ahead_.pop_front();
  }
}

}  // namespace s3stream
