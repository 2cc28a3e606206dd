// ClientConfig: what a user may set; ResolveConfig fills the rest the way AWS SDKs do:
// explicit values win, then the environment, then the shared config files, then defaults
// (credentials: the SDKs' default chain, docs/credentials.md).
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "s3stream/credentials.h"
#include "s3stream/status.h"

namespace s3stream {

enum class AddressingStyle {
  kAuto,     // virtual-hosted on AWS endpoints, path style on custom endpoints
  kPath,     // https://endpoint/bucket/key
  kVirtual,  // https://bucket.endpoint/key
};

struct ClientConfig {
  std::optional<std::string> endpoint_url;  // e.g. "http://127.0.0.1:9000"; none means AWS
  std::optional<std::string> region;
  std::optional<std::string> access_key_id;
  std::optional<std::string> secret_access_key;
  std::optional<std::string> session_token;
  std::optional<std::string> profile;
  bool anonymous = false;  // send unsigned requests (public buckets)
  // A source of your own (a Python callable in the bindings): it replaces the default chain.
  std::shared_ptr<CredentialsProvider> credentials_provider;
  AddressingStyle addressing_style = AddressingStyle::kAuto;

  int max_attempts = 5;             // per request, including the first
  int max_inflight = 64;            // concurrent HTTP requests per client (= connections)
  double connect_timeout_s = 10.0;  // TCP + TLS handshake
  // A transfer slower than low_speed_limit bytes/s for low_speed_time_s is abandoned and retried:
  // this is what detects a stalled connection.
  long low_speed_limit = 1024;
  double low_speed_time_s = 20.0;
  // A GET (or HEAD) that receives nothing, first byte included, for stall_timeout_s is dropped and
  // retried at once on a new connection. Unlike low_speed_time_s (whole seconds, as libcurl checks
  // it) it may be a fraction of a second: for small objects a stall then costs that, not 1-2 s.
  // 0: off.
  double stall_timeout_s = 0;
  double retry_base_delay_s = 0.05;  // full-jitter backoff: uniform(0, min(max, base * 2^attempt))
  double retry_max_delay_s = 5.0;
  // One request's whole time, its retries included (a GET resumed after a reset counts as one):
  // past it the request fails with kUnavailable. Bounds what the stall detector cannot see, a
  // server that trickles bytes just fast enough. 0: no limit.
  double request_timeout_s = 0;
  bool verify_tls = true;
  std::optional<std::string> ca_bundle;
  // Client::Get and GetMany hold a whole object in memory: a larger one is refused (kTooLarge,
  // before any allocation) with the advice to stream it. 0: half of this machine's memory.
  uint64_t max_get_bytes = 0;
};

struct ResolvedConfig {
  ClientConfig options;   // the caller's knobs (timeouts, attempts, ...)
  std::string endpoint;   // scheme://host[:port], no trailing slash
  bool endpoint_is_aws = true;
  std::string region;
  // The chosen source of the default chain (include/s3stream/credentials.h); null: unsigned requests.
  std::shared_ptr<CredentialsCache> credentials;
  std::string credentials_source;  // "the Client's arguments", "environment", ..., "anonymous", "none"
  bool path_style = false;
};

// Where ResolveConfig reads the environment; tests substitute their own.
struct Environment {
  std::function<std::optional<std::string>(const std::string&)> getenv;
  static Environment Process();
};

Result<ResolvedConfig> ResolveConfig(const ClientConfig& config, const Environment& env = Environment::Process());

}  // namespace s3stream
