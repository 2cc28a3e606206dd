// libFuzzer target for ObjectUri::Parse and ValidateBucketName (util/uri.cc): the input is what a
// user typed. Besides the sanitizers, it checks:
// - a URI that parses has a lower-case RFC 3986 scheme; an s3 one a bucket that passes the naming
//   rules; a file one no bucket and a key without a leading '/' (the store root is "/");
// - ToString() parses back to the same scheme, bucket and key, and so does WithKey(any key) for
//   non-file schemes (keys are verbatim: '%', '+', "..", unicode);
// - a refused URI is InvalidArgument and quotes what was typed;
// - ValidateBucketName agrees with an independent reading of S3's naming rules.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "s3stream/uri.h"

namespace {

using namespace s3stream;

void Check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "uri_fuzz: property violated: %s\n", what);
    std::abort();
  }
}

bool Lower(char c) { return c >= 'a' && c <= 'z'; }
bool Digit(char c) { return c >= '0' && c <= '9'; }

// S3's rules as documented (3-63 of a-z 0-9 . - and, relaxed here, _; alphanumeric ends; no "..";
// not an IPv4 address), written out separately from uri.cc.
bool ReferenceBucketOk(std::string_view b) {
  if (b.size() < 3 || b.size() > 63) return false;
  for (char c : b) {
    if (!Lower(c) && !Digit(c) && c != '.' && c != '-' && c != '_') return false;
  }
  if (!(Lower(b.front()) || Digit(b.front())) || !(Lower(b.back()) || Digit(b.back()))) return false;
  if (b.find("..") != b.npos) return false;
  // IPv4: exactly four dot-separated groups of 1-3 digits.
  int groups = 1;
  size_t run = 0;
  bool ipv4 = true;
  for (char c : b) {
    if (c == '.') {
      ipv4 = ipv4 && run > 0;
      run = 0;
      ++groups;
    } else {
      ipv4 = ipv4 && Digit(c) && ++run <= 3;
    }
  }
  ipv4 = ipv4 && run > 0 && groups == 4;
  return !ipv4;
}

void CheckSame(const ObjectUri& a, const Result<ObjectUri>& b, const char* what) {
  Check(b.ok() && b->scheme == a.scheme && b->bucket == a.bucket && b->key == a.key, what);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  Check(ValidateBucketName(text).ok() == ReferenceBucketOk(text), "bucket rules agree with the reference");

  Result<ObjectUri> uri = ObjectUri::Parse(text);
  if (!uri.ok()) {
    Check(uri.status().code() == StatusCode::kInvalidArgument, "a refused URI is InvalidArgument");
    Check(uri.status().message().find("invalid URI '" + std::string(text) + "'") != std::string::npos,
          "a refused URI is quoted in the message");
    return 0;
  }
  Check(!uri->scheme.empty() && Lower(uri->scheme[0]), "the scheme starts with a lower-case letter");
  for (char c : uri->scheme) {
    Check(Lower(c) || Digit(c) || c == '+' || c == '-' || c == '.', "the scheme is lower-case RFC 3986");
  }
  if (uri->scheme == "file") {
    Check(uri->bucket.empty(), "a file URI has no bucket");
    Check(!uri->key.starts_with("/"), "a file key is relative to the root");
  } else {
    Check(!uri->bucket.empty() && uri->bucket.find('/') == std::string::npos, "a bucket is one path segment");
    if (uri->scheme == "s3") Check(ReferenceBucketOk(uri->bucket), "an s3 bucket follows the naming rules");
  }
  CheckSame(*uri, ObjectUri::Parse(uri->ToString()), "ToString() parses back to the same URI");

  if (uri->scheme != "file") {
    // A listed key, whatever it holds, comes back as itself.
    std::string key(text.substr(text.size() / 2));
    ObjectUri other = uri->WithKey(key);
    Check(other.key == key, "WithKey sets the key");
    CheckSame(other, ObjectUri::Parse(other.ToString()), "WithKey(any key) parses back to the same URI");
  }
  return 0;
}
