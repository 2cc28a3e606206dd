// A Python callable as a credentials source (Client(credentials=fn)). client.py wraps the user's
// function so that it returns (key, secret, token, expiration seconds since the epoch or None), or
// None for "no credentials", and raises a clear error for anything else.
//
// Threading: Fetch may run on any thread (the transport's, a refresh thread), so it takes the GIL;
// an exception never leaves it (it becomes the Status that requests fail with). After the
// interpreter began to finalize it neither calls nor frees the function.
#pragma once

#include <nanobind/nanobind.h>

#include <memory>

#include "s3stream/credentials.h"

namespace s3stream::bindings {

std::shared_ptr<CredentialsProvider> PythonCredentials(nanobind::object function, std::string description);

}  // namespace s3stream::bindings
