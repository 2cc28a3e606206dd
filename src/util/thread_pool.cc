#include "util/thread_pool.h"

#include <unistd.h>

#include <algorithm>
#include <system_error>

namespace s3stream::internal {

ThreadPool::State::State() : pid(::getpid()) {}

ThreadPool::ThreadPool() : current_(new Current{std::make_shared<State>()}) {}

ThreadPool::~ThreadPool() {
  Current* current = current_.load(std::memory_order_acquire);
  const std::shared_ptr<State> state = current->state;
  if (state->pid != ::getpid()) return;  // inherited across fork and never used here: leak it
  delete current;
  std::vector<std::thread> threads;
  {
    std::lock_guard<std::mutex> lock(state->mu);
    state->stopping = true;
    threads.swap(state->threads);
  }
  state->cv.notify_all();
  // Help drain, so no task runs after the owner's members are gone even if the caller is a worker.
  while (RunOne(*state)) {
  }
  for (auto& t : threads) {
    if (t.get_id() == std::this_thread::get_id()) {
      t.detach();
    } else {
      t.join();
    }
  }
}

void ThreadPool::Submit(std::function<void()> task) {
  const std::shared_ptr<State> state = StateForThisProcess();
  bool have_workers = false;
  {
    std::lock_guard<std::mutex> lock(state->mu);
    state->tasks.push_back(std::move(task));
    if (state->threads.empty()) StartWorkers(state);
    have_workers = !state->threads.empty();
  }
  if (have_workers) {
    state->cv.notify_one();
  } else {
    // No thread could be started: run inline rather than never completing the future.
    while (RunOne(*state)) {
    }
  }
}

std::shared_ptr<ThreadPool::State> ThreadPool::StateForThisProcess() {
  Current* current = current_.load(std::memory_order_acquire);
  if (current->state->pid == ::getpid()) return current->state;
  auto* fresh = new Current{std::make_shared<State>()};
  if (current_.compare_exchange_strong(current, fresh, std::memory_order_acq_rel)) return fresh->state;
  delete fresh;  // another thread of this child installed one first
  return current->state;
}

void ThreadPool::StartWorkers(const std::shared_ptr<State>& state) {
  const unsigned n = std::clamp(std::thread::hardware_concurrency(), 2u, 4u);
  for (unsigned i = 0; i < n; ++i) {
    try {
      state->threads.emplace_back(&ThreadPool::WorkerLoop, state);
    } catch (const std::system_error&) {
      break;
    }
  }
}

bool ThreadPool::RunOne(State& state) {
  std::function<void()> task;
  {
    std::lock_guard<std::mutex> lock(state.mu);
    if (state.tasks.empty()) return false;
    task = std::move(state.tasks.front());
    state.tasks.pop_front();
  }
  task();
  return true;
}

void ThreadPool::WorkerLoop(std::shared_ptr<State> state) {
  while (true) {
    std::function<void()> task;
    {
      std::unique_lock<std::mutex> lock(state->mu);
      state->cv.wait(lock, [&] { return state->stopping || !state->tasks.empty(); });
      if (state->tasks.empty()) return;
      task = std::move(state->tasks.front());
      state->tasks.pop_front();
    }
    task();
  }
}

}  // namespace s3stream::internal
