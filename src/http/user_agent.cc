#include "http/user_agent.h"

#include <curl/curl.h>

namespace s3stream::internal {

const std::string& UserAgent() {
  static const std::string agent = std::string("s3stream/") + S3STREAM_VERSION + " libcurl/" +
                                   curl_version_info(CURLVERSION_NOW)->version;
  return agent;
}

}  // namespace s3stream::internal
