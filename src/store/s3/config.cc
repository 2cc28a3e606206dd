// ResolveConfig: the AWS SDK conventions for endpoint, region, credentials and addressing style.
// Precedence for each setting: ClientConfig, then environment variables, then the shared files
// (~/.aws/credentials, ~/.aws/config) for the selected profile, then defaults.
//
// An empty string counts as unset everywhere (an exported-but-empty AWS_REGION, or a binding that
// passes "" for "not given"), as the AWS SDKs do for environment variables.
#include <unistd.h>

#include <cctype>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <map>
#include <sstream>
#include <string_view>

#include "auth/default_chain.h"
#include "s3stream/config.h"

namespace s3stream {
namespace internal {
namespace {

constexpr std::string_view kDefaultRegion = "us-east-1";
constexpr std::string_view kDefaultProfile = "default";
constexpr std::string_view kEndpointExample = "e.g. \"http://127.0.0.1:9000\" or \"https://s3.example.com\"";

std::string Trim(std::string_view s) {
  size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string_view::npos) return "";
  size_t e = s.find_last_not_of(" \t\r\n");
  return std::string(s.substr(b, e - b + 1));
}

std::string ToLower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

bool IsAwsHost(const std::string& host) {
  for (std::string_view domain : {"amazonaws.com", "amazonaws.com.cn"}) {
    if (host == domain || EndsWith(host, "." + std::string(domain))) return true;
  }
  return false;
}

std::optional<std::string> NonEmpty(std::optional<std::string> v) {
  if (v && v->empty()) return std::nullopt;
  return v;
}

// section name -> key -> value. A nested block ("s3 =" followed by indented "key = value" lines)
// is stored with dotted keys: "s3.addressing_style".
using IniSections = std::map<std::string, std::map<std::string, std::string>>;

// "[ profile   dev ]" -> "profile dev", so that lookups need not care about spacing.
std::string SectionName(std::string_view raw) {
  std::string name = Trim(raw);
  if (name.starts_with("profile") && name.size() > 7 && (name[7] == ' ' || name[7] == '\t')) {
    name = "profile " + Trim(name.substr(7));
  }
  return name;
}

// The subset of the INI dialect the AWS CLI writes and reads: [section] headers, "key = value",
// full-line comments starting with '#' or ';', inline comments only after whitespace (secrets may
// contain '#' or ';' directly after other characters), and one level of indented sub-section.
IniSections ParseIni(std::istream& in) {
  IniSections sections;
  std::map<std::string, std::string>* section = nullptr;
  std::string nested;  // the key of the open sub-section, "" when none
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    const bool indented = !line.empty() && (line[0] == ' ' || line[0] == '\t');
    std::string text = Trim(line);
    if (text.empty() || text[0] == '#' || text[0] == ';') continue;
    for (size_t i = 1; i < text.size(); ++i) {
      if ((text[i] == '#' || text[i] == ';') && (text[i - 1] == ' ' || text[i - 1] == '\t')) {
        text = Trim(text.substr(0, i));
        break;
      }
    }
    if (text.front() == '[' && text.back() == ']') {
      section = &sections[SectionName(text.substr(1, text.size() - 2))];
      nested.clear();
      continue;
    }
    size_t eq = text.find('=');
    if (section == nullptr || eq == std::string::npos) continue;  // not a setting; the CLI ignores it too
    std::string key = ToLower(Trim(text.substr(0, eq)));
    std::string value = Trim(text.substr(eq + 1));
    if (indented && !nested.empty()) {
      (*section)[nested + "." + key] = value;
      continue;
    }
    nested = value.empty() ? key : "";  // "s3 =" opens a sub-section for the indented lines below
    if (!value.empty()) (*section)[key] = value;
  }
  return sections;
}

// One profile as found in the two shared files.
struct Profile {
  std::string name;
  bool explicitly_named = false;
  std::string credentials_path;
  std::string config_path;
  const std::map<std::string, std::string>* from_credentials = nullptr;  // [name]
  const std::map<std::string, std::string>* from_config = nullptr;       // [profile name] / [default]

  std::optional<std::string> Config(const std::string& key) const {
    if (from_config == nullptr) return std::nullopt;
    auto it = from_config->find(key);
    return it == from_config->end() ? std::nullopt : NonEmpty(it->second);
  }
};

std::string ExpandHome(const std::string& path, const Environment& env) {
  if (path.size() >= 2 && path[0] == '~' && path[1] == '/') {
    if (auto home = NonEmpty(env.getenv("HOME"))) return *home + path.substr(1);
  }
  return path;
}

std::string SharedFilePath(const Environment& env, const char* variable, const char* default_under_home) {
  if (auto v = NonEmpty(env.getenv(variable))) return ExpandHome(*v, env);
  if (auto home = NonEmpty(env.getenv("HOME"))) return *home + "/" + default_under_home;
  return "";
}

IniSections ReadIni(const std::string& path) {
  if (path.empty()) return {};
  std::ifstream in(path);
  return in ? ParseIni(in) : IniSections{};  // a missing file is simply an empty one
}

const std::map<std::string, std::string>* FindSection(const IniSections& ini, const std::string& name) {
  auto it = ini.find(name);
  return it == ini.end() ? nullptr : &it->second;
}

// Finds the profile's sections. The config file names non-default profiles "[profile NAME]"; the
// credentials file uses the bare "[NAME]".
Result<Profile> LoadProfile(const ClientConfig& config, const IniSections& credentials, const IniSections& conf,
                            Profile profile) {
  profile.from_credentials = FindSection(credentials, profile.name);
  profile.from_config = FindSection(conf, "profile " + profile.name);
  if (profile.from_config == nullptr && profile.name == kDefaultProfile) {
    profile.from_config = FindSection(conf, profile.name);
  }
  if (profile.explicitly_named && profile.from_credentials == nullptr && profile.from_config == nullptr) {
    return InvalidArgument("AWS profile '" + profile.name + "' (from " +
                           (config.profile ? "ClientConfig.profile" : "AWS_PROFILE") +
                           ") was not found: looked for [" + profile.name + "] in credentials file '" +
                           profile.credentials_path + "' and [profile " + profile.name + "] in config file '" +
                           profile.config_path + "'");
  }
  return profile;
}

// Credentials from one source: a key id, a secret and maybe a token. `describe(field)` names a
// field for the error when only half of the pair is there (never its value). A token without keys
// is ignored, as the SDKs do: a stale AWS_SESSION_TOKEN must not hide the profile's keys.
using Describe = std::function<std::string(const char* field)>;

Result<std::optional<Credentials>> CredentialPair(std::optional<std::string> key_id,
                                                  std::optional<std::string> secret,
                                                  std::optional<std::string> token, const Describe& describe) {
  key_id = NonEmpty(key_id);
  secret = NonEmpty(secret);
  if (!key_id && !secret) return std::optional<Credentials>();
  if (!key_id || !secret) {
    const char* missing = key_id ? "secret_access_key" : "access_key_id";
    const char* present = key_id ? "access_key_id" : "secret_access_key";
    return InvalidArgument(describe(present) + " is set but " + describe(missing) +
                           " is missing; set both, or neither to use another credential source");
  }
  return std::optional<Credentials>(Credentials{*key_id, *secret, NonEmpty(token).value_or(""), std::nullopt});
}

std::optional<std::string> Lookup(const std::map<std::string, std::string>* section, const std::string& key) {
  if (section == nullptr) return std::nullopt;
  auto it = section->find(key);
  return it == section->end() ? std::nullopt : std::optional<std::string>(it->second);
}

// Signs with `provider` (named in messages by its Describe()).
void Use(ResolvedConfig& out, std::shared_ptr<CredentialsProvider> provider) {
  out.credentials_source = provider->Describe();
  out.credentials = std::make_shared<CredentialsCache>(std::move(provider));
}

// The AWS SDKs' default chain: the first source that applies is used, and a source that is set up
// but broken is an error rather than a silent fall-through to another identity.
Status ResolveCredentials(const ClientConfig& config, const Environment& env, const Profile& profile,
                          const IniSections& credentials_ini, const IniSections& config_ini, ResolvedConfig& out) {
  if (config.anonymous) {
    out.credentials_source = "anonymous";
    return Status::Ok();
  }
  if (config.credentials_provider) {
    Use(out, config.credentials_provider);
    return Status::Ok();
  }
  using Found = Result<std::optional<Credentials>>;
  Found explicit_creds = CredentialPair(config.access_key_id, config.secret_access_key, config.session_token,
                                        [](const char* f) { return std::string("ClientConfig.") + f; });
  if (!explicit_creds.ok()) return explicit_creds.status();
  if (explicit_creds.value()) {
    Use(out, StaticCredentials(*explicit_creds.value(), "the Client's arguments"));
    return Status::Ok();
  }

  Found env_creds = CredentialPair(env.getenv("AWS_ACCESS_KEY_ID"), env.getenv("AWS_SECRET_ACCESS_KEY"),
                                   env.getenv("AWS_SESSION_TOKEN"), [](const char* f) {
                                     std::string var = std::string("AWS_") + f;
                                     for (char& c : var) c = static_cast<char>(std::toupper(c));
                                     return var;
                                   });
  if (!env_creds.ok()) return env_creds.status();
  // A profile named in the code (not AWS_PROFILE) is what the caller asked for: the environment's keys
  // do not shadow it, as in botocore (they may still be its role's credential_source).
  if (env_creds.value() && !NonEmpty(config.profile)) {
    Use(out, StaticCredentials(*env_creds.value(), "environment"));
    return Status::Ok();
  }

  // A profile's sections: [NAME] in the credentials file, [profile NAME] ([default]) in the config file.
  auto sections = [&](const std::string& name) {
    const auto* in_config = FindSection(config_ini, name == kDefaultProfile ? name : "profile " + name);
    return std::make_pair(FindSection(credentials_ini, name), in_config);
  };
  ChainInputs chain{env, out.region, profile.name, profile.config_path, nullptr, nullptr};
  chain.setting_of = [&](const std::string& name, const std::string& key) {
    auto [from_credentials, from_config] = sections(name);
    auto v = NonEmpty(Lookup(from_config, key));
    return v ? v : NonEmpty(Lookup(from_credentials, key));
  };
  // The credentials file wins over the config file; the triple is taken from one file, never mixed,
  // so a stale token in one cannot be paired with keys from the other.
  chain.static_keys_of = [&](const std::string& name) -> Found {
    auto [from_credentials, from_config] = sections(name);
    const std::pair<const std::map<std::string, std::string>*, const std::string*> files[] = {
        {from_credentials, &profile.credentials_path}, {from_config, &profile.config_path}};
    for (const auto& [section, path] : files) {
      Found found = CredentialPair(Lookup(section, "aws_access_key_id"), Lookup(section, "aws_secret_access_key"),
                                   Lookup(section, "aws_session_token"), [&, path = path](const char* f) {
                                     return "aws_" + std::string(f) + " in profile '" + name + "' of '" + *path + "'";
                                   });
      if (!found.ok() || found.value()) return found;
    }
    return std::optional<Credentials>();
  };
  S3S_ASSIGN_OR_RETURN(std::shared_ptr<CredentialsProvider> web_identity, WebIdentitySource(chain));
  if (web_identity) {
    Use(out, web_identity);
    return Status::Ok();
  }
  for (auto source : {ProfileSource, MachineSource}) {
    S3S_ASSIGN_OR_RETURN(std::shared_ptr<CredentialsProvider> provider, source(chain));
    if (provider) {
      Use(out, provider);
      return Status::Ok();
    }
  }
  out.credentials_source = "none";  // the S3 driver explains what to set when a request needs them
  return Status::Ok();
}

// Validates a custom endpoint and reduces it to scheme://host[:port][/path] without a trailing '/'.
Status ResolveEndpoint(std::string endpoint, const std::string& source, ResolvedConfig& out) {
  const std::string given = endpoint;
  while (!endpoint.empty() && endpoint.back() == '/') endpoint.pop_back();
  size_t sep = endpoint.find("://");
  std::string scheme = sep == std::string::npos ? "" : ToLower(endpoint.substr(0, sep));
  if (scheme != "http" && scheme != "https") {
    return InvalidArgument("endpoint_url '" + given + "' (from " + source +
                           ") must start with http:// or https://, " + std::string(kEndpointExample));
  }
  std::string rest = endpoint.substr(sep + 3);
  std::string authority = rest.substr(0, rest.find_first_of("/?#"));
  if (const size_t at = authority.rfind('@'); at != std::string::npos) {
    // Never repeated back: it may hold a password (and S3 signs with access keys, not these).
    return InvalidArgument("endpoint_url '" + scheme + "://***@" + rest.substr(at + 1) + "' (from " + source +
                           ") carries a user name or password; pass credentials as access_key_id and "
                           "secret_access_key instead");
  }
  if (authority.empty() || rest.find_first_of("?#") != std::string::npos) {
    return InvalidArgument("endpoint_url '" + given + "' (from " + source +
                           ") must be scheme://host[:port] with no query, " + std::string(kEndpointExample));
  }
  std::string host = authority;
  if (size_t colon = host.rfind(':'); colon != std::string::npos && host.find(']', colon) == std::string::npos) {
    host.resize(colon);
  }
  host = ToLower(host);
  out.endpoint = scheme + "://" + rest;
  out.endpoint_is_aws = IsAwsHost(host);
  return Status::Ok();
}

Status ValidateOptions(const ClientConfig& c) {
  auto bad = [](const char* what, double got) {
    std::ostringstream text;  // "0", "0.5", "1e+12": not std::to_string's "0.000000"
    text << what << ", got " << got;
    return InvalidArgument(text.str());
  };
  // Comparisons are written so that NaN fails them.
  if (c.max_attempts < 1) return bad("max_attempts must be >= 1 (1 means no retries)", c.max_attempts);
  if (c.max_inflight < 1) return bad("max_inflight must be >= 1", c.max_inflight);
  if (!(c.connect_timeout_s > 0)) return bad("connect_timeout_s must be > 0", c.connect_timeout_s);
  if (!(c.low_speed_time_s > 0)) return bad("low_speed_time_s must be > 0", c.low_speed_time_s);
  if (!(c.stall_timeout_s >= 0) || c.stall_timeout_s > 86400) {
    return bad("stall_timeout_s must be 0 (off) or a number of seconds up to a day", c.stall_timeout_s);
  }
  if (c.low_speed_limit < 0) return bad("low_speed_limit must be >= 0 bytes/s", c.low_speed_limit);
  if (!(c.retry_base_delay_s >= 0)) return bad("retry_base_delay_s must be >= 0", c.retry_base_delay_s);
  if (!(c.request_timeout_s >= 0)) return bad("request_timeout_s must be >= 0 (0: no limit)", c.request_timeout_s);
  if (!(c.retry_max_delay_s >= c.retry_base_delay_s)) {
    return bad("retry_max_delay_s must be >= retry_base_delay_s", c.retry_max_delay_s);
  }
  return Status::Ok();
}

// The first of several candidate settings that is set, and where it came from (for messages).
struct Setting {
  std::string value;
  std::string source;
};

std::optional<Setting> FirstSet(std::initializer_list<std::pair<std::optional<std::string>, std::string>> candidates) {
  for (const auto& [value, source] : candidates) {
    if (auto v = NonEmpty(value)) return Setting{*v, source};
  }
  return std::nullopt;
}

// The default of ClientConfig::max_get_bytes.
uint64_t HalfOfMemory() {
  const long pages = ::sysconf(_SC_PHYS_PAGES);
  const long page = ::sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page <= 0) return uint64_t{4} << 30;  // unknown: 4 GiB
  return static_cast<uint64_t>(pages) * static_cast<uint64_t>(page) / 2;
}

}  // namespace
}  // namespace internal

Environment Environment::Process() {
  return Environment{[](const std::string& name) -> std::optional<std::string> {
    const char* v = std::getenv(name.c_str());
    return v == nullptr ? std::nullopt : std::optional<std::string>(v);
  }};
}

Result<ResolvedConfig> ResolveConfig(const ClientConfig& config, const Environment& env) {
  using namespace internal;
  S3S_RETURN_IF_ERROR(ValidateOptions(config));
  ResolvedConfig out;
  out.options = config;
  if (out.options.max_get_bytes == 0) out.options.max_get_bytes = HalfOfMemory();

  Profile profile;
  std::optional<std::string> named = NonEmpty(config.profile);
  if (!named) named = NonEmpty(env.getenv("AWS_PROFILE"));
  profile.explicitly_named = named.has_value();
  profile.name = named.value_or(std::string(kDefaultProfile));
  profile.credentials_path = SharedFilePath(env, "AWS_SHARED_CREDENTIALS_FILE", ".aws/credentials");
  profile.config_path = SharedFilePath(env, "AWS_CONFIG_FILE", ".aws/config");
  const IniSections credentials_ini = ReadIni(profile.credentials_path);
  const IniSections config_ini = ReadIni(profile.config_path);
  S3S_ASSIGN_OR_RETURN(profile, LoadProfile(config, credentials_ini, config_ini, std::move(profile)));

  const std::string in_profile = "profile '" + profile.name + "' of '" + profile.config_path + "'";
  out.region = FirstSet({{config.region, "ClientConfig.region"},
                         {env.getenv("AWS_REGION"), "AWS_REGION"},
                         {env.getenv("AWS_DEFAULT_REGION"), "AWS_DEFAULT_REGION"},
                         {profile.Config("region"), "region in " + in_profile}})
                   .value_or(Setting{std::string(kDefaultRegion), "default"})
                   .value;

  // The S3-specific endpoint beats the global one at each level, as in the SDKs.
  std::optional<Setting> endpoint = FirstSet({{config.endpoint_url, "ClientConfig.endpoint_url"},
                                              {env.getenv("AWS_ENDPOINT_URL_S3"), "AWS_ENDPOINT_URL_S3"},
                                              {env.getenv("AWS_ENDPOINT_URL"), "AWS_ENDPOINT_URL"},
                                              {profile.Config("s3.endpoint_url"), "s3.endpoint_url in " + in_profile},
                                              {profile.Config("endpoint_url"), "endpoint_url in " + in_profile}});
  if (endpoint) {
    S3S_RETURN_IF_ERROR(ResolveEndpoint(endpoint->value, endpoint->source, out));
  } else {
    const bool china = out.region.starts_with("cn-");
    out.endpoint = "https://s3." + out.region + (china ? ".amazonaws.com.cn" : ".amazonaws.com");
    out.endpoint_is_aws = true;
  }

  // Addressing style: ClientConfig's kAuto defers to the profile's s3.addressing_style.
  AddressingStyle style = config.addressing_style;
  if (style == AddressingStyle::kAuto) {
    if (auto v = profile.Config("s3.addressing_style")) {
      std::string s = ToLower(*v);
      if (s == "path") style = AddressingStyle::kPath;
      else if (s == "virtual") style = AddressingStyle::kVirtual;
      else if (s != "auto") {
        return InvalidArgument("s3.addressing_style = '" + *v + "' in " + in_profile +
                               " is not one of: path, virtual, auto");
      }
    }
  }
  // Custom stores (MinIO, Ceph, moto) rarely have wildcard DNS for bucket subdomains.
  out.path_style = style == AddressingStyle::kPath || (style == AddressingStyle::kAuto && !out.endpoint_is_aws);

  // The CA bundle: the AWS CLI's and SDKs' variable and profile key (unset: the system's bundle).
  // The CA bundle: as the AWS SDKs (AWS_CA_BUNDLE, the profile's ca_bundle), then OpenSSL's and
  // curl's variables; unset: the system's bundle. A named file must exist.
  if (auto ca = FirstSet({{config.ca_bundle, "ClientConfig.ca_bundle"},
                          {env.getenv("AWS_CA_BUNDLE"), "AWS_CA_BUNDLE"},
                          {profile.Config("ca_bundle"), "ca_bundle in " + in_profile},
                          {env.getenv("SSL_CERT_FILE"), "SSL_CERT_FILE"},
                          {env.getenv("CURL_CA_BUNDLE"), "CURL_CA_BUNDLE"}})) {
    std::ifstream probe(ca->value);
    if (!probe) {
      return InvalidArgument("the CA bundle '" + ca->value + "' (from " + ca->source +
                             ") cannot be read; name an existing PEM file, or unset it to use the system's");
    }
    out.options.ca_bundle = ca->value;
  }

  S3S_RETURN_IF_ERROR(ResolveCredentials(config, env, profile, credentials_ini, config_ini, out));
  return out;
}

}  // namespace s3stream
