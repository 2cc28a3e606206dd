#include "s3stream/shard_reader.h"

#include <algorithm>
#include <unordered_map>

#include "pipeline/sample_stream.h"

namespace s3stream {
namespace {

uint64_t RefKey(uint32_t shard, uint64_t index) { return (uint64_t{shard} << 32) | index; }

FetchOptions WindowOf(const ShardReaderOptions& o) {
  FetchOptions f;
  f.piece_size = o.piece_size;
  f.max_window = o.max_bytes_ahead;
  f.initial_window = std::min<uint64_t>(o.max_bytes_ahead, 2 * o.piece_size);
  return f;
}

}  // namespace

// Consecutive samples of one shard, fetched together.
struct ShardSampleReader::Run {
  uint32_t shard = 0;
  uint64_t first = 0, last = 0;  // sample indices, inclusive
  uint64_t start = 0, end = 0;   // bytes of the (decompressed) archive
};

struct ShardSampleReader::Batch {
  size_t begin = 0, end = 0;  // into positions_
  size_t next = 0;            // next position to deliver
  uint64_t bytes_taken = 0;   // of the fetcher's pieces: released when the batch is delivered
  std::vector<Run> runs;
  bool parsed = false;
  std::unordered_map<uint64_t, Sample> samples;  // by RefKey, once parsed
};

ShardSampleReader::ShardSampleReader(std::shared_ptr<const ShardSet> shards, const EpochPlan& plan, int worker,
                                     int num_workers, uint64_t start, uint64_t skip, ShardReaderOptions options)
    : shards_(std::move(shards)), fetcher_([this] { return NextRange(); }, WindowOf(options)) {
  positions_ = plan.WorkerPositions(worker, num_workers, start);
  positions_.erase(positions_.begin(), positions_.begin() + std::min<uint64_t>(skip, positions_.size()));
  refs_.reserve(positions_.size());
  for (uint64_t p : positions_) refs_.push_back(plan.order()[p]);
  for (const SampleRef& ref : refs_) {
    if (ref.shard >= shards_->size() || ref.index + 1 >= shards_->layout(ref.shard).offsets.size()) {
      failed_ = Internal("the plan names sample " + std::to_string(ref.index) + " of shard " + std::to_string(ref.shard) +
                         ", which the reader's shards do not hold (a plan made for other shards)");
      break;
    }
  }
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

ShardReaderStats ShardSampleReader::stats() const {
  const FetchStats& f = fetcher_.stats();
  return ShardReaderStats{f.window_bytes, f.stalls, f.bytes_requested};
}

ShardSampleReader::Batch& ShardSampleReader::EnsureBatch(size_t number) {
  while (first_batch_ + ahead_.size() <= number) {
    auto batch = std::make_unique<Batch>();
    std::tie(batch->begin, batch->end) = batch_bounds_[first_batch_ + ahead_.size()];
    batch->next = batch->begin;
    // The batch's samples, sorted, coalesced into runs of consecutive indices per shard.
    std::vector<SampleRef> wanted(refs_.begin() + batch->begin, refs_.begin() + batch->end);
    std::sort(wanted.begin(), wanted.end(),
              [](const SampleRef& a, const SampleRef& b) { return RefKey(a.shard, a.index) < RefKey(b.shard, b.index); });
    wanted.erase(std::unique(wanted.begin(), wanted.end()), wanted.end());
    for (const SampleRef& ref : wanted) {
      Run* run = batch->runs.empty() ? nullptr : &batch->runs.back();
      // Compressed shards are read from their start anyway: one run per shard and batch.
      if (run && run->shard == ref.shard && (shards_->gzip(ref.shard) || run->last + 1 == ref.index)) {
        run->last = ref.index;
      } else {
        batch->runs.push_back(Run{ref.shard, ref.index, ref.index});
      }
    }
    for (Run& run : batch->runs) {
      const auto& offsets = shards_->layout(run.shard).offsets;
      run.start = shards_->gzip(run.shard) ? 0 : offsets[run.first];
      run.end = offsets[run.last + 1];
    }
    ahead_.push_back(std::move(batch));
  }
  return *ahead_[number - first_batch_];
}

std::optional<FetchRange> ShardSampleReader::NextRange() {
  if (!failed_.ok() || source_batch_ >= batch_bounds_.size()) return std::nullopt;
  const Batch& batch = EnsureBatch(source_batch_);
  const Run& run = batch.runs[source_run_];
  if (++source_run_ == batch.runs.size()) {
    ++source_batch_;
    source_run_ = 0;
  }
  const ShardLocation& shard = shards_->location(run.shard);
  FetchRange range;
  range.store = shard.store;
  range.key = shard.key;
  range.start = run.start;
  range.etag = shard.etag;
  // Offsets of a compressed shard count decompressed bytes: it is read from its start to its end.
  if (!shards_->gzip(run.shard)) range.end = run.end;
  return range;
}

Status ShardSampleReader::Parse(Batch& batch) {
  for (Run& run : batch.runs) {
    const ShardLocation& shard = shards_->location(run.shard);
    const auto& off = shards_->layout(run.shard).offsets;
    internal::SampleStream stream(shard.url, shards_->gzip(run.shard), run.start);
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
    for (bool last = false; !last;) {
      Result<std::optional<FetchedPiece>> next = fetcher_.Next();
      if (!next.ok() && next.status().code() == StatusCode::kPreconditionFailed) {
        // Pinned to the ETag the index recorded: the shard was replaced after it was indexed.
        return Status(StatusCode::kPreconditionFailed, next.status().message() + "; " + shard.url +
                                                           " is not the shard that was indexed: rebuild its index "
                                                           "(s3stream index " + shard.url + ")");
      }
      S3S_ASSIGN_OR_RETURN(std::optional<FetchedPiece> piece, std::move(next));
      if (!piece || piece->range != runs_parsed_) {
        return Internal("the range engine delivered " + (piece ? "range " + std::to_string(piece->range) : "nothing") +
                        " where " + shard.url + " bytes " + std::to_string(run.start) + "- were due");
      }
      batch.bytes_taken += piece->data.size();
      last = piece->last_of_range;
      if (Status s = stream.Feed(piece->data, on_sample); !s.ok()) return explain(s);
    }
    ++runs_parsed_;
    if (Status s = stream.Finish(on_sample); !s.ok()) return explain(s);
  }
  for (size_t i = batch.begin; i < batch.end; ++i) {
    if (!batch.samples.count(RefKey(refs_[i].shard, refs_[i].index))) {
      const ShardLocation& shard = shards_->location(refs_[i].shard);
      return Corrupt(shard.url + " changed since it was indexed: sample " + std::to_string(refs_[i].index) +
                     " (offset " + std::to_string(shards_->layout(refs_[i].shard).offsets[refs_[i].index]) +
                     ") is missing; rebuild the index (s3stream index " + shard.url + ")");
    }
  }
  batch.parsed = true;
  return Status::Ok();
}

Result<std::optional<PlannedSample>> ShardSampleReader::Next() {
  if (!failed_.ok()) return failed_;
  while (first_batch_ < batch_bounds_.size()) {
    Batch& batch = EnsureBatch(first_batch_);
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
    fetcher_.Release(batch.bytes_taken);  // delivered: its bytes no longer count against read-ahead
    ahead_.pop_front();
    ++first_batch_;
  }
  return std::optional<PlannedSample>();
}

}  // namespace s3stream
