#include "harness/output_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>

#include "core/errors.h"

namespace bitparity {

namespace {

// Whether `fd` is a lock file bitparity could have made: a regular file with one name, empty or
// holding a pid line. Anything else (a device, a FIFO, a hard link to another file, a file with
// other content) is not ours to truncate.
std::string NotALockReason(int fd) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return std::string("cannot stat it: ") + std::strerror(errno);
  if (!S_ISREG(st.st_mode)) return "it is not a regular file";
  if (st.st_nlink != 1) return "it has other names (a hard link)";
  char head[32] = {0};
  const ssize_t n = ::pread(fd, head, sizeof(head), 0);
  if (n < 0) return std::string("cannot read it: ") + std::strerror(errno);
  const std::string text(head, static_cast<size_t>(n));
  const size_t digits = text.find_first_not_of("0123456789");
  const bool pid_line = digits == std::string::npos || text.substr(digits) == "\n";
  if (n == static_cast<ssize_t>(sizeof(head)) || !pid_line) return "it holds something else";
  return "";
}

}  // namespace

OutputLock::OutputLock(const std::string& dir, const std::string& advice) {
  const std::string path = (std::filesystem::path(dir) / ".bitparity.lock").string();
  // Never through a symbolic link: a planted link would have its target overwritten.
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0644);
  if (fd_ < 0 && errno == ELOOP) {
    throw InputError(path +
                     " is a symbolic link; bitparity's lock is a file of its own: remove "
                     "the link");
  }
  if (fd_ < 0) {
    throw InfrastructureError(path + ": cannot create the lock: " + std::strerror(errno));
  }
  const std::string not_a_lock = NotALockReason(fd_);
  if (!not_a_lock.empty()) {
    ::close(fd_);
    fd_ = -1;
    throw InputError(path + " is not a bitparity lock (" + not_a_lock +
                     "); it is left as it is: remove or move it");
  }
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int error = errno;
    char holder[32] = {0};
    ssize_t n = ::pread(fd_, holder, sizeof(holder) - 1, 0);
    ::close(fd_);
    fd_ = -1;
    if (error != EWOULDBLOCK) {
      throw InfrastructureError(path + ": cannot lock: " + std::strerror(error));
    }
    std::string pid = n > 0 ? std::string(holder, static_cast<size_t>(n)) : "unknown";
    while (!pid.empty() && (pid.back() == '\n' || pid.back() == ' ')) pid.pop_back();
    throw InputError(dir + ": another bitparity process (pid " + pid + ") is writing here; " +
                     advice);
  }
  const std::string pid = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, pid.data(), pid.size(), 0) < 0) {
    // The lock holds without the pid; only the message of a refused process would lack it.
  }
}

OutputLock::~OutputLock() {
  if (fd_ >= 0) ::close(fd_);  // closing the descriptor releases the flock
}

}  // namespace bitparity
