#include <unistd.h>

#include <cstdio>
#include <ctime>
#include <thread>

#include "s3stream/credentials.h"
#include "s3stream/interrupt.h"

namespace s3stream {
namespace {

class Static final : public CredentialsProvider {
 public:
  Static(Credentials credentials, std::string description)
      : credentials_(std::move(credentials)), description_(std::move(description)) {}
  Result<std::optional<Credentials>> Fetch() override { return std::optional<Credentials>(credentials_); }
  std::string Describe() const override { return description_; }

 private:
  const Credentials credentials_;
  const std::string description_;
};

std::string Utc(WallClock::time_point t) {
  const std::time_t secs = WallClock::to_time_t(t);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char out[32];
  std::strftime(out, sizeof out, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return out;
}

}  // namespace

std::shared_ptr<CredentialsProvider> StaticCredentials(Credentials credentials, std::string description) {
  return std::make_shared<Static>(std::move(credentials), std::move(description));
}

CredentialsCache::State::State() : pid(::getpid()) {}

CredentialsCache::CredentialsCache(std::shared_ptr<CredentialsProvider> provider)
    : CredentialsCache(std::move(provider), Options{}) {}

CredentialsCache::CredentialsCache(std::shared_ptr<CredentialsProvider> provider, Options options)
    : core_(std::make_shared<Core>()), state_(new std::shared_ptr<State>(std::make_shared<State>())) {
  core_->provider = std::move(provider);
  core_->options = std::move(options);
}

CredentialsCache::~CredentialsCache() {
  std::shared_ptr<State>* box = state_.load();
  if ((*box)->pid == ::getpid()) delete box;  // else a forked child's inherited box: the parent's to free
}

std::shared_ptr<CredentialsCache::State> CredentialsCache::StateForThisProcess() {
  std::shared_ptr<State>* box = state_.load(std::memory_order_acquire);
  if ((*box)->pid == ::getpid()) return *box;
  // A forked child: never lock the parent's state. A fresh one fetches again here; the inherited
  // box is leaked (freeing it could run a destructor on a mutex held at the fork).
  auto* fresh = new std::shared_ptr<State>(std::make_shared<State>());
  if (state_.compare_exchange_strong(box, fresh, std::memory_order_acq_rel)) return *fresh;
  delete fresh;  // another thread of this child installed one first
  return *box;
}

namespace {

bool Usable(bool have, const std::optional<Credentials>& c, WallClock::time_point now) {
  return have && (!c || !c->expiration || now < *c->expiration);
}

// Due for a fetch: none yet, or temporary credentials within `ahead` of their expiration.
bool Stale(bool have, const std::optional<Credentials>& c, WallClock::time_point now, std::chrono::seconds ahead) {
  return !have || (c && c->expiration && now >= *c->expiration - ahead);
}

}  // namespace

void CredentialsCache::Refresh(const std::shared_ptr<Core>& core, const std::shared_ptr<State>& s) {
  Result<std::optional<Credentials>> got = core->provider->Fetch();
  const WallClock::time_point now = core->options.now();
  std::lock_guard lock(s->mu);
  s->fetching = false;
  s->cv.notify_all();
  if (got.ok()) {
    core->answered_none.store(!got.value().has_value());
    s->have = true;
    s->current = std::move(got.value());
    s->last_error = Status::Ok();
    s->reported = false;
    // A source handing out credentials that are already due for refresh is asked again only after
    // retry_after, not on every request.
    s->retry_at = Stale(true, s->current, now, core->options.refresh_ahead) ? now + core->options.retry_after
                                                                              : WallClock::time_point{};
    return;
  }
  s->last_error = got.status();
  s->retry_at = now + core->options.retry_after;
  if (Usable(s->have, s->current, now) && !s->reported) {
    // Nothing else would say so until the credentials expire: once, on stderr.
    s->reported = true;
    std::fprintf(stderr, "s3stream: refreshing the credentials from %s failed (retrying every %llds until they "
                 "expire at %s): %s\n", core->provider->Describe().c_str(),
                 static_cast<long long>(core->options.retry_after.count()), Utc(*s->current->expiration).c_str(),
                 got.status().message().c_str());
  }
}

Result<std::optional<Credentials>> CredentialsCache::Get() {
  std::shared_ptr<State> s = StateForThisProcess();
  std::unique_lock lock(s->mu);
  const Options& options = core_->options;
  for (;;) {
    const WallClock::time_point now = options.now();
    const bool usable = Usable(s->have, s->current, now);
    if (!Stale(s->have, s->current, now, options.refresh_ahead) || (usable && now < s->retry_at)) {
      return s->current;
    }
    if (s->fetching) {  // another thread fetches: sign with what is still valid, else wait for it
      if (usable) return s->current;
      s->cv.wait_for(lock, kInterruptPoll);
      if (InterruptRequested()) return Interrupted("waiting for credentials from " + core_->provider->Describe());
      continue;
    }
    if (now < s->retry_at) {  // a fetch failed a moment ago, and nothing valid is left
      if (!s->have || !s->current) return s->last_error;
      std::string message = "the credentials from " + core_->provider->Describe() + " expired at " +
                            Utc(*s->current->expiration) + " and could not be refreshed: " + s->last_error.message();
      return Status(s->last_error.code(), message);
    }
    s->fetching = true;
    if (usable) {
      // Ahead of the expiration: refresh on a thread of its own, so that no request waits for it
      // (this may be the transport's own thread, retrying a request).
      std::thread([core = core_, s] { Refresh(core, s); }).detach();
      return s->current;
    }
    lock.unlock();
    Refresh(core_, s);
    lock.lock();
  }
}

}  // namespace s3stream
