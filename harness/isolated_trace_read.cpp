#include "harness/isolated_trace_read.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <thread>

#include "core/errors.h"
#include "trace/checkpoint_file.h"

namespace bitparity {
namespace {

// Runs `read` (a reader of `path`, a `what`, that throws InputError for an unusable file) in a
// child process; returns when the child read the file without complaint.
void ReadInChild(const std::string& path, const std::string& what,
                 const std::function<void()>& read, double timeout_seconds) {
  int pipe_fds[2];
  if (::pipe(pipe_fds) != 0) {
    throw InfrastructureError(path + ": cannot make a pipe to check the " + what + ": " +
                              std::strerror(errno));
  }
  std::fflush(nullptr);
  const pid_t child = ::fork();
  if (child < 0) {
    ::close(pipe_fds[0]);
    ::close(pipe_fds[1]);
    throw InfrastructureError(path + ": cannot fork to check the " + what + ": " +
                              std::strerror(errno));
  }
  if (child == 0) {
    ::close(pipe_fds[0]);
    int code = 0;
    std::string message;
    try {
      read();
    } catch (const InputError& e) {
      code = kExitBadInput;
      message = e.what();
    } catch (const std::exception& e) {
      code = kExitInfrastructure;
      message = e.what();
    }
    for (size_t done = 0; done < message.size();) {
      const ssize_t n = ::write(pipe_fds[1], message.data() + done, message.size() - done);
      if (n <= 0) break;
      done += static_cast<size_t>(n);
    }
    ::_exit(code);
  }
  ::close(pipe_fds[1]);
  std::string message;
  char buffer[4096];
  for (ssize_t n; (n = ::read(pipe_fds[0], buffer, sizeof(buffer))) > 0;) message.append(buffer, n);
  ::close(pipe_fds[0]);
  // The pipe closes when the child ends (or crashes); wait for its status within the timeout.
  int status = 0;
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_seconds);
  while (::waitpid(child, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(child, SIGKILL);
      ::waitpid(child, &status, 0);
      throw InputError(
          path + ": not a usable " + what + ": the HDF5 library did not finish reading it in " +
          std::to_string(static_cast<int>(timeout_seconds)) + " s; the file is corrupt or crafted");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  if (WIFSIGNALED(status)) {
    throw InputError(path + ": not a usable " + what + ": the HDF5 library crashed reading it (" +
                     strsignal(WTERMSIG(status)) + "); the file is corrupt or crafted");
  }
  const int code = WIFEXITED(status) ? WEXITSTATUS(status) : kExitInfrastructure;
  if (code == kExitBadInput) throw InputError(message);
  if (code != 0) {
    throw InfrastructureError(path + ": reading the " + what + " failed: " +
                              (message.empty() ? "exit " + std::to_string(code) : message));
  }
}

}  // namespace

Trace ReadTraceIsolated(const std::string& path, bool require_complete, double timeout_seconds) {
  ReadInChild(
      path, "trace", [&] { ReadTrace(path, require_complete); }, timeout_seconds);
  return ReadTrace(path, require_complete);
}

void CheckCheckpointIsolated(const std::string& path, double timeout_seconds) {
  ReadInChild(
      path, "checkpoint", [&] { ReadCheckpoint(path); }, timeout_seconds);
}

}  // namespace bitparity
