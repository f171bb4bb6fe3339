#ifndef BITPARITY_HARNESS_PROCESS_H_
#define BITPARITY_HARNESS_PROCESS_H_

// Child processes for the launcher and the tests, on fork and exec: a child gets the current
// environment with some variables set or removed, stdin from /dev/null, stdout and stderr into
// one file, a process group of its own or of an earlier child, and SIGKILL when the process
// that started it dies, so that no rank outlives its launcher.

#include <sys/types.h>

#include <map>
#include <string>
#include <vector>

namespace bitparity {

struct ProcessOptions {
  std::string executable;                              // a path, or a name looked up in PATH
  std::vector<std::string> arguments;                  // after argv[0]
  std::map<std::string, std::string> set_environment;  // on top of the current environment
  std::vector<std::string> unset_environment;          // removed from it
  std::string output_path;        // stdout and stderr, truncated; "" for /dev/null
  std::string working_directory;  // "" for this process's
  pid_t process_group = 0;        // 0: a new group led by the child; else that group
  bool die_with_parent = true;
};

class ChildProcess {
 public:
  // Starts the child. Throws std::runtime_error naming the executable and the reason when it
  // cannot be started (no such file, not executable, no output file).
  static ChildProcess Start(const ProcessOptions& options);

  pid_t pid() const { return pid_; }
  // Whether the child has exited (reaps it, without blocking).
  bool Poll();
  // Waits for the child to exit; returns its wait status (as waitpid reports it).
  int Wait();
  bool finished() const { return finished_; }
  int wait_status() const { return status_; }
  // The exit code, or 128 + the signal that ended it.
  int exit_code() const;

 private:
  bool Reap(int waitpid_flags);

  pid_t pid_ = -1;
  bool finished_ = false;
  int status_ = 0;
};

// Sends `signal` to every process of process group `group`.
void SignalProcessGroup(pid_t group, int signal);

// Starts the child and waits for it; returns ChildProcess::exit_code().
int RunProcess(const ProcessOptions& options);

}  // namespace bitparity

#endif  // BITPARITY_HARNESS_PROCESS_H_
