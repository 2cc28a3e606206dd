// ThreadPool: runs tasks on 2-4 threads, started on the first Submit so an unused pool costs no
// threads. The file driver runs its blocking system calls here so that its futures complete
// asynchronously, as the network driver's do.
//
// Threading and ownership: Submit is thread-safe. The destructor finishes every queued task (running
// some itself) and then joins the workers. If the last owner destroys the pool from inside a task
// (a Future callback dropping the pool's owner), that worker is detached instead of joining itself;
// it only touches the shared State afterwards, which it co-owns.
// fork(): the child has none of the parent's workers, and the parent's State may have been locked at
// the instant of the fork, so a child never touches it: its first Submit installs a fresh State and
// leaks the old one (with the parent's queued tasks, which are the parent's business).
#pragma once

#include <sys/types.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace s3stream::internal {

class ThreadPool {
 public:
  ThreadPool();
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  void Submit(std::function<void()> task);

 private:
  struct State {
    std::mutex mu;
    std::condition_variable cv;
    std::deque<std::function<void()>> tasks;
    std::vector<std::thread> threads;
    const pid_t pid;
    bool stopping = false;
    State();
  };
  // Boxed so a forked child can swap it atomically without touching the parent's State.
  struct Current {
    std::shared_ptr<State> state;
  };

  std::shared_ptr<State> StateForThisProcess();
  static void StartWorkers(const std::shared_ptr<State>& state);  // with state->mu held
  static bool RunOne(State& state);
  static void WorkerLoop(std::shared_ptr<State> state);

  std::atomic<Current*> current_;
};

}  // namespace s3stream::internal
