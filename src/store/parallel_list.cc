// The parallel lister (s3stream/parallel_list.h): ranges of the key space, each listed on its own,
// split while requests are free, handed out in key order.
#include "s3stream/parallel_list.h"

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <list>
#include <mutex>
#include <set>
#include <utility>

#include "s3stream/interrupt.h"
#include "store/key_split.h"

namespace s3stream {
namespace {

// Splits a range may make per page it returned with more to come: the ranges grow about fivefold
// per round trip while the listing shows it is large, and a small one costs a request or two more
// than a sequential listing, not max_requests.
constexpr int kSplitsPerPage = 4;
// The first split points come from one delimiter listing of the prefix, sent beside the first page:
// its common prefixes (train/, val/, or class directories) are where the keys cluster, which
// midpoints of the key space miss (they land in the gaps between clusters, in ranges that hold
// nothing). At most as many as there are free requests, spread over all of them.
constexpr char kProbeDelimiter[] = "/";

// Keys in (lo, hi] of the listing's prefix: lo is exclusive (a request's start-after), hi inclusive;
// none means the start or the end of the key space. The ranges of a listing tile the key space.
struct Range {
  std::optional<std::string> lo;
  std::optional<std::string> hi;
  std::string list_prefix;            // of its requests (set by the first): every key in (lo, hi] starts with it
  std::optional<std::string> cursor;  // the last key taken, else lo
  std::string subtree;                // a common prefix its keys start with, up to where they stop
  std::string token;                  // continuation token of the next request
  std::set<std::string> tokens;       // every token it was given: a repeat would loop forever
  std::vector<ObjectInfo> ready;      // taken, not yet handed out
  bool started = false;
  bool done = false;
  bool parked = false;  // has a next page, waits until fewer objects are buffered
  int split_credit = 0;
  // How densely its last page was packed: sample_count keys after sample_from, up to the cursor
  // (the page's second half: a key far from the others, like one named as the prefix, tends to
  // come first).
  std::string sample_from;
  uint64_t sample_count = 0;
};

bool StartsWith(const std::string& s, const std::string& prefix) { return s.compare(0, prefix.size(), prefix) == 0; }

size_t CommonPrefix(const std::string& a, const std::string& b) {
  size_t n = 0;
  while (n < a.size() && n < b.size() && a[n] == b[n]) ++n;
  return n;
}

}  // namespace

struct ParallelLister::State {
  std::shared_ptr<ObjectStore> store;
  std::string prefix;
  ParallelListOptions options;

  std::mutex mu;
  std::condition_variable changed;
  std::list<std::shared_ptr<Range>> ranges;  // in key order; the front is handed out next
  internal::KeyAlphabet alphabet;
  int in_flight = 0;
  int open = 0;  // ranges not done
  uint64_t objects = 0;
  uint64_t requests = 0;
  uint64_t buffered = 0;  // taken, not yet handed out by Next
  Status error;
  bool cancelled = false;
  bool probing = false;  // no split before the delimiter listing's split points are in

  using Pending = std::vector<std::pair<std::shared_ptr<Range>, ListRequest>>;

  std::string What() const { return "listing " + store->Describe(prefix); }

  // The next request of `range`, counted as in flight. Under mu.
  ListRequest Prepare(Range& range) {
    ++in_flight;
    if (!range.started) {  // its first request: the bounds are final by now, and so is the prefix
      range.started = true;  // (a continuation token belongs to the prefix it was given with)
      range.list_prefix = range.lo && range.hi ? range.lo->substr(0, CommonPrefix(*range.lo, *range.hi)) : prefix;
    }
    ListRequest request;
    request.prefix = range.list_prefix;
    request.max_keys = options.max_keys;
    if (!range.token.empty()) {
      request.continuation_token = range.token;
    } else if (range.lo) {
      request.start_after = *range.lo;
    }
    return request;
  }

  // A new range (m, range.hi] after `it`, whose range now ends at m. Under mu.
  std::shared_ptr<Range> SplitAt(std::list<std::shared_ptr<Range>>::iterator it, std::string m) {
    Range& range = **it;
    auto next = std::make_shared<Range>();
    next->lo = std::move(m);
    next->hi = range.hi;
    next->cursor = next->lo;
    if (!range.subtree.empty() && StartsWith(*next->lo, range.subtree)) next->subtree = range.subtree;
    range.hi = next->lo;
    ranges.insert(std::next(it), next);
    ++open;
    return next;
  }

  // Where to split `r` in: the key space of `space` between `low` and `high` (none: its end).
  struct Bounds {
    std::string_view space;
    std::string_view low;
    std::optional<std::string_view> high;
  };
  Bounds BoundsOf(const Range& r) const {
    Bounds b{prefix, r.cursor ? std::string_view(*r.cursor) : std::string_view(prefix), std::nullopt};
    if (r.hi) b.high = *r.hi;
    if (!r.subtree.empty() && StartsWith(std::string(b.low), r.subtree) && !(r.hi && StartsWith(*r.hi, r.subtree))) {
      b.space = r.subtree;  // the keys stop where the subtree does: split what is left of it
      b.high.reset();
    }
    return b;
  }

  // Whether `r` likely holds two pages more: its keys so far, scaled by the key space left over the
  // key space from its first key to its last (as if it went on as densely). Not worth a request
  // otherwise: a range of less than a page costs as many requests as a larger one.
  bool Worth(const Range& r, const Bounds& b) const {
    if (r.sample_count == 0 || !r.cursor) return true;
    const double covered = alphabet.LogSpan(b.space, r.sample_from, std::string_view(*r.cursor));
    const double left = alphabet.LogSpan(b.space, b.low, b.high);
    return static_cast<double>(r.sample_count) * std::exp(left - covered) >= 2.0 * options.max_keys;
  }

  // While requests are free: splits the widest range that showed it holds more than a page and
  // likely holds two more. Under mu.
  void Split(Pending& pending) {
    while (!probing && in_flight < options.max_requests && buffered < options.max_buffered) {
      auto best = ranges.end();
      double widest = 0;
      for (auto it = ranges.begin(); it != ranges.end(); ++it) {
        Range& r = **it;
        if (r.done || r.split_credit <= 0) continue;
        const Bounds b = BoundsOf(r);
        if (!Worth(r, b)) {
          r.split_credit = 0;
          continue;
        }
        const double span = alphabet.LogSpan(prefix, b.low, r.hi ? std::optional<std::string_view>(*r.hi) : std::nullopt);
        if (best == ranges.end() || span > widest) {
          best = it;
          widest = span;
        }
      }
      if (best == ranges.end()) return;
      Range& r = **best;
      const Bounds b = BoundsOf(r);
      std::optional<std::string> m = alphabet.Midpoint(b.space, b.low, b.high);
      if (m && r.hi && !(*m < *r.hi)) m.reset();
      if (!m) {
        r.split_credit = 0;  // too narrow for the alphabet: it is listed to its end as it is
        continue;
      }
      --r.split_credit;
      std::shared_ptr<Range> next = SplitAt(best, std::move(*m));
      pending.emplace_back(next, Prepare(*next));
    }
  }

  // Splits at the common prefixes of the delimiter listing sent first (kProbeDelimiter). Under mu.
  void Seed(const ListPage& probe, Pending& pending) {
    const std::vector<std::string>& points = probe.common_prefixes;
    const size_t free = options.max_requests > in_flight ? static_cast<size_t>(options.max_requests - in_flight) : 0;
    if (points.empty() || free == 0) return;
    for (const std::string& p : points) alphabet.Learn(p, prefix.size());
    std::vector<std::shared_ptr<Range>> made;
    const size_t count = std::min(points.size(), free);
    for (size_t i = 0; i < count; ++i) {
      const std::string& m = points[i * points.size() / count];
      if (m.compare(0, prefix.size(), prefix) != 0) continue;
      for (auto it = ranges.begin(); it != ranges.end(); ++it) {
        Range& r = **it;
        if (r.hi && !(m < *r.hi)) continue;
        if (!r.done && (!r.cursor || m > *r.cursor)) {
          made.push_back(SplitAt(it, m));
          made.back()->subtree = m;
        }
        break;
      }
    }
    for (const auto& r : made) pending.emplace_back(r, Prepare(*r));
  }

  // `range` was split off the one before it and holds nothing: that one's split point landed in
  // a gap between keys, and another split of it would likely land there too. It is split again
  // after its next page, nearer to its keys. Under mu.
  void Emptied(const std::shared_ptr<Range>& range) {
    auto it = std::find(ranges.begin(), ranges.end(), range);
    if (it != ranges.begin() && it != ranges.end()) {
      Range& before = **std::prev(it);
      before.split_credit = 0;
    }
  }

  void Finish(Range& range) {
    if (!range.done) {
      range.done = true;
      --open;
    }
  }

  // Takes a page of `range`. Under mu.
  void Take(Range& range, ListPage& page, Pending& pending, const std::shared_ptr<Range>& self) {
    const size_t half = page.objects.size() / 2;
    const bool first_page = range.token.empty();
    size_t taken = 0;
    for (ObjectInfo& info : page.objects) {
      if (range.hi && info.key > *range.hi) {
        Finish(range);  // the rest belongs to the ranges after it
        break;
      }
      if (info.key.compare(0, range.list_prefix.size(), range.list_prefix) != 0 ||
          (range.cursor && !(info.key > *range.cursor))) {
        error = Corrupt(What() + ": the store listed '" + info.key.substr(0, 200) + "' after '" +
                        range.cursor.value_or(range.list_prefix).substr(0, 200) +
                        "', not in byte order of keys under the prefix; list this store sequentially (parallelism=1)");
        return;
      }
      alphabet.Learn(info.key, prefix.size());
      if (++taken == half) {
        range.sample_from = info.key;
        range.sample_count = 0;
      } else if (taken > half && half > 0) {
        ++range.sample_count;
      }
      range.cursor = info.key;
      ++objects;
      ++buffered;
      range.ready.push_back(std::move(info));
    }
    if (range.done) {
      if (first_page && taken == 0) Emptied(self);
      return;
    }
    if (page.next_continuation_token.empty() || (range.hi && range.cursor && *range.cursor == *range.hi)) {
      Finish(range);
      return;
    }
    if (!range.tokens.insert(page.next_continuation_token).second) {
      error = Corrupt(What() + ": the store handed out the continuation token '" +
                      page.next_continuation_token.substr(0, 80) + "' a second time, which would make the listing endless");
      return;
    }
    range.token = std::move(page.next_continuation_token);
    range.split_credit = kSplitsPerPage;
    if (buffered >= options.max_buffered && (ranges.front() != self || !range.ready.empty())) {
      range.parked = true;  // Next resumes it (the first range too, once Next took what it has)
      return;
    }
    pending.emplace_back(self, Prepare(range));
  }

  // The parked ranges to go on with: the first one once Next has taken what it listed (Next
  // waits for it), the others once Next has taken half of what was buffered. Under mu.
  void Resume(Pending& pending) {
    for (const auto& r : ranges) {
      const bool first = r == ranges.front() && r->ready.empty();
      if (!r->parked || !(first || buffered < options.max_buffered / 2)) continue;
      if (!first && in_flight >= options.max_requests) break;
      r->parked = false;
      pending.emplace_back(r, Prepare(*r));
    }
  }
};

namespace {

using State = ParallelLister::State;

void Send(const std::shared_ptr<State>& state, State::Pending pending);

void OnPage(const std::shared_ptr<State>& state, const std::shared_ptr<Range>& range, Result<ListPage> page) {
  State::Pending pending;
  {
    std::lock_guard<std::mutex> lock(state->mu);
    --state->in_flight;
    if (!state->cancelled && state->error.ok()) {
      if (!page.ok()) {
        state->error = page.status();
      } else {
        state->Take(*range, *page, pending, range);
        if (state->error.ok()) {
          state->Split(pending);
        }
      }
      if (!state->error.ok()) {
        state->in_flight -= static_cast<int>(pending.size());
        pending.clear();
      }
    }
  }
  state->changed.notify_all();
  Send(state, std::move(pending));
}

void OnProbe(const std::shared_ptr<State>& state, const Result<ListPage>& page) {
  State::Pending pending;
  {
    std::lock_guard<std::mutex> lock(state->mu);
    --state->in_flight;
    state->probing = false;
    // Only a hint: a failed probe seeds nothing (the ranges' own requests report any failure).
    if (!state->cancelled && state->error.ok()) {
      if (page.ok()) state->Seed(page.value(), pending);
      state->Split(pending);
    }
  }
  Send(state, std::move(pending));
}

// Outside mu: a store may complete a request on this very thread.
void Send(const std::shared_ptr<State>& state, State::Pending pending) {
  for (auto& [range, request] : pending) {
    {
      std::lock_guard<std::mutex> lock(state->mu);
      ++state->requests;
    }
    state->store->List(request).Then([state, range = range](const Result<ListPage>& page) {
      OnPage(state, range, page);
    });
  }
}

}  // namespace

Result<std::unique_ptr<ParallelLister>> ParallelLister::Start(std::shared_ptr<ObjectStore> store, std::string prefix,
                                                              ParallelListOptions options) {
  if (options.max_requests < 1) {
    return InvalidArgument("parallel listing: max_requests must be at least 1, got " + std::to_string(options.max_requests));
  }
  if (options.max_keys < 1 || options.max_keys > 1000) {
    return InvalidArgument("parallel listing: max_keys must be 1..1000, got " + std::to_string(options.max_keys));
  }
  auto state = std::make_shared<State>();
  state->store = std::move(store);
  state->prefix = std::move(prefix);
  state->options = options;
  auto root = std::make_shared<Range>();
  State::Pending pending;
  ListRequest probe;
  {
    std::lock_guard<std::mutex> lock(state->mu);
    state->ranges.push_back(root);
    state->open = 1;
    pending.emplace_back(root, state->Prepare(*root));
    if (options.max_requests > 1) {
      ++state->in_flight;
      ++state->requests;
      state->probing = true;
      probe.prefix = state->prefix;
      probe.delimiter = kProbeDelimiter;
      probe.max_keys = options.max_keys;
    }
  }
  if (!probe.delimiter.empty()) {
    state->store->List(probe).Then([state](const Result<ListPage>& page) { OnProbe(state, page); });
  }
  Send(state, std::move(pending));
  return std::unique_ptr<ParallelLister>(new ParallelLister(std::move(state)));
}

ParallelLister::~ParallelLister() { Cancel(); }

void ParallelLister::Cancel() {
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->cancelled = true;
  }
  state_->changed.notify_all();
}

ListProgress ParallelLister::Progress() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return ListProgress{state_->objects, state_->requests, state_->in_flight, state_->buffered, state_->open == 0};
}

Result<std::optional<std::vector<ObjectInfo>>> ParallelLister::Next(std::chrono::milliseconds timeout) {
  using Clock = std::chrono::steady_clock;
  const Clock::time_point deadline = Clock::now() + timeout;
  std::unique_lock<std::mutex> lock(state_->mu);
  while (true) {
    if (!state_->error.ok()) return state_->error;
    if (state_->cancelled) return Cancelled(state_->What() + " was cancelled");
    auto& ranges = state_->ranges;
    std::optional<std::vector<ObjectInfo>> out;
    while (!ranges.empty()) {
      Range& front = *ranges.front();
      if (!front.ready.empty()) {
        out.emplace().swap(front.ready);
        state_->buffered -= out->size();
        if (front.done) ranges.pop_front();
        break;
      }
      if (!front.done) break;
      ranges.pop_front();
    }
    State::Pending resumed;
    state_->Resume(resumed);
    if (!resumed.empty()) {
      lock.unlock();  // a store may answer on this thread
      Send(state_, std::move(resumed));
      lock.lock();
    }
    if (out) return out;
    if (ranges.empty()) return std::optional<std::vector<ObjectInfo>>();
    const Clock::time_point now = Clock::now();
    if (now >= deadline) return std::optional<std::vector<ObjectInfo>>(std::vector<ObjectInfo>());
    state_->changed.wait_for(lock, std::min<Clock::duration>(kInterruptPoll, deadline - now));
    lock.unlock();  // the check may take a lock of its own (Python's: the GIL)
    const bool interrupted = InterruptRequested();
    lock.lock();
    if (interrupted) {
      state_->cancelled = true;
      return Interrupted(state_->What());
    }
  }
}

}  // namespace s3stream
