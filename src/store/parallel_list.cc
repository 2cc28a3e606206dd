// The parallel lister (s3stream/parallel_list.h): ranges of the key space, each listed on its own,
// split while requests are free, handed out in key order.
#include "s3stream/parallel_list.h"

#include <algorithm>
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

// Keys in (lo, hi] of the listing's prefix: lo is exclusive (a request's start-after), hi inclusive;
// none means the start or the end of the key space. The ranges of a listing tile the key space.
struct Range {
  std::optional<std::string> lo;
  std::optional<std::string> hi;
  std::string list_prefix;            // of its requests: every key in (lo, hi] starts with it
  std::optional<std::string> cursor;  // the last key taken, else lo
  std::string token;                  // continuation token of the next request
  std::set<std::string> tokens;       // every token it was given: a repeat would loop forever
  std::vector<ObjectInfo> ready;      // taken, not yet handed out
  bool done = false;
  int split_credit = 0;
};

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
  Status error;
  bool cancelled = false;

  using Pending = std::vector<std::pair<std::shared_ptr<Range>, ListRequest>>;

  std::string What() const { return "listing " + store->Describe(prefix); }

  // The next request of `range`, counted as in flight. Under mu.
  ListRequest Prepare(Range& range) {
    ++in_flight;
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
    next->list_prefix = next->hi ? next->lo->substr(0, CommonPrefix(*next->lo, *next->hi)) : prefix;
    range.hi = next->lo;
    ranges.insert(std::next(it), next);
    ++open;
    return next;
  }

  // While requests are free: splits the widest range that showed it holds more than a page. Under mu.
  void Split(Pending& pending) {
    while (in_flight < options.max_requests) {
      auto best = ranges.end();
      double widest = 0;
      for (auto it = ranges.begin(); it != ranges.end(); ++it) {
        const Range& r = **it;
        if (r.done || r.split_credit <= 0) continue;
        const std::string& low = r.cursor ? *r.cursor : prefix;
        const double span = alphabet.LogSpan(prefix, low, r.hi ? std::optional<std::string_view>(*r.hi) : std::nullopt);
        if (best == ranges.end() || span > widest) {
          best = it;
          widest = span;
        }
      }
      if (best == ranges.end()) return;
      Range& r = **best;
      std::optional<std::string> m = alphabet.Midpoint(
          prefix, r.cursor ? *r.cursor : prefix, r.hi ? std::optional<std::string_view>(*r.hi) : std::nullopt);
      if (!m) {
        r.split_credit = 0;  // too narrow for the alphabet: it is listed to its end as it is
        continue;
      }
      --r.split_credit;
      std::shared_ptr<Range> next = SplitAt(best, std::move(*m));
      pending.emplace_back(next, Prepare(*next));
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
      range.cursor = info.key;
      ++objects;
      range.ready.push_back(std::move(info));
    }
    if (range.done) return;
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
    pending.emplace_back(self, Prepare(range));
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
  root->list_prefix = state->prefix;
  State::Pending pending;
  {
    std::lock_guard<std::mutex> lock(state->mu);
    state->ranges.push_back(root);
    state->open = 1;
    pending.emplace_back(root, state->Prepare(*root));
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
  return ListProgress{state_->objects, state_->requests, state_->in_flight, state_->open == 0};
}

Result<std::optional<std::vector<ObjectInfo>>> ParallelLister::Next(std::chrono::milliseconds timeout) {
  using Clock = std::chrono::steady_clock;
  const Clock::time_point deadline = Clock::now() + timeout;
  std::unique_lock<std::mutex> lock(state_->mu);
  while (true) {
    if (!state_->error.ok()) return state_->error;
    if (state_->cancelled) return Cancelled(state_->What() + " was cancelled");
    auto& ranges = state_->ranges;
    while (!ranges.empty()) {
      Range& front = *ranges.front();
      if (!front.ready.empty()) {
        std::vector<ObjectInfo> out;
        out.swap(front.ready);
        if (front.done) ranges.pop_front();
        return std::optional<std::vector<ObjectInfo>>(std::move(out));
      }
      if (!front.done) break;
      ranges.pop_front();
    }
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
