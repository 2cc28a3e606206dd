// credential_process: a profile's command that prints credentials as JSON on stdout (the AWS CLI's
// format, credentials_json.h). Run through /bin/sh -c, as the Go and JavaScript SDKs do, so quoting
// works as in a shell. Its output is bounded, it is killed after kTimeout or at Ctrl-C, and its
// stderr is kept for the message when it fails.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>

#include "auth/credentials_json.h"
#include "auth/providers.h"
#include "s3stream/interrupt.h"

extern char** environ;

namespace s3stream::internal {
namespace {

constexpr std::chrono::seconds kTimeout{60};
constexpr size_t kMaxOutput = 1 << 20;

struct Pipe {
  int fd[2] = {-1, -1};
  ~Pipe() {
    for (int f : fd) {
      if (f >= 0) ::close(f);
    }
  }
  void CloseRead() { ::close(fd[0]), fd[0] = -1; }
  void CloseWrite() { ::close(fd[1]), fd[1] = -1; }
};

std::string Tail(const std::string& s, size_t n) { return s.size() <= n ? s : "..." + s.substr(s.size() - n); }

class ProcessCredentials final : public CredentialsProvider {
 public:
  ProcessCredentials(std::string command, std::string profile)
      : command_(std::move(command)), profile_(std::move(profile)) {}

  std::string Describe() const override { return "credential_process of profile '" + profile_ + "'"; }

  Result<std::optional<Credentials>> Fetch() override {
    std::string out, err;
    Status run = Run(out, err);
    if (!run.ok()) return run;
    Result<Credentials> parsed = ParseCredentialsJson(out, CredentialsDocument::kProcess, Describe());
    if (!parsed.ok()) return parsed.status();
    return std::optional<Credentials>(std::move(parsed.value()));
  }

 private:
  Status Run(std::string& out, std::string& err) const {
    Pipe stdout_pipe, stderr_pipe;
    if (::pipe2(stdout_pipe.fd, O_CLOEXEC) != 0 || ::pipe2(stderr_pipe.fd, O_CLOEXEC) != 0) {
      return Internal(Describe() + ": pipe: " + std::strerror(errno));
    }
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, stdout_pipe.fd[1], STDOUT_FILENO);
    posix_spawn_file_actions_adddup2(&actions, stderr_pipe.fd[1], STDERR_FILENO);
    const char* argv[] = {"/bin/sh", "-c", command_.c_str(), nullptr};
    pid_t pid = -1;
    const int spawned = posix_spawn(&pid, "/bin/sh", &actions, nullptr, const_cast<char**>(argv), environ);
    posix_spawn_file_actions_destroy(&actions);
    if (spawned != 0) return Internal(Describe() + ": cannot start /bin/sh: " + std::strerror(spawned));
    stdout_pipe.CloseWrite();
    stderr_pipe.CloseWrite();

    const auto deadline = std::chrono::steady_clock::now() + kTimeout;
    Status stopped;
    pollfd fds[2] = {{stdout_pipe.fd[0], POLLIN, 0}, {stderr_pipe.fd[0], POLLIN, 0}};
    std::string* sinks[2] = {&out, &err};
    int open_fds = 2;
    while (open_fds > 0) {
      if (InterruptRequested()) {
        stopped = Interrupted("running the " + Describe());
        break;
      }
      if (std::chrono::steady_clock::now() > deadline) {
        stopped = Unavailable("the " + Describe() + " did not finish in " + std::to_string(kTimeout.count()) + " s");
        break;
      }
      const int ready = ::poll(fds, 2, static_cast<int>(kInterruptPoll.count()));
      if (ready < 0 && errno != EINTR) break;
      for (int i = 0; i < 2; ++i) {
        if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        char chunk[8192];
        const ssize_t n = ::read(fds[i].fd, chunk, sizeof chunk);
        if (n > 0 && sinks[i]->size() + n <= kMaxOutput) {
          sinks[i]->append(chunk, static_cast<size_t>(n));
        } else if (n > 0) {
          stopped = InvalidArgument("the " + Describe() + " printed more than " + std::to_string(kMaxOutput) + " bytes");
          break;
        } else if (n == 0 || errno != EINTR) {
          fds[i].fd = -1;  // its end closed (the pipe is freed with Pipe)
          --open_fds;
        }
      }
      if (!stopped.ok()) break;
    }
    if (!stopped.ok()) ::kill(pid, SIGKILL);
    int wstatus = 0;
    while (::waitpid(pid, &wstatus, 0) < 0 && errno == EINTR) {
    }
    if (!stopped.ok()) return stopped;
    if (!WIFEXITED(wstatus) || WEXITSTATUS(wstatus) != 0) {
      const std::string how = WIFEXITED(wstatus) ? "exited with " + std::to_string(WEXITSTATUS(wstatus))
                                                 : "was killed by signal " + std::to_string(WTERMSIG(wstatus));
      // Its stderr is the user's own program's words; its stdout may hold a secret and is not shown.
      return PermissionDenied("the " + Describe() + " (" + Tail(command_, 200) + ") " + how +
                              (err.empty() ? "" : ": " + Tail(err, 500)));
    }
    return Status::Ok();
  }

  const std::string command_;
  const std::string profile_;
};

}  // namespace

std::shared_ptr<CredentialsProvider> ProcessCredentialsProvider(std::string command, std::string profile) {
  return std::make_shared<ProcessCredentials>(std::move(command), std::move(profile));
}

}  // namespace s3stream::internal
