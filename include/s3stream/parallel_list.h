// ParallelLister: every object under a prefix, in key order, each exactly once — the result of a
// sequential listing — with many LIST requests in flight instead of one.
//
// A sequential listing costs one round trip per 1,000 keys (10 M keys: 10,000 round trips before
// the first sample). The lister splits the key space into ranges, each listed on its own with
// start-after and continuation tokens; a range that turns out to hold more than a page is split
// again at a point between its last key and its end, chosen from the characters of the keys seen
// so far (store/key_split.h), so flat key spaces ("train/0000001.jpg" ...) and trees alike spread
// over up to `max_requests` requests in flight on the store's own transport (for S3, the one
// libcurl event loop: no thread per request). The ranges tile the key space, so nothing is lost or
// listed twice, and the objects come out in order as soon as every range before them is done.
//
// The store must list keys in byte order (S3 and the file driver do); one that does not, or that
// repeats a continuation token, fails the listing with kCorrupt instead of yielding a wrong one.
//
// Threading: Next, Progress and Cancel may be called from any thread (Next from one at a time);
// never block in Next on a driver's thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "s3stream/object_store.h"

namespace s3stream {

struct ParallelListOptions {
  int max_requests = 32;  // LIST requests in flight at once; 1 lists sequentially
  int max_keys = 1000;    // keys per request, 1..1000
  // Objects listed but not yet handed out by Next, beyond which ranges stop listing until Next
  // has taken half of them (the first range, the one Next waits for, as soon as Next took what it
  // listed): a slow consumer (ls piped into a pager) holds about this many in memory, plus the
  // pages in flight, not the whole listing.
  uint64_t max_buffered = 1000000;
};

struct ListProgress {
  uint64_t objects = 0;   // listed so far, in any order (not yet all handed out by Next)
  uint64_t requests = 0;  // LIST requests sent
  int in_flight = 0;
  uint64_t buffered = 0;  // listed, not yet handed out
  bool done = false;
};

class ParallelLister {
 public:
  // Starts listing every key that begins with `prefix` at once; kInvalidArgument for options out
  // of range.
  static Result<std::unique_ptr<ParallelLister>> Start(std::shared_ptr<ObjectStore> store, std::string prefix,
                                               ParallelListOptions options = {});
  // Cancels what is still in flight (its results are dropped).
  ~ParallelLister();

  // The next objects in key order (one or more), or nullopt after the last. Waits at most
  // `timeout` for them (then returns an empty vector: call again) and ends early with kCancelled
  // when the interrupt check asks to (interrupt.h). The first failed request fails the listing.
  Result<std::optional<std::vector<ObjectInfo>>> Next(std::chrono::milliseconds timeout = std::chrono::hours(24));
  ListProgress Progress() const;
  void Cancel();

  struct State;  // shared with the requests in flight

 private:
  explicit ParallelLister(std::shared_ptr<State> state) : state_(std::move(state)) {}
  std::shared_ptr<State> state_;
};

}  // namespace s3stream
