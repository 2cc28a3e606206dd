// The range engine: the one place where byte ranges of objects become GETs. Every reader goes
// through it, so a store decorator (the disk cache) sees every byte any of them fetches:
//
// * FetchWhole: a whole object or range into one Buffer (Client::Get, Client::GetMany);
// * RangeFetcher: ranges streamed in order with read-ahead (ObjectReader, so open('rb') and the
//   shard index builder; ShardSampleReader, so ShardDataset).
//
// What both do with a range:
// * split it into pieces of at most piece_size bytes, one GET each, fetched in parallel;
// * learn an open-ended range's size from its first piece, which asks for "up to" one piece: a
//   small object costs one GET, a large one no HEAD;
// * pin every piece to one ETag: an object replaced mid-read fails with kPreconditionFailed
//   instead of mixing two versions. The pin is the caller's ETag, or, for FetchWhole and open
//   ranges, the first response's (a RangeFetcher range with a fixed end and no ETag is unpinned).
//
// RangeFetcher also sizes its read-ahead by measurement: a window of bytes requested ahead of the
// consumer starts at initial_window and doubles each time the consumer finds the piece it needs
// still on the wire, up to max_window, which bounds the memory held. Pieces may draw their memory
// from a BufferPool shared with other readers (then read-ahead also waits for room in the pool).
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "s3stream/object_store.h"

namespace s3stream {

// Bytes [start, end) of one object.
struct FetchRange {
  std::shared_ptr<ObjectStore> store;
  std::string key;
  uint64_t start = 0;
  std::optional<uint64_t> end;  // none: to the end of the object
  // An end past the object's end is cut to it (as S3 does) instead of failing; a start past the
  // end still fails.
  bool clamp_end = false;
  std::string etag;  // every piece must have it (see above for an empty one)
  // Set to true when the bytes are no longer wanted: FetchWhole's GETs stop (within about a second,
  // also on a stalled connection) and it fails with kCancelled.
  std::shared_ptr<std::atomic<bool>> cancel;
};

inline constexpr uint64_t kDefaultPieceSize = 8 << 20;

// The range as one Buffer: the first piece learns the size (and ETag); the others are requested at
// once, each writing its own slice. Fails with the first failing piece's Status, after every piece
// has finished (no GET outlives the Buffer it writes into). With piece_size 0 the range comes in
// one GET (a whole object: no Range header), for callers whose parallelism is many objects. A
// range longer than max_bytes (or than the memory there is) fails with kTooLarge as soon as its
// size is known, before anything is allocated for it.
Future<Result<Buffer>> FetchWhole(FetchRange range, uint64_t piece_size = kDefaultPieceSize,
                                  uint64_t max_bytes = ~uint64_t{0});

struct FetchOptions {
  uint64_t piece_size = kDefaultPieceSize;
  uint64_t initial_window = 2 * kDefaultPieceSize;  // bytes requested ahead of the consumer at first
  uint64_t max_window = 64 << 20;                   // and at most: the memory bound
  std::shared_ptr<BufferPool> pool;                 // none: pieces allocate their own memory
};

struct FetchStats {
  uint64_t window_bytes = 0;     // the current read-ahead window
  uint64_t stalls = 0;           // times the consumer waited for a piece still in flight
  uint64_t bytes_requested = 0;  // by pieces issued (the last piece of an open range may be shorter)
  uint64_t pieces = 0;           // GETs issued
};

// A piece handed to the consumer: bytes [offset, offset + data.size()) of the object of range
// number `range` (0, 1, 2, ... in the order the source gave them).
struct FetchedPiece {
  uint64_t range = 0;
  uint64_t offset = 0;
  Buffer data;
  bool last_of_range = false;
};

// Streams ranges pulled from a source, piece by piece, in order.
//
// Memory: bytes of pieces requested and not yet released by the consumer stay under the window
// (the first piece is always requested, so one oversized piece cannot stall the stream).
// Threading: one consumer thread calls Next/Release/Restart; the store's threads fill pieces.
// Destroying the fetcher cancels what is in flight (those GETs stop at their next bytes).
class RangeFetcher {
 public:
  // Called on the consumer thread, when the window has room, for the next range to fetch;
  // nullopt when there are no more.
  using Source = std::function<std::optional<FetchRange>()>;

  RangeFetcher(Source source, FetchOptions options);
  ~RangeFetcher();
  RangeFetcher(const RangeFetcher&) = delete;
  RangeFetcher& operator=(const RangeFetcher&) = delete;

  // The next piece in order, waiting for it if needed; nullopt when the source is exhausted and
  // every piece was delivered. A range's pieces are contiguous and the last one says so; an empty
  // range yields at most one empty piece. After a failure (an interrupted wait included: see
  // interrupt.h) the fetcher is finished: every call returns it (until Restart).
  Result<std::optional<FetchedPiece>> Next();

  // The consumer is done with `bytes` of the pieces it took (their data.size()): room for more
  // read-ahead. Releasing late keeps pieces counted against the window while they are in use.
  void Release(uint64_t bytes);

  // Cancels everything requested and starts over from a new source, with the window back at its
  // initial size (a seek).
  void Restart(Source source);

  // A forward seek within what is already requested: drops (and cancels) the queued pieces of the
  // current range that end at or before `offset`. True when the next piece Next() returns holds
  // `offset`; false when it is not requested yet (Restart from it instead).
  bool SkipTo(uint64_t offset);

  const FetchStats& stats() const { return stats_; }

 private:
  struct Shared;
  struct Piece;
  struct Cursor;

  bool Pull();  // the next range from the source into cursors_; false when there is none
  void Fill();
  // One more piece of `cursor`. Read-ahead (force false) gives up when the pool has no room; the
  // piece the consumer waits for (force true) waits for room instead.
  bool Issue(Cursor& cursor, bool force);
  void DropPieces(Cursor& cursor, size_t count);  // cancels the first `count` queued pieces
  Status Fail(Status status);                     // finished with `status`: drops everything requested

  Source source_;
  const FetchOptions options_;
  std::shared_ptr<Shared> shared_;     // with the pieces' completion callbacks
  std::deque<Cursor> cursors_;         // ranges pulled from the source and not fully delivered
  bool source_done_ = false;
  uint64_t next_range_ = 0;
  uint64_t outstanding_ = 0;           // bytes requested and not released
  FetchStats stats_;
  Status failed_;
};

}  // namespace s3stream
