#ifndef BITPARITY_HARNESS_OUTPUT_FOLDER_H_
#define BITPARITY_HARNESS_OUTPUT_FOLDER_H_

// The folder `bitparity run` or `bitparity matrix` writes its results into (--out), claimed
// before any training: a file at that path is bad input; the folder is created, locked for the
// command's lifetime (OutputLock), cleared of the debris of interrupted bitparity processes, and
// proven writable (a folder the user may not write is bad input, a full disk an infrastructure
// fault, exit 3). The same rules for both commands, in one place.

#include <memory>
#include <string>

#include "harness/output_lock.h"

namespace bitparity {

class OutputFolder {
 public:
  // Claims `path`; InputError or InfrastructureError as above, naming it.
  explicit OutputFolder(const std::string& path);

  const std::string& path() const { return path_; }

  // Creates `relative` (a folder below the claimed one); InputError naming it and `what` when
  // it cannot be made.
  std::string CreateFolder(const std::string& relative, const std::string& what) const;

 private:
  std::string path_;
  std::unique_ptr<OutputLock> lock_;
};

}  // namespace bitparity

#endif  // BITPARITY_HARNESS_OUTPUT_FOLDER_H_
