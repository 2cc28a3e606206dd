// AWS Signature Version 4 for S3: canonical request, string to sign, signing key, Authorization
// header. S3 differs from other services: the path is signed as sent (no normalisation of `.`, `..`
// or `//`), and each path segment is URI-encoded once.
#pragma once

#include <chrono>
#include <string>
#include <string_view>

#include "http/transport.h"
#include "s3stream/config.h"

namespace s3stream::internal {

// The SHA-256 of an empty body, and the marker for bodies not covered by the signature.
inline constexpr std::string_view kEmptyPayloadSha256 =
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
inline constexpr std::string_view kUnsignedPayload = "UNSIGNED-PAYLOAD";

// RFC 3986 encoding as SigV4 wants it: unreserved characters (A-Z a-z 0-9 - _ . ~) kept, everything
// else %XX with uppercase hex. `keep_slash` keeps '/' (for paths).
std::string UriEncode(std::string_view s, bool keep_slash);

std::string Sha256Hex(std::span<const uint8_t> bytes);
std::string Sha256Hex(std::string_view bytes);
std::string HmacSha256(std::string_view key, std::string_view data);  // raw bytes
std::string HexEncode(std::string_view raw);

// "20150830T123600Z"
std::string AmzDate(std::chrono::system_clock::time_point t);

struct SigningInput {
  std::string method;
  std::string canonical_uri;    // already encoded exactly as it appears in the request line
  std::string query;            // the raw query string as sent (without '?'), encoded
  HttpHeaders headers;          // every header to sign, including host
  std::string payload_hash;     // hex SHA-256 of the body, or kUnsignedPayload
};

struct Signature {
  std::string canonical_request;
  std::string string_to_sign;
  std::string signature;      // hex
  std::string authorization;  // the full Authorization header value
};

class SigV4Signer {
 public:
  SigV4Signer(std::string region, std::string service = "s3") : region_(std::move(region)), service_(std::move(service)) {}

  // Pure: computes the signature for `input` at time `now` (tests pin the time).
  Signature Sign(const SigningInput& input, const Credentials& credentials,
                 std::chrono::system_clock::time_point now) const;

  // Adds x-amz-date, x-amz-content-sha256, x-amz-security-token (if any) and Authorization to
  // `request`, whose url must be absolute and encoded. `payload_hash` as in SigningInput.
  void SignRequest(HttpRequest& request, const Credentials& credentials, std::string_view payload_hash,
                   std::chrono::system_clock::time_point now) const;

 private:
  std::string region_;
  std::string service_;
};

// Canonical query string: split on '&', each name and value decoded then re-encoded with UriEncode,
// sorted by name then value, a missing '=' treated as an empty value.
std::string CanonicalQueryString(std::string_view raw_query);

}  // namespace s3stream::internal
