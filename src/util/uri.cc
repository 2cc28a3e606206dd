#include "s3stream/uri.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <system_error>

namespace s3stream {
namespace {

constexpr std::string_view kForms =
    "expected s3://bucket/key, file:///absolute/path or a local path, e.g. s3://my-bucket/train/0001.tar";

Status BadUri(std::string_view uri, const std::string& why) {
  return InvalidArgument("invalid URI '" + std::string(uri) + "': " + why + "; " + std::string(kForms));
}

// RFC 3986: scheme = ALPHA *( ALPHA / DIGIT / "+" / "-" / "." ). Only a well-formed scheme before
// "://" makes a URI; anything else ("dir/a://b") is a relative path.
// ASCII only, whatever the process locale.
bool IsAsciiAlpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
bool IsAsciiDigit(char c) { return c >= '0' && c <= '9'; }

bool IsScheme(std::string_view s) {
  if (s.empty() || !IsAsciiAlpha(s[0])) return false;
  for (char c : s) {
    if (!IsAsciiAlpha(c) && !IsAsciiDigit(c) && c != '+' && c != '-' && c != '.') return false;
  }
  return true;
}

std::string ToLower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// "192.168.0.1": four dot-separated groups of 1-3 digits.
bool LooksLikeIpv4(std::string_view s) {
  int groups = 0;
  size_t digits = 0;
  for (char c : s) {
    if (c == '.') {
      if (digits == 0) return false;
      ++groups;
      digits = 0;
    } else if (IsAsciiDigit(c) && digits < 3) {
      ++digits;
    } else {
      return false;
    }
  }
  return digits > 0 && groups == 3;
}

Result<ObjectUri> LocalFile(std::string_view uri, std::string_view path) {
  namespace fs = std::filesystem;
  fs::path p(path);
  if (p.is_relative()) {
    std::error_code ec;
    fs::path cwd = fs::current_path(ec);
    if (ec) return BadUri(uri, "relative path, and the working directory is unknown (" + ec.message() + ")");
    p = cwd / p;
  }
  // Lexical only: the file need not exist yet (writers), and symlinks are the user's business.
  std::string normal = p.lexically_normal().string();
  ObjectUri out;
  out.scheme = "file";
  // Drop every leading '/': the store root is "/". lexically_normal keeps a leading "//" (POSIX
  // lets it mean something else; on Linux it is "/"), which would leave a key the store refuses.
  out.key = normal.substr(std::min(normal.size(), normal.find_first_not_of('/')));
  return out;
}

}  // namespace

Result<ObjectUri> ObjectUri::Parse(std::string_view uri) {
  if (uri.empty()) return BadUri(uri, "empty");
  size_t sep = uri.find("://");
  if (sep == std::string_view::npos || !IsScheme(uri.substr(0, sep))) {
    // "s3:/bucket/key", "s3:bucket/key": a mistyped URI, not a relative path to a directory "s3:".
    size_t colon = uri.find(':');
    if (colon != std::string_view::npos && IsScheme(uri.substr(0, colon)) &&
        uri.substr(0, colon).find('/') == std::string_view::npos) {
      return BadUri(uri, "'" + ToLower(uri.substr(0, colon)) + ":' must be followed by '//'");
    }
    return LocalFile(uri, uri);
  }

  const std::string scheme = ToLower(uri.substr(0, sep));
  std::string_view rest = uri.substr(sep + 3);
  if (scheme == "file") {
    // file:///abs/path, or file://localhost/abs/path; any other host names another machine.
    if (rest.starts_with("localhost/")) rest.remove_prefix(9);
    if (!rest.starts_with("/")) return BadUri(uri, "a file URI needs an absolute path, as in file:///data/x");
    return LocalFile(uri, rest);
  }
  size_t slash = rest.find('/');
  std::string_view bucket = rest.substr(0, slash);
  if (bucket.empty()) return BadUri(uri, "the bucket name is missing");
  if (scheme == "s3") {
    Status valid = ValidateBucketName(bucket);
    if (!valid.ok()) return BadUri(uri, valid.message());
  }
  ObjectUri out;
  out.scheme = scheme;
  out.bucket = std::string(bucket);
  // Verbatim: '%', '+', spaces and unicode are part of the key; encoding happens per request.
  if (slash != std::string_view::npos) out.key = std::string(rest.substr(slash + 1));
  return out;
}

std::string ObjectUri::ToString() const {
  if (scheme == "file") return "file:///" + key;
  return scheme + "://" + bucket + "/" + key;
}

ObjectUri ObjectUri::WithKey(std::string new_key) const {
  ObjectUri out = *this;
  out.key = std::move(new_key);
  return out;
}

// AWS's rules for new buckets, with one deliberate relaxation: '_' is accepted. Buckets created
// in us-east-1 before 2018 may contain it, and S3-compatible stores (Ceph, older MinIO) allow it;
// rejecting it here would lock those users out while S3 itself rejects truly invalid names anyway.
Status ValidateBucketName(std::string_view bucket) {
  const std::string quoted = "bucket name '" + std::string(bucket) + "'";
  if (bucket.size() < 3 || bucket.size() > 63) {
    return InvalidArgument(quoted + " must be 3 to 63 characters long (it has " + std::to_string(bucket.size()) + ")");
  }
  for (char c : bucket) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '-' || c == '_';
    if (!ok) {
      return InvalidArgument(quoted + " may contain only lowercase letters, digits, '.', '-' and '_' (found '" +
                             std::string(1, c) + "')");
    }
  }
  auto alnum = [](char c) { return IsAsciiDigit(c) || (c >= 'a' && c <= 'z'); };
  if (!alnum(bucket.front()) || !alnum(bucket.back())) {
    return InvalidArgument(quoted + " must start and end with a lowercase letter or digit");
  }
  if (bucket.find("..") != std::string_view::npos) {
    return InvalidArgument(quoted + " must not contain two adjacent periods");
  }
  if (LooksLikeIpv4(bucket)) return InvalidArgument(quoted + " must not be formatted as an IP address");
  return Status::Ok();
}

}  // namespace s3stream
