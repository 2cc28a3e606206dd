#include "py_credentials.h"

#include <Python.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>

#include <cmath>

namespace nb = nanobind;

namespace s3stream::bindings {
namespace {

bool PythonGone() {
#if PY_VERSION_HEX >= 0x030D0000
  return !Py_IsInitialized() || Py_IsFinalizing();
#else
  return !Py_IsInitialized() || _Py_IsFinalizing();
#endif
}

class Python final : public CredentialsProvider {
 public:
  Python(nb::object function, std::string description)
      : function_(new nb::object(std::move(function))), description_(std::move(description)) {}

  ~Python() override {
    if (PythonGone()) return;  // leaked: freeing a Python object now could crash
    nb::gil_scoped_acquire gil;
    delete function_;
  }

  std::string Describe() const override { return description_; }

  Result<std::optional<Credentials>> Fetch() override {
    if (PythonGone()) return Unavailable(description_ + ": Python is shutting down");
    nb::gil_scoped_acquire gil;
    try {
      nb::object got = (*function_)();
      if (got.is_none()) return std::optional<Credentials>();
      auto [key, secret, token, expires] = nb::cast<std::tuple<std::string, std::string, std::string, nb::object>>(got);
      Credentials c{std::move(key), std::move(secret), std::move(token), std::nullopt};
      if (!expires.is_none()) {
        const double seconds = nb::cast<double>(expires);
        if (!std::isfinite(seconds)) return InvalidArgument(description_ + " gave an expiration that is not a time");
        c.expiration = WallClock::time_point(std::chrono::duration_cast<WallClock::duration>(
            std::chrono::duration<double>(seconds)));
      }
      return std::optional<Credentials>(std::move(c));
    } catch (nb::python_error& e) {
      // The user's function failed: its words, never a traceback into the transport thread.
      std::string what;
      try {
        what = nb::cast<std::string>(nb::str(e.type().attr("__name__"))) + ": " +
               nb::cast<std::string>(nb::str(e.value()));
      } catch (...) {
        what = "an exception";
      }
      return PermissionDenied(description_ + " raised " + what);
    } catch (const std::exception& e) {
      return Internal(description_ + ": " + e.what());
    }
  }

 private:
  nb::object* function_;  // a pointer, so that it can be leaked at interpreter exit
  const std::string description_;
};

}  // namespace

std::shared_ptr<CredentialsProvider> PythonCredentials(nb::object function, std::string description) {
  return std::make_shared<Python>(std::move(function), std::move(description));
}

}  // namespace s3stream::bindings
