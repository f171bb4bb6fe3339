#include "harness/process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>

extern char** environ;

namespace bitparity {
namespace {

std::vector<std::string> ChildEnvironment(const ProcessOptions& options) {
  std::map<std::string, std::string> env;
  for (char** e = environ; e && *e; ++e) {
    const std::string entry(*e);
    const size_t eq = entry.find('=');
    if (eq != std::string::npos) env[entry.substr(0, eq)] = entry.substr(eq + 1);
  }
  for (const std::string& name : options.unset_environment) env.erase(name);
  for (const auto& [name, value] : options.set_environment) env[name] = value;
  std::vector<std::string> out;
  for (const auto& [name, value] : env) out.push_back(name + "=" + value);
  return out;
}

std::vector<char*> Pointers(std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (std::string& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

// In the child after fork: only async-signal-safe calls. Reports errno through `error_fd` and
// exits 127 when something fails.
[[noreturn]] void ExecChild(const ProcessOptions& options, pid_t parent, char** argv, char** envp,
                            int output_fd, int error_fd) {
  auto fail = [&](int code) {
    ssize_t ignored = ::write(error_fd, &code, sizeof(code));
    (void)ignored;
    ::_exit(127);
  };
  if (::setpgid(0, options.process_group) != 0) fail(errno);
  if (options.die_with_parent) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);  // the parent died before prctl took effect
  }
  const int null_fd = ::open("/dev/null", O_RDONLY);
  if (null_fd < 0 || ::dup2(null_fd, STDIN_FILENO) < 0) fail(errno);
  if (::dup2(output_fd, STDOUT_FILENO) < 0 || ::dup2(output_fd, STDERR_FILENO) < 0) fail(errno);
  // Signals the launcher ignores or blocks must not stay so in the child.
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  if (!options.working_directory.empty() && ::chdir(options.working_directory.c_str()) != 0) {
    fail(errno);
  }
  ::execvpe(argv[0], argv, envp);
  fail(errno);
  ::_exit(127);
}

}  // namespace

ChildProcess ChildProcess::Start(const ProcessOptions& options) {
  std::vector<std::string> args = {options.executable};
  args.insert(args.end(), options.arguments.begin(), options.arguments.end());
  std::vector<std::string> env = ChildEnvironment(options);
  std::vector<char*> argv = Pointers(args), envp = Pointers(env);

  const std::string output = options.output_path.empty() ? "/dev/null" : options.output_path;
  const int output_fd = ::open(output.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (output_fd < 0) {
    throw std::runtime_error("cannot open " + output + " for the output of " + options.executable +
                             ": " + std::strerror(errno));
  }
  int error_pipe[2];
  if (::pipe2(error_pipe, O_CLOEXEC) != 0) {
    const int e = errno;
    ::close(output_fd);
    throw std::runtime_error(std::string("cannot create a pipe: ") + std::strerror(e));
  }
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(error_pipe[0]);
    ExecChild(options, parent, argv.data(), envp.data(), output_fd, error_pipe[1]);
  }
  const int fork_errno = errno;
  ::close(output_fd);
  ::close(error_pipe[1]);
  if (pid < 0) {
    ::close(error_pipe[0]);
    throw std::runtime_error("cannot fork for " + options.executable + ": " +
                             std::strerror(fork_errno));
  }
  // Also from the parent, so that the group exists before anyone signals it.
  ::setpgid(pid, options.process_group == 0 ? pid : options.process_group);
  int child_errno = 0;
  ssize_t n;
  do {
    n = ::read(error_pipe[0], &child_errno, sizeof(child_errno));
  } while (n < 0 && errno == EINTR);
  ::close(error_pipe[0]);
  ChildProcess child;
  child.pid_ = pid;
  if (n == static_cast<ssize_t>(sizeof(child_errno))) {
    child.Wait();
    throw std::runtime_error("cannot run " + options.executable + ": " +
                             std::strerror(child_errno));
  }
  return child;
}

// waitpid(pid, flags) retried on EINTR; records the status once the child has exited.
bool ChildProcess::Reap(int flags) {
  if (finished_) return true;
  int status = 0;
  pid_t r;
  do {
    r = ::waitpid(pid_, &status, flags);
  } while (r < 0 && errno == EINTR);
  if (r == pid_) {
    finished_ = true;
    status_ = status;
  } else if (r < 0 && flags == 0) {
    finished_ = true;  // not our child any more (reaped elsewhere): nothing left to wait for
    status_ = 0;
  }
  return finished_;
}

bool ChildProcess::Poll() { return Reap(WNOHANG); }

int ChildProcess::Wait() {
  Reap(0);
  return status_;
}

int ChildProcess::exit_code() const {
  if (WIFEXITED(status_)) return WEXITSTATUS(status_);
  if (WIFSIGNALED(status_)) return 128 + WTERMSIG(status_);
  return status_;
}

void SignalProcessGroup(pid_t group, int signal) {
  if (group > 0) ::killpg(group, signal);
}

int RunProcess(const ProcessOptions& options) {
  ChildProcess child = ChildProcess::Start(options);
  child.Wait();
  return child.exit_code();
}

}  // namespace bitparity
