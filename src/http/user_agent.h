// The User-Agent every request carries: "s3stream/<version> libcurl/<version>", so that a store's
// access logs (and its operators, when something misbehaves) can tell s3stream's requests apart.
#pragma once

#include <string>

namespace s3stream::internal {

const std::string& UserAgent();

}  // namespace s3stream::internal
