#include "s3stream/range_fetcher.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <utility>
#include <vector>

#include "store/buffer_sink.h"

namespace s3stream {
namespace {

using internal::BufferSink;

// "12.3 GB" (decimal units), beside the exact count where it matters.
std::string BytesText(uint64_t n) {
  char text[64];
  if (n < 1000000) {
    std::snprintf(text, sizeof text, "%llu bytes", static_cast<unsigned long long>(n));
  } else {
    std::snprintf(text, sizeof text, "%.1f %s (%llu bytes)", n >= 1e9 ? n / 1e9 : n / 1e6, n >= 1e9 ? "GB" : "MB",
                  static_cast<unsigned long long>(n));
  }
  return text;
}

// "[start, end)", as the drivers write ranges in their messages.
std::string RangeText(uint64_t start, std::optional<uint64_t> end) {
  return "[" + std::to_string(start) + ", " + (end ? std::to_string(*end) : std::string("end")) + ")";
}

// Where a range ends, now that the first response told the object's size: its end, cut to the
// size when clamping, or kOutOfRange naming the object and its size.
Result<uint64_t> EndOf(const FetchRange& range, const std::string& object, const GetStart& start) {
  uint64_t end = range.end.value_or(start.object_size);
  if (range.end && end > start.object_size && range.clamp_end) end = std::max(range.start, start.object_size);
  if (end > start.object_size || range.start > end) {
    return OutOfRange("byte range " + RangeText(range.start, range.end) + " is outside " + object + " (" +
                      std::to_string(start.object_size) + " bytes)");
  }
  return end;
}

// What the pieces of one range share: the range's end and ETag pin, final once known. A range
// with a fixed end is known from the start (pinned to the caller's ETag, if any); an open one (no
// end, or one to clamp) learns both from its first piece's response, on the store's thread.
class RangePlan {
 public:
  explicit RangePlan(FetchRange range) : range_(std::move(range)), object_(range_.store->Describe(range_.key)) {
    if (range_.end && !range_.clamp_end) {
      known_ = true;
      end_ = *range_.end;
      etag_ = range_.etag;
    }
  }

  const FetchRange& range() const { return range_; }
  const std::string& object() const { return object_; }

  // The end and the pin, when known (then final).
  bool Known(uint64_t* end, std::string* etag) const {
    std::lock_guard<std::mutex> lock(mu_);
    if (!known_) return false;
    *end = end_;
    *etag = etag_;
    return true;
  }

  // The first piece's response: fixes the end (checked against the object's size) and the pin.
  Status Learn(const GetStart& start) {
    std::lock_guard<std::mutex> lock(mu_);
    if (known_) return Status::Ok();
    S3S_ASSIGN_OR_RETURN(end_, EndOf(range_, object_, start));
    etag_ = range_.etag.empty() ? start.etag : range_.etag;
    known_ = true;
    return Status::Ok();
  }

 private:
  const FetchRange range_;
  const std::string object_;
  mutable std::mutex mu_;
  bool known_ = false;
  uint64_t end_ = 0;
  std::string etag_;
};

// A planned piece's response must announce exactly the bytes asked for.
Status CheckPlanned(const std::string& object, uint64_t offset, uint64_t planned, const GetStart& start) {
  if (start.content_length == planned) return Status::Ok();
  return Internal(object + ": asked for " + std::to_string(planned) + " bytes at offset " + std::to_string(offset) +
                  ", the store announced " + std::to_string(start.content_length));
}

// FetchWhole's state: one Buffer, written by every piece into its own slice, so the bytes need no
// lock. Pieces are not cancelled when one fails: the result waits for all of them.
class WholeFetch : public std::enable_shared_from_this<WholeFetch> {
 public:
  WholeFetch(FetchRange range, uint64_t piece_size, uint64_t max_bytes)
      : range_(std::move(range)),
        object_(range_.store->Describe(range_.key)),
        piece_size_(piece_size),
        max_bytes_(max_bytes) {}

  Future<Result<Buffer>> Start() {
    const FetchRange& r = range_;
    GetOptions first;
    first.if_match = r.etag;
    first.clamp_end = r.clamp_end;
    if (r.start > 0 || r.end) first.range = ByteRange{r.start, r.end};
    if (piece_size_ > 0 && (!r.end || *r.end > r.start + piece_size_)) {
      // The size is not known yet: ask for "up to" one piece; its response tells the rest.
      first.range = ByteRange{r.start, r.start + piece_size_};
      first.clamp_end = true;
    }
    pending_ = 1;
    auto self = shared_from_this();
    Issue(first, [self](const GetStart& start) { return self->OnFirstStart(start); });
    return promise_.future();
  }

 private:
  void Issue(const GetOptions& options, BufferSink::Prepare prepare) {
    auto sink = std::make_shared<BufferSink>(object_, std::move(prepare), range_.cancel);
    auto self = shared_from_this();
    range_.store->Get(range_.key, options, sink).Then([self, sink](const Status& status) {
      self->PieceDone(status.ok() ? sink->Finish().status() : status);
    });
  }

  // The first response: the size is known; allocate the whole Buffer and request the rest, pinned to
  // the caller's ETag or this response's.
  Result<Buffer> OnFirstStart(const GetStart& start) {
    S3S_ASSIGN_OR_RETURN(const uint64_t end, EndOf(range_, object_, start));
    const std::string etag = range_.etag.empty() ? start.etag : range_.etag;
    const uint64_t from = range_.start;
    const uint64_t total = end - from;
    if (start.content_length > total) {
      return Internal(object_ + ": the store announced " + std::to_string(start.content_length) +
                      " bytes for a range of " + std::to_string(total));
    }
    if (total > max_bytes_) {
      return TooLarge(object_ + (from > 0 || range_.end ? " (the range asked for)" : "") + " is " + BytesText(total) +
                      ", more than one get may hold in memory (max_get_bytes: " + BytesText(max_bytes_) +
                      "); stream it with s3stream.open(uri, 'rb'), or get it by ranges");
    }
    std::vector<std::pair<GetOptions, uint64_t>> rest;  // options, offset in the Buffer
    {
      std::lock_guard<std::mutex> lock(mu_);
      whole_ = Buffer::TryAllocate(total);
      if (!whole_.valid()) {
        return TooLarge("not enough memory for the " + BytesText(total) + " of " + object_ +
                        "; stream it with s3stream.open(uri, 'rb'), or get it by ranges");
      }
      whole_.resize(total);
      for (uint64_t at = start.content_length; piece_size_ > 0 && at < total; at += piece_size_) {
        GetOptions part;
        part.range = ByteRange{from + at, from + std::min(total, at + piece_size_)};
        part.if_match = etag;
        rest.emplace_back(std::move(part), at);
      }
      pending_ += rest.size();
    }
    for (auto& [options, at] : rest) {
      const uint64_t planned = *options.range->end - options.range->start;
      auto self = shared_from_this();
      Issue(options, [self, at = at, planned](const GetStart& s) -> Result<Buffer> {
        S3S_RETURN_IF_ERROR(CheckPlanned(self->object_, self->range_.start + at, planned, s));
        return self->Slice(at);
      });
    }
    return Slice(0);
  }

  // An empty view at `at` whose room runs to the end of the whole Buffer: a piece appends its bytes
  // there (BufferSink stops it at the count it announced).
  Buffer Slice(uint64_t at) {
    std::lock_guard<std::mutex> lock(mu_);
    return whole_.Slice(at, 0);
  }

  void PieceDone(const Status& status) {
    std::unique_lock<std::mutex> lock(mu_);
    if (!status.ok() && error_.ok()) error_ = status;
    if (--pending_ > 0) return;
    lock.unlock();
    if (!error_.ok()) return promise_.Set(error_);
    if (!whole_.valid()) whole_ = Buffer::Allocate(0);  // a driver that never called OnStart
    promise_.Set(std::move(whole_));
  }

  const FetchRange range_;
  const std::string object_;
  const uint64_t piece_size_;
  const uint64_t max_bytes_;
  Promise<Result<Buffer>> promise_;
  std::mutex mu_;
  Buffer whole_;
  size_t pending_ = 0;
  Status error_;
};

}  // namespace

Future<Result<Buffer>> FetchWhole(FetchRange range, uint64_t piece_size, uint64_t max_bytes) {
  if (!range.store) return Future<Result<Buffer>>::Ready(InvalidArgument("FetchWhole needs a store"));
  return std::make_shared<WholeFetch>(std::move(range), piece_size, max_bytes)->Start();
}

// ---- RangeFetcher

// Completion of the pieces, shared with their callbacks on the store's threads (outlives the fetcher).
struct RangeFetcher::Shared {
  std::mutex mu;
  std::condition_variable cv;
};

struct RangeFetcher::Piece {
  struct Result {  // set under Shared::mu when the GET completed
    bool done = false;
    Status status;
    Buffer data;
  };
  uint64_t offset = 0;
  uint64_t charge = 0;  // bytes counted against the window for it
  std::shared_ptr<Result> result;
  std::shared_ptr<std::atomic<bool>> cancelled;
};

struct RangeFetcher::Cursor {
  uint64_t index = 0;
  std::shared_ptr<RangePlan> plan;
  uint64_t next = 0;         // the next byte to request
  bool first_issued = false;
  bool known = false;        // end and etag below are final
  uint64_t end = 0;
  std::string etag;
  std::deque<Piece> pieces;  // requested, not yet delivered

  bool Refresh() {
    if (!known) known = plan->Known(&end, &etag);
    return known;
  }
  bool FullyIssued() { return Refresh() && next >= end && (first_issued || end == next); }
};

RangeFetcher::RangeFetcher(Source source, FetchOptions options)
    : source_(std::move(source)), options_(std::move(options)), shared_(std::make_shared<Shared>()) {
  stats_.window_bytes = std::min(options_.initial_window, options_.max_window);
}

RangeFetcher::~RangeFetcher() {
  for (Cursor& c : cursors_) DropPieces(c, c.pieces.size());
}

void RangeFetcher::DropPieces(Cursor& cursor, size_t count) {
  for (size_t i = 0; i < count && !cursor.pieces.empty(); ++i) {
    Piece& p = cursor.pieces.front();
    p.cancelled->store(true);  // a no-op for a piece already complete
    outstanding_ -= std::min(outstanding_, p.charge);
    cursor.pieces.pop_front();
  }
}

bool RangeFetcher::Issue(Cursor& c, bool force) {
  const FetchRange& r = c.plan->range();
  const bool learning = !c.Refresh();  // the first piece of a range whose end or pin is not known
  const uint64_t planned = learning ? options_.piece_size : std::min<uint64_t>(options_.piece_size, c.end - c.next);
  Buffer memory;
  if (options_.pool) {
    memory = force ? options_.pool->Acquire(planned) : options_.pool->TryAcquire(planned);
    if (!memory.valid()) return false;
  }
  GetOptions get;
  if (learning) {
    get.range = ByteRange{c.next, r.end ? std::min(*r.end, c.next + planned) : c.next + planned};
    get.clamp_end = r.clamp_end || !r.end || *r.end > c.next + planned;
    get.if_match = r.etag;
  } else {
    get.range = ByteRange{c.next, c.next + planned};
    get.if_match = c.etag;
  }
  Piece piece;
  piece.offset = c.next;
  piece.charge = planned;
  piece.result = std::make_shared<Piece::Result>();
  piece.cancelled = std::make_shared<std::atomic<bool>>(false);
  auto plan = c.plan;
  const uint64_t offset = c.next;
  BufferSink::Prepare prepare = [plan, learning, planned, offset, memory](const GetStart& start) -> Result<Buffer> {
    if (learning) {
      S3S_RETURN_IF_ERROR(plan->Learn(start));
    } else {
      S3S_RETURN_IF_ERROR(CheckPlanned(plan->object(), offset, planned, start));
    }
    if (memory.valid()) return memory;
    Buffer fresh = Buffer::TryAllocate(start.content_length);  // at most one piece
    if (!fresh.valid()) return TooLarge("not enough memory for a piece of " + plan->object());
    return fresh;
  };
  auto sink = std::make_shared<BufferSink>(c.plan->object(), std::move(prepare), piece.cancelled);
  auto shared = shared_;
  auto result = piece.result;
  r.store->Get(r.key, get, sink).Then([shared, result, sink](const Status& status) {
    Result<Buffer> data = status.ok() ? sink->Finish() : Result<Buffer>(status);
    {
      std::lock_guard<std::mutex> lock(shared->mu);
      result->done = true;
      if (data.ok()) {
        result->data = std::move(data).value();
      } else {
        result->status = data.status();
      }
    }
    shared->cv.notify_all();
  });
  c.first_issued = true;
  c.next += planned;  // for a learning piece, corrected once its response is in (Next)
  c.pieces.push_back(std::move(piece));
  outstanding_ += planned;
  stats_.bytes_requested += planned;
  ++stats_.pieces;
  return true;
}

bool RangeFetcher::Pull() {
  std::optional<FetchRange> range;
  if (!source_done_ && source_) range = source_();
  if (!range) {
    source_done_ = true;
    return false;
  }
  Cursor c;
  c.index = next_range_++;
  c.next = range->start;
  c.plan = std::make_shared<RangePlan>(std::move(*range));
  cursors_.push_back(std::move(c));
  return true;
}

void RangeFetcher::Fill() {
  while (true) {
    if (cursors_.empty() || cursors_.back().FullyIssued()) {
      if (outstanding_ > 0 && outstanding_ >= stats_.window_bytes) return;
      if (!Pull()) return;
      continue;
    }
    Cursor& c = cursors_.back();
    if (!c.Refresh() && c.first_issued) return;  // its first response will say how far it goes
    const uint64_t next_len = c.known ? std::min<uint64_t>(options_.piece_size, c.end - c.next) : options_.piece_size;
    if (outstanding_ > 0 && outstanding_ + next_len > stats_.window_bytes) return;
    if (!Issue(c, /*force=*/false)) return;
  }
}

Result<std::optional<FetchedPiece>> RangeFetcher::Next() {
  if (!failed_.ok()) return failed_;
  Fill();
  while (!cursors_.empty() && cursors_.front().pieces.empty() && cursors_.front().FullyIssued()) {
    cursors_.pop_front();  // every piece delivered
    Fill();
  }
  // The window may be taken by pieces the consumer still holds: the range it waits for comes anyway.
  if (cursors_.empty() && !Pull()) return std::optional<FetchedPiece>();
  Cursor& c = cursors_.front();
  // The consumer waits for this piece: request it whatever the window says.
  if (c.pieces.empty() && !Issue(c, /*force=*/true)) return Fail(Interrupted("reading " + c.plan->object()));
  Piece& p = c.pieces.front();
  {
    std::unique_lock<std::mutex> lock(shared_->mu);
    if (!p.result->done) {
      // The consumer caught up with the network: the window does not cover the time to first byte
      // at this rate. Double it (taking effect from the next Fill).
      ++stats_.stalls;
      stats_.window_bytes = std::min(options_.max_window, stats_.window_bytes * 2);
    }
    while (!shared_->cv.wait_for(lock, kInterruptPoll, [&] { return p.result->done; })) {
      lock.unlock();  // the check may run Python signal handlers: never under our lock
      const bool stop = InterruptRequested();
      lock.lock();
      if (stop && !p.result->done) {
        lock.unlock();
        return Fail(Interrupted("reading " + c.plan->object()));
      }
    }
  }
  if (!p.result->status.ok()) return Fail(p.result->status);
  FetchedPiece out;
  out.range = c.index;
  out.offset = p.offset;
  out.data = std::move(p.result->data);
  // Count what arrived, not what was asked for (the last piece of an open range may be shorter).
  outstanding_ -= std::min(outstanding_, p.charge - std::min(p.charge, out.data.size()));
  const bool was_learning = !c.known;
  c.pieces.pop_front();
  if (was_learning) {
    c.Refresh();
    c.next = out.offset + out.data.size();  // what the first response really covered
  }
  out.last_of_range = c.pieces.empty() && c.Refresh() && c.next >= c.end;
  return std::optional<FetchedPiece>(std::move(out));
}

Status RangeFetcher::Fail(Status status) {
  failed_ = std::move(status);
  for (Cursor& cursor : cursors_) DropPieces(cursor, cursor.pieces.size());
  cursors_.clear();
  return failed_;
}

void RangeFetcher::Release(uint64_t bytes) { outstanding_ -= std::min(outstanding_, bytes); }

void RangeFetcher::Restart(Source source) {
  for (Cursor& c : cursors_) DropPieces(c, c.pieces.size());
  cursors_.clear();
  source_ = std::move(source);
  source_done_ = false;
  failed_ = Status::Ok();
  stats_.window_bytes = std::min(options_.initial_window, options_.max_window);
}

bool RangeFetcher::SkipTo(uint64_t offset) {
  if (cursors_.empty()) return false;
  Cursor& c = cursors_.front();
  size_t before = 0;
  while (before < c.pieces.size() && c.pieces[before].offset + c.pieces[before].charge <= offset) ++before;
  if (before == c.pieces.size()) return false;
  if (c.pieces[before].offset > offset) return false;
  DropPieces(c, before);
  return true;
}

}  // namespace s3stream
