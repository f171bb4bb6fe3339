#include "harness/isolated_trace_read.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>

#include "core/errors.h"

namespace bitparity {

Trace ReadTraceIsolated(const std::string& path, bool require_complete, double timeout_seconds) {
  int pipe_fds[2];
  if (::pipe(pipe_fds) != 0) {
    throw InfrastructureError(path +
                              ": cannot make a pipe to check the trace: " + std::strerror(errno));
  }
  std::fflush(nullptr);
  const pid_t child = ::fork();
  if (child < 0) {
    ::close(pipe_fds[0]);
    ::close(pipe_fds[1]);
    throw InfrastructureError(path + ": cannot fork to check the trace: " + std::strerror(errno));
  }
  if (child == 0) {
    ::close(pipe_fds[0]);
    int code = 0;
    std::string message;
    try {
      ReadTrace(path, require_complete);
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
      throw InputError(path +
                       ": not a usable trace: the HDF5 library did not finish reading it "
                       "in " +
                       std::to_string(static_cast<int>(timeout_seconds)) +
                       " s; the file is corrupt or crafted");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  if (WIFSIGNALED(status)) {
    throw InputError(path + ": not a usable trace: the HDF5 library crashed reading it (" +
                     strsignal(WTERMSIG(status)) + "); the file is corrupt or crafted");
  }
  const int code = WIFEXITED(status) ? WEXITSTATUS(status) : kExitInfrastructure;
  if (code == kExitBadInput) throw InputError(message);
  if (code != 0) {
    throw InfrastructureError(path + ": reading the trace failed: " +
                              (message.empty() ? "exit " + std::to_string(code) : message));
  }
  return ReadTrace(path, require_complete);
}

}  // namespace bitparity
