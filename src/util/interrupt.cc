#include "s3stream/interrupt.h"

#include <atomic>

namespace s3stream {
namespace {

std::atomic<InterruptCheck> installed{nullptr};

}  // namespace

void SetInterruptCheck(InterruptCheck check) { installed.store(check); }

bool InterruptRequested() {
  InterruptCheck check = installed.load();
  return check != nullptr && check();
}

Status Interrupted(const std::string& what) { return Cancelled(what + " was interrupted"); }

}  // namespace s3stream
