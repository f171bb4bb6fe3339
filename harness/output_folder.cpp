#include "harness/output_folder.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "core/atomic_file.h"
#include "core/errors.h"
#include "harness/launcher.h"

namespace bitparity {
namespace {

namespace fs = std::filesystem;

// A folder the user may not write is bad input; a full disk is the machine's fault (exit 3).
void RequireWritable(const std::string& dir) {
  const fs::path probe = fs::path(dir) / (".write-probe." + std::to_string(::getpid()));
  int error_number = 0;
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    error_number = errno;
  } else {
    if (::write(fd, "probe\n", 6) < 0) error_number = errno;
    ::close(fd);
  }
  std::error_code ec;
  fs::remove(probe, ec);
  if (error_number == ENOSPC || error_number == EDQUOT) {
    throw InfrastructureError(DescribeWriteError(dir, "cannot write", error_number));
  }
  if (error_number != 0) {
    throw InputError(dir +
                     ": the output directory is not writable: " + std::strerror(error_number));
  }
}

}  // namespace

OutputFolder::OutputFolder(const std::string& path) : path_(path) {
  std::error_code ec;
  if (fs::exists(path_, ec) && !fs::is_directory(path_, ec)) {
    throw InputError(path_ + ": --out is a file, expected a directory");
  }
  fs::create_directories(path_, ec);
  if (ec) throw InputError(path_ + ": cannot create the output directory: " + ec.message());
  lock_ = std::make_unique<OutputLock>(path_);
  RemoveDeadProcessDebris(path_);  // what interrupted runs left, now that the folder is ours
  RequireWritable(path_);
}

std::string OutputFolder::CreateFolder(const std::string& relative, const std::string& what) const {
  const fs::path dir = fs::path(path_) / relative;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw InputError(dir.string() + ": cannot create " + what + ": " + ec.message());
  return dir.string();
}

}  // namespace bitparity
