#include "auth/credentials_json.h"

#include <ctime>
#include <nlohmann/json.hpp>

namespace s3stream::internal {
namespace {

bool Digits(std::string_view s, size_t at, size_t n) {
  if (at + n > s.size()) return false;
  for (size_t i = at; i < at + n; ++i) {
    if (s[i] < '0' || s[i] > '9') return false;
  }
  return true;
}

int Number(std::string_view s, size_t at, size_t n) {
  int v = 0;
  for (size_t i = at; i < at + n; ++i) v = v * 10 + (s[i] - '0');
  return v;
}

}  // namespace

Result<WallClock::time_point> ParseRfc3339(std::string_view t) {
  // YYYY-MM-DDTHH:MM:SS[.fff][Z|+HH:MM|-HH:MM]
  const Status bad = InvalidArgument("'" + std::string(t.substr(0, 64)) + "' is not an RFC 3339 time");
  if (!Digits(t, 0, 4) || t.size() < 19 || t[4] != '-' || !Digits(t, 5, 2) || t[7] != '-' || !Digits(t, 8, 2) ||
      (t[10] != 'T' && t[10] != 't' && t[10] != ' ') || !Digits(t, 11, 2) || t[13] != ':' || !Digits(t, 14, 2) ||
      t[16] != ':' || !Digits(t, 17, 2)) {
    return bad;
  }
  std::tm tm{};
  tm.tm_year = Number(t, 0, 4) - 1900;
  tm.tm_mon = Number(t, 5, 2) - 1;
  tm.tm_mday = Number(t, 8, 2);
  tm.tm_hour = Number(t, 11, 2);
  tm.tm_min = Number(t, 14, 2);
  tm.tm_sec = Number(t, 17, 2);
  if (tm.tm_mon > 11 || tm.tm_mday < 1 || tm.tm_mday > 31 || tm.tm_hour > 23 || tm.tm_min > 59 || tm.tm_sec > 60) {
    return bad;
  }
  size_t i = 19;
  if (i < t.size() && t[i] == '.') {
    ++i;
    while (i < t.size() && t[i] >= '0' && t[i] <= '9') ++i;  // sub-second: dropped (refresh is minutes ahead)
  }
  long offset = 0;
  if (i < t.size() && (t[i] == 'Z' || t[i] == 'z')) {
    ++i;
  } else if (i < t.size() && (t[i] == '+' || t[i] == '-') && Digits(t, i + 1, 2) && i + 3 < t.size() &&
             t[i + 3] == ':' && Digits(t, i + 4, 2)) {
    offset = (t[i] == '-' ? -1 : 1) * (Number(t, i + 1, 2) * 3600L + Number(t, i + 4, 2) * 60L);
    i += 6;
  } else {
    return bad;
  }
  if (i != t.size()) return bad;
  const std::time_t utc = timegm(&tm);
  return WallClock::from_time_t(utc - offset);
}

Result<Credentials> ParseCredentialsJson(std::string_view body, CredentialsDocument kind, const std::string& source) {
  const std::string where = "the credentials from " + source;
  nlohmann::json doc = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object()) {
    return InvalidArgument(where + " are not a JSON object (" + std::to_string(body.size()) + " bytes)");
  }
  auto text = [&](const char* field) -> std::optional<std::string> {
    auto it = doc.find(field);
    if (it == doc.end() || !it->is_string()) return std::nullopt;
    return it->get<std::string>();
  };
  if (kind == CredentialsDocument::kProcess) {
    auto version = doc.find("Version");
    if (version == doc.end() || !version->is_number_integer() || version->get<long long>() != 1) {
      return InvalidArgument(where + " need \"Version\": 1 (the credential_process output format)");
    }
  } else if (auto code = text("Code"); code && *code != "Success") {
    return PermissionDenied(where + " were refused: Code " + code->substr(0, 100));
  }
  Credentials out;
  auto key = text("AccessKeyId");
  auto secret = text("SecretAccessKey");
  if (!key || key->empty() || !secret || secret->empty()) {
    return InvalidArgument(where + " lack " + (!key || key->empty() ? "AccessKeyId" : "SecretAccessKey") +
                           " (a non-empty string)");
  }
  out.access_key_id = *key;
  out.secret_access_key = *secret;
  out.session_token = text(kind == CredentialsDocument::kProcess ? "SessionToken" : "Token").value_or("");
  if (auto it = doc.find("Expiration"); it != doc.end() && !it->is_null()) {
    if (!it->is_string()) return InvalidArgument(where + " have an Expiration that is not a string");
    Result<WallClock::time_point> when = ParseRfc3339(it->get<std::string>());
    if (!when.ok()) return InvalidArgument(where + ": Expiration " + when.status().message());
    out.expiration = *when;
  }  // none: kept until the process ends, as the SDKs do
  return out;
}

}  // namespace s3stream::internal
