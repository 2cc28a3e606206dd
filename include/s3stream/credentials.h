// Credentials, where they come from, and how they stay fresh.
//
// A CredentialsProvider is one source (static keys, a profile's credential_process, the container
// or instance metadata endpoint, a Python callable); ResolveConfig picks the first source of the
// AWS default chain that applies (docs/credentials.md). A CredentialsCache in front of it is what
// signs requests: it fetches on first use and again `refresh_ahead` before temporary credentials
// expire, in the first thread that needs them then, while every other thread keeps signing with the
// credentials that are still valid, so no request fails at the boundary. A failed refresh is retried
// (no more often than `retry_after`) until the old credentials expire; only then do requests fail,
// with the refresh's error naming the source.
//
// fork(): a child never touches its parent's cache state (a parent thread may have held its lock
// at the fork); its first Get installs a fresh state and fetches again in the child.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "s3stream/status.h"

namespace s3stream {

using WallClock = std::chrono::system_clock;

struct Credentials {
  std::string access_key_id;
  std::string secret_access_key;
  std::string session_token;  // empty when not temporary credentials
  // When temporary credentials stop working; none for long-term keys.
  std::optional<WallClock::time_point> expiration;
};

class CredentialsProvider {
 public:
  virtual ~CredentialsProvider() = default;
  // The source's current credentials; none when it has none to give (requests then go unsigned,
  // as with no source at all). May block (a process, an HTTP request): only CredentialsCache calls
  // it, never once per request.
  virtual Result<std::optional<Credentials>> Fetch() = 0;
  // The source, for messages: "the environment (AWS_ACCESS_KEY_ID)", "instance metadata at ...".
  virtual std::string Describe() const = 0;
};

// Long-term keys given once (the Client's arguments, the environment, a profile's static keys).
std::shared_ptr<CredentialsProvider> StaticCredentials(Credentials credentials, std::string description);

class CredentialsCache {
 public:
  struct Options {
    std::chrono::seconds refresh_ahead{300};  // refresh this long before the expiration
    std::chrono::seconds retry_after{10};     // after a failed fetch, the next try waits this long
    std::function<WallClock::time_point()> now = [] { return WallClock::now(); };
  };

  explicit CredentialsCache(std::shared_ptr<CredentialsProvider> provider);
  CredentialsCache(std::shared_ptr<CredentialsProvider> provider, Options options);
  ~CredentialsCache();
  CredentialsCache(const CredentialsCache&) = delete;
  CredentialsCache& operator=(const CredentialsCache&) = delete;

  // Credentials to sign a request with now (thread-safe); none: send it unsigned.
  Result<std::optional<Credentials>> Get();
  std::string Describe() const { return core_->provider->Describe(); }
  // False once the source answered that it has none (requests then go unsigned).
  bool had_credentials() const { return !core_->answered_none.load(); }

 private:
  struct State {
    std::mutex mu;
    std::condition_variable cv;
    bool have = false;  // `current` holds the source's answer (maybe "none")
    std::optional<Credentials> current;
    bool fetching = false;
    Status last_error;                 // of the latest failed fetch (ok: none failed since)
    WallClock::time_point retry_at{};  // no fetch before this after a failure
    bool reported = false;             // the failure of a refresh ahead of expiry was printed
    const pid_t pid;
    State();
  };
  // What a refresh on its own thread needs: it may outlive the cache.
  struct Core {
    std::shared_ptr<CredentialsProvider> provider;
    Options options;
    std::atomic<bool> answered_none{false};
  };
  static void Refresh(const std::shared_ptr<Core>& core, const std::shared_ptr<State>& state);
  std::shared_ptr<State> StateForThisProcess();

  std::shared_ptr<Core> core_;
  std::atomic<std::shared_ptr<State>*> state_;
};

}  // namespace s3stream
