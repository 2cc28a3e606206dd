#include "bindings.h"
#include "s3stream/interrupt.h"
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

// The exception Python's signal handlers raised while this thread waited in the core, kept until
// the binding call returns (owned references; see InterruptPending).
struct PendingInterrupt {
  PyObject* type = nullptr;
  PyObject* value = nullptr;
  PyObject* traceback = nullptr;
};
thread_local PendingInterrupt pending;

// Installed with SetInterruptCheck: runs on a thread that released the GIL to wait.
bool CheckSignals() {
  if (pending.type != nullptr) return true;  // already interrupted: keep stopping
#if PY_VERSION_HEX >= 0x030D0000
  const bool finalizing = Py_IsFinalizing();
#else
  const bool finalizing = _Py_IsFinalizing();
#endif
  if (!Py_IsInitialized() || finalizing) return false;  // no signal handlers to run any more
  nb::gil_scoped_acquire acquire;
  if (PyErr_CheckSignals() == 0) return false;  // no signal, or a handler that did not raise
  PyErr_Fetch(&pending.type, &pending.value, &pending.traceback);
  return pending.type != nullptr;
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

bool InterruptPending() { return pending.type != nullptr; }

void InitErrors(nb::module_& m) {
  SetInterruptCheck(&CheckSignals);
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const InterruptRaised&) {
      PyErr_Restore(pending.type, pending.value, pending.traceback);  // hands the references back
      pending = PendingInterrupt{};
    } catch (const StatusError& e) {
      RaiseStatus(e.status());
    }
  });
}

}  // namespace s3stream::bindings
