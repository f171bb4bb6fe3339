#ifndef BITPARITY_HARNESS_OUTPUT_LOCK_H_
#define BITPARITY_HARNESS_OUTPUT_LOCK_H_

// An exclusive lock on a folder bitparity writes into (a run's or a matrix's --out, a recipe's
// folder of the golden store), held for the lock object's lifetime: a second bitparity process
// that wants the same folder is refused at once, naming the holder's pid, instead of mixing its
// files with the first one's. The lock is flock(2) on <dir>/.bitparity.lock, so it goes away with
// its holder, even when the holder is killed.

#include <string>

namespace bitparity {

class OutputLock {
 public:
  // Locks `dir` (which must exist). InputError naming `dir`, the holder's pid and `advice` when
  // another process holds it; InfrastructureError when the lock file cannot be made.
  explicit OutputLock(const std::string& dir,
                      const std::string& advice = "wait for it or choose another --out");
  ~OutputLock();
  OutputLock(const OutputLock&) = delete;
  OutputLock& operator=(const OutputLock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace bitparity

#endif  // BITPARITY_HARNESS_OUTPUT_LOCK_H_
