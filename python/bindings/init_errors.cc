#include "bindings.h"
#include "status_error.h"

namespace nb = nanobind;

namespace s3stream::bindings {
namespace {

const char* PythonClassFor(StatusCode code) {
  switch (code) {
    case StatusCode::kInvalidArgument: return "InvalidArgumentError";
    case StatusCode::kNotFound: return "NotFoundError";
    case StatusCode::kPermissionDenied: return "PermissionDeniedError";
    case StatusCode::kOutOfRange: return "OutOfRangeError";
    case StatusCode::kUnavailable: return "UnavailableError";
    case StatusCode::kPreconditionFailed: return "ObjectChangedError";
    case StatusCode::kCorrupt: return "CorruptDataError";
    case StatusCode::kCancelled: return "CancelledError";
    case StatusCode::kTooLarge: return "TooLargeError";
    default: return "InternalError";
  }
}

void RaiseStatus(const Status& status) {
  nb::object errors = nb::module_::import_("s3stream.errors");
  nb::object cls = errors.attr(PythonClassFor(status.code()));
  nb::object exc = cls(nb::str(status.message().c_str()));
  exc.attr("http_status") = status.http_status() ? nb::object(nb::int_(status.http_status())) : nb::none();
  exc.attr("error_code") = status.error_code().empty() ? nb::none() : nb::object(nb::str(status.error_code().c_str()));
  PyErr_SetObject(cls.ptr(), exc.ptr());
}

}  // namespace

void InitErrors(nb::module_& m) {
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const StatusError& e) {
      RaiseStatus(e.status());
    }
  });
}

}  // namespace s3stream::bindings
