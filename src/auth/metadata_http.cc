#include "auth/metadata_http.h"

#include <curl/curl.h>

#include <mutex>

#include "http/ca_bundle.h"
#include "http/user_agent.h"
#include "s3stream/interrupt.h"

namespace s3stream::internal {
namespace {

constexpr size_t kMaxBody = 1 << 20;

struct Exchange {
  std::string body;
  bool too_large = false;
  bool interrupted = false;
};

size_t OnBody(char* data, size_t size, size_t count, void* user) {
  auto* x = static_cast<Exchange*>(user);
  const size_t n = size * count;
  if (x->body.size() + n > kMaxBody) {
    x->too_large = true;
    return 0;  // aborts the transfer
  }
  x->body.append(data, n);
  return n;
}

int OnProgress(void* user, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
  auto* x = static_cast<Exchange*>(user);
  x->interrupted = InterruptRequested();
  return x->interrupted ? 1 : 0;
}

}  // namespace

Result<MetadataResponse> MetadataRequest(const std::string& method, const std::string& url,
                                         const std::vector<std::string>& headers, std::chrono::milliseconds timeout,
                                         const MetadataRequestOptions& options) {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
  CURL* easy = curl_easy_init();
  if (easy == nullptr) return Internal("curl_easy_init failed");
  curl_slist* list = nullptr;
  for (const std::string& h : headers) list = curl_slist_append(list, h.c_str());
  Exchange x;
  const std::string ca_bundle = DefaultCaBundle("");
  curl_easy_setopt(easy, CURLOPT_URL, url.c_str());
  curl_easy_setopt(easy, CURLOPT_CUSTOMREQUEST, method.c_str());
  if (method == "PUT" || method == "POST") {
    curl_easy_setopt(easy, CURLOPT_POST, 1L);
    curl_easy_setopt(easy, CURLOPT_POSTFIELDSIZE, static_cast<long>(options.body.size()));
    curl_easy_setopt(easy, CURLOPT_POSTFIELDS, options.body.c_str());
  }
  curl_easy_setopt(easy, CURLOPT_HTTPHEADER, list);
  curl_easy_setopt(easy, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(easy, CURLOPT_USERAGENT, UserAgent().c_str());
  if (!options.through_proxy) curl_easy_setopt(easy, CURLOPT_NOPROXY, "*");
  curl_easy_setopt(easy, CURLOPT_FOLLOWLOCATION, 0L);
  curl_easy_setopt(easy, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(timeout.count()));
  curl_easy_setopt(easy, CURLOPT_TIMEOUT_MS, static_cast<long>(timeout.count()));
  curl_easy_setopt(easy, CURLOPT_WRITEFUNCTION, OnBody);
  curl_easy_setopt(easy, CURLOPT_WRITEDATA, &x);
  curl_easy_setopt(easy, CURLOPT_NOPROGRESS, 0L);
  curl_easy_setopt(easy, CURLOPT_XFERINFOFUNCTION, OnProgress);
  curl_easy_setopt(easy, CURLOPT_XFERINFODATA, &x);
  if (!ca_bundle.empty()) curl_easy_setopt(easy, CURLOPT_CAINFO, ca_bundle.c_str());
  char error[CURL_ERROR_SIZE] = {0};
  curl_easy_setopt(easy, CURLOPT_ERRORBUFFER, error);
  const CURLcode code = curl_easy_perform(easy);
  long status = 0;
  curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &status);
  curl_easy_cleanup(easy);
  curl_slist_free_all(list);
  if (x.interrupted) return Interrupted(method + " " + url);
  if (x.too_large) return TooLarge(method + " " + url + ": the answer is over " + std::to_string(kMaxBody) + " bytes");
  if (code != CURLE_OK) {
    return Unavailable(method + " " + url + " failed: " + (error[0] ? error : curl_easy_strerror(code)));
  }
  return MetadataResponse{status, std::move(x.body)};
}

}  // namespace s3stream::internal
