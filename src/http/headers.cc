#include <strings.h>

#include "http/transport.h"

namespace s3stream::internal {

const std::string* FindHeader(const HttpHeaders& headers, std::string_view name) {
  for (const auto& [key, value] : headers) {
    if (key.size() == name.size() && strncasecmp(key.data(), name.data(), name.size()) == 0) return &value;
  }
  return nullptr;
}

}  // namespace s3stream::internal
