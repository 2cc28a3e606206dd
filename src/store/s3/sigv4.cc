#include "store/s3/sigv4.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <algorithm>
#include <cctype>
#include <ctime>
#include <map>
#include <vector>

namespace s3stream::internal {
namespace {

constexpr std::string_view kAlgorithm = "AWS4-HMAC-SHA256";
constexpr char kUpperHex[] = "0123456789ABCDEF";

// Explicit ASCII ranges, not std::isalnum: the Python host may set a locale in which bytes above
// 0x7F count as letters, and those must always be encoded.
bool IsUnreserved(unsigned char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_' ||
         c == '.' || c == '~';
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Decodes %XX escapes only. '+' stays '+': SigV4 is not form encoding, and a '+' in a query we
// built ourselves never stands for a space. A malformed escape is kept literally (and later
// re-encoded as %25) rather than guessed at.
std::string PercentDecode(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size()) {
      int hi = HexValue(s[i + 1]);
      int lo = HexValue(s[i + 2]);
      if (hi >= 0 && lo >= 0) {
        out.push_back(static_cast<char>(hi * 16 + lo));
        i += 2;
        continue;
      }
    }
    out.push_back(s[i]);
  }
  return out;
}

std::string ToLower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

// Trims, and collapses every run of whitespace (including the line breaks of a folded multi-line
// value) into one space, as the canonical header form requires.
std::string CanonicalHeaderValue(std::string_view v) {
  std::string out;
  bool pending_space = false;
  for (char c : v) {
    if (IsSpace(c)) {
      pending_space = !out.empty();
      continue;
    }
    if (pending_space) out.push_back(' ');
    pending_space = false;
    out.push_back(c);
  }
  return out;
}

bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  return a.size() == b.size() &&
         std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
         });
}

void RemoveHeader(HttpHeaders& headers, std::string_view name) {
  std::erase_if(headers, [&](const auto& h) { return EqualsIgnoreCase(h.first, name); });
}

// The parts of an absolute URL that signing needs.
struct UrlParts {
  std::string host_header;  // host[:port], the port omitted when it is the scheme's default
  std::string path;         // as written, "/" when absent
  std::string query;        // without '?'
};

UrlParts SplitUrl(std::string_view url) {
  UrlParts parts;
  std::string_view scheme;
  if (size_t p = url.find("://"); p != std::string_view::npos) {
    scheme = url.substr(0, p);
    url.remove_prefix(p + 3);
  }
  if (size_t hash = url.find('#'); hash != std::string_view::npos) url = url.substr(0, hash);
  size_t authority_end = url.find_first_of("/?");
  std::string_view authority = url.substr(0, authority_end);
  std::string_view rest = authority_end == std::string_view::npos ? "" : url.substr(authority_end);

  // The port follows the last ':' that is not inside an IPv6 literal ("[::1]:9000").
  size_t bracket = authority.rfind(']');
  size_t colon = authority.rfind(':');
  if (colon != std::string_view::npos && (bracket == std::string_view::npos || colon > bracket)) {
    std::string_view port = authority.substr(colon + 1);
    bool default_port = port.empty() || (EqualsIgnoreCase(scheme, "http") && port == "80") ||
                        (EqualsIgnoreCase(scheme, "https") && port == "443");
    // HTTP clients (libcurl included) leave a default port out of the Host header they send.
    if (default_port) authority = authority.substr(0, colon);
  }
  parts.host_header = std::string(authority);  // as sent: header values keep their case

  size_t q = rest.find('?');
  parts.path = std::string(rest.substr(0, q));
  if (parts.path.empty()) parts.path = "/";
  if (q != std::string_view::npos) parts.query = std::string(rest.substr(q + 1));
  return parts;
}

std::string DeriveSigningKey(std::string_view secret, std::string_view date, std::string_view region,
                             std::string_view service) {
  std::string key = HmacSha256("AWS4" + std::string(secret), date);
  key = HmacSha256(key, region);
  key = HmacSha256(key, service);
  return HmacSha256(key, "aws4_request");
}

}  // namespace

std::string UriEncode(std::string_view s, bool keep_slash) {
  std::string out;
  out.reserve(s.size() * 3 / 2);
  for (char ch : s) {
    auto c = static_cast<unsigned char>(ch);
    if (IsUnreserved(c) || (keep_slash && c == '/')) {
      out.push_back(ch);
    } else {
      out.push_back('%');
      out.push_back(kUpperHex[c >> 4]);
      out.push_back(kUpperHex[c & 0xF]);
    }
  }
  return out;
}

std::string HexEncode(std::string_view raw) {
  static constexpr char kLowerHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(raw.size() * 2);
  for (char ch : raw) {
    auto c = static_cast<unsigned char>(ch);
    out.push_back(kLowerHex[c >> 4]);
    out.push_back(kLowerHex[c & 0xF]);
  }
  return out;
}

std::string Sha256Hex(std::span<const uint8_t> bytes) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(bytes.data(), bytes.size(), digest, &len, EVP_sha256(), nullptr);
  return HexEncode(std::string_view(reinterpret_cast<const char*>(digest), len));
}

std::string Sha256Hex(std::string_view bytes) {
  return Sha256Hex(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()));
}

std::string HmacSha256(std::string_view key, std::string_view data) {
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
       reinterpret_cast<const unsigned char*>(data.data()), data.size(), mac, &len);
  return std::string(reinterpret_cast<const char*>(mac), len);
}

std::string AmzDate(std::chrono::system_clock::time_point t) {
  std::time_t secs = std::chrono::system_clock::to_time_t(t);
  std::tm utc{};
  gmtime_r(&secs, &utc);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y%m%dT%H%M%SZ", &utc);
  return buf;
}

std::string CanonicalQueryString(std::string_view raw_query) {
  std::vector<std::pair<std::string, std::string>> params;
  while (!raw_query.empty()) {
    size_t amp = raw_query.find('&');
    std::string_view item = raw_query.substr(0, amp);
    raw_query = amp == std::string_view::npos ? "" : raw_query.substr(amp + 1);
    if (item.empty()) continue;  // "a&&b": no parameter between the ampersands
    size_t eq = item.find('=');
    std::string_view name = item.substr(0, eq);
    std::string_view value = eq == std::string_view::npos ? "" : item.substr(eq + 1);
    // Decoding first makes the result the same whether the caller sent "ሴ" or "%E1%88%B4".
    params.emplace_back(UriEncode(PercentDecode(name), false), UriEncode(PercentDecode(value), false));
  }
  // Sorted by the encoded bytes, which is what the server compares.
  std::sort(params.begin(), params.end());
  std::string out;
  for (const auto& [name, value] : params) {
    if (!out.empty()) out.push_back('&');
    out += name;
    out.push_back('=');
    out += value;
  }
  return out;
}

Signature SigV4Signer::Sign(const SigningInput& input, const Credentials& credentials,
                            std::chrono::system_clock::time_point now) const {
  // Group by lowercase name; repeated headers keep their order and are joined with ','.
  std::map<std::string, std::string> canonical_headers;
  for (const auto& [name, value] : input.headers) {
    std::string& joined = canonical_headers[ToLower(name)];
    if (!joined.empty()) joined.push_back(',');
    joined += CanonicalHeaderValue(value);
  }
  std::string headers_block;
  std::string signed_headers;
  for (const auto& [name, value] : canonical_headers) {
    headers_block += name + ":" + value + "\n";
    if (!signed_headers.empty()) signed_headers.push_back(';');
    signed_headers += name;
  }

  Signature sig;
  sig.canonical_request = input.method + "\n" + input.canonical_uri + "\n" + CanonicalQueryString(input.query) +
                          "\n" + headers_block + "\n" + signed_headers + "\n" + input.payload_hash;

  const std::string amz_date = AmzDate(now);
  const std::string date = amz_date.substr(0, 8);
  const std::string scope = date + "/" + region_ + "/" + service_ + "/aws4_request";
  sig.string_to_sign = std::string(kAlgorithm) + "\n" + amz_date + "\n" + scope + "\n" +
                       Sha256Hex(sig.canonical_request);

  const std::string key = DeriveSigningKey(credentials.secret_access_key, date, region_, service_);
  sig.signature = HexEncode(HmacSha256(key, sig.string_to_sign));
  sig.authorization = std::string(kAlgorithm) + " Credential=" + credentials.access_key_id + "/" + scope +
                      ", SignedHeaders=" + signed_headers + ", Signature=" + sig.signature;
  return sig;
}

void SigV4Signer::SignRequest(HttpRequest& request, const Credentials& credentials,
                              std::string_view payload_hash, std::chrono::system_clock::time_point now) const {
  // A retry re-signs the same request with a fresh time: drop what an earlier signing added.
  for (std::string_view name : {"authorization", "x-amz-date", "x-amz-content-sha256", "x-amz-security-token"}) {
    RemoveHeader(request.headers, name);
  }
  request.headers.emplace_back("x-amz-date", AmzDate(now));
  request.headers.emplace_back("x-amz-content-sha256", std::string(payload_hash));
  if (!credentials.session_token.empty()) {
    request.headers.emplace_back("x-amz-security-token", credentials.session_token);
  }

  UrlParts url = SplitUrl(request.url);
  SigningInput input;
  input.method = request.method;
  input.canonical_uri = url.path;  // S3: signed exactly as sent, no normalisation
  input.query = url.query;
  input.payload_hash = std::string(payload_hash);
  // The transport sends Host from the URL; sign that unless the caller set one explicitly.
  if (FindHeader(request.headers, "host") == nullptr) input.headers.emplace_back("host", url.host_header);
  for (const auto& header : request.headers) {
    // libcurl reads "Name:" with an empty value as "do not send Name", so an empty header may never
    // reach the server; signing it would then break the signature.
    if (header.second.empty()) continue;
    input.headers.push_back(header);
  }
  request.headers.emplace_back("Authorization", Sign(input, credentials, now).authorization);
}

}  // namespace s3stream::internal
