#include "core/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "core/errors.h"
#include "core/temporary_mark.h"

namespace bitparity {

std::string DescribeWriteError(const std::string& path, const std::string& doing,
                               int error_number) {
  const std::string errno_text =
      "errno " + std::to_string(error_number) + ": " + std::strerror(error_number);
  if (error_number == ENOSPC || error_number == EDQUOT) {
    return "no space left on " + path + " (" + errno_text + ")";
  }
  if (error_number == EFBIG) {  // the process's file-size limit (ulimit -f), SIGXFSZ ignored
    return "file size limit reached writing " + path + " (" + errno_text + "; raise `ulimit -f`)";
  }
  return path + ": " + doing + ": " + errno_text;
}

void WriteFileAtomically(const std::string& path, const std::string& bytes) {
  const std::string temporary = path + ".tmp." + ThisProcessMark();
  const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw InfrastructureError(DescribeWriteError(path, "cannot create", errno));
  // Any failure below removes the temporary and leaves `path` as it was.
  auto fail = [&](const char* doing, int error_number) {
    ::close(fd);
    ::unlink(temporary.c_str());
    throw InfrastructureError(DescribeWriteError(path, doing, error_number));
  };
  size_t written = 0;
  while (written < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + written, bytes.size() - written);
    if (n < 0) {
      if (errno == EINTR) continue;
      fail("cannot write", errno);
    }
    written += static_cast<size_t>(n);
  }
  // A file system may accept the write and refuse the blocks at the flush (NFS, quotas).
  if (::fsync(fd) != 0) fail("cannot flush to the disk", errno);
  if (::close(fd) != 0) {
    const int error_number = errno;
    ::unlink(temporary.c_str());
    throw InfrastructureError(DescribeWriteError(path, "cannot close", error_number));
  }
  if (std::rename(temporary.c_str(), path.c_str()) != 0) {
    const int error_number = errno;
    ::unlink(temporary.c_str());
    throw InfrastructureError(DescribeWriteError(path, "cannot move into place", error_number));
  }
}

}  // namespace bitparity
