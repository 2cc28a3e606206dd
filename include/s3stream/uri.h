// ObjectUri: where an object lives. Accepted forms:
//   s3://bucket/key        an object in an S3-compatible store (the key is taken verbatim: spaces,
//                          unicode and `+%=&~` are part of the key, not escapes)
//   file:///abs/path       a local file (also taken verbatim)
//   /abs/path, rel/path    a local file; relative paths resolve against the working directory
//   scheme://container/key any other scheme, for a driver registered under it (see client.h);
//                          whether one is, the Client says
#pragma once

#include <string>
#include <string_view>

#include "s3stream/status.h"

namespace s3stream {

struct ObjectUri {
  std::string scheme = "s3";  // lower case: "s3", "file", ...
  // S3: the bucket (its name checked). File: always empty (the store root is "/").
  std::string bucket;
  // S3: the key, possibly empty (a bucket or prefix). File: the absolute path without its leading '/'.
  std::string key;

  static Result<ObjectUri> Parse(std::string_view uri);
  std::string ToString() const;

  // The same URI with `key` replaced (used to turn listed keys back into URIs).
  ObjectUri WithKey(std::string new_key) const;
};

// Checks S3's bucket naming rules (3-63 chars of a-z0-9.-, starting and ending alphanumeric).
Status ValidateBucketName(std::string_view bucket);

}  // namespace s3stream
