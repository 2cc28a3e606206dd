// Interrupting blocking calls (Ctrl-C). Every wait of the core that a caller's thread blocks in
// (Await on a Future, the range engine's read-ahead, a full BufferPool) wakes every
// kInterruptPoll to ask the installed check whether to give up; if so the wait ends with
// kCancelled and what it waited for is cancelled (a GET stops within about a second, also when
// its server has stalled). The Python bindings install a check that runs Python's signal handlers,
// so Ctrl-C raises KeyboardInterrupt; a C++ program may install its own.
#pragma once

#include <chrono>
#include <string>

#include "s3stream/status.h"

namespace s3stream {

inline constexpr std::chrono::milliseconds kInterruptPoll{100};

// Called on the waiting thread; true: stop waiting. Must be cheap and must not throw.
using InterruptCheck = bool (*)();

// Installs the check for the whole process (nullptr: none).
void SetInterruptCheck(InterruptCheck check);
bool InterruptRequested();

// The status a wait ends with when interrupted: kCancelled, "<what> was interrupted".
Status Interrupted(const std::string& what);

}  // namespace s3stream
