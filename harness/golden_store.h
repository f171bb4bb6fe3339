#ifndef BITPARITY_HARNESS_GOLDEN_STORE_H_
#define BITPARITY_HARNESS_GOLDEN_STORE_H_

// The golden store: one trace per recipe and machine fingerprint, at
// <dir>/<recipe name>/<fingerprint key>.h5. A golden is the baseline arm's trace of a passing
// run, stamped with golden.* attributes (docs/trace-format.md) and written atomically; a golden
// that cannot be read is bad input and is never overwritten.

#include <optional>
#include <string>

#include "harness/fingerprint.h"
#include "trace/trace.h"

namespace bitparity {

// What the store holds for one recipe under one fingerprint.
struct GoldenLookup {
  std::string path;             // where this fingerprint's golden is, or would be written
  std::optional<Trace> golden;  // the golden, when there is one
  // Why there is none: the directory searched, the goldens of other fingerprints found there and
  // the fields they differ in. Empty when `golden` is set.
  std::string missing_reason;
  // Without a golden of this fingerprint: whether the store holds goldens of others for the
  // recipe, and the nearest of them (same world size and threads per rank, the fewest fields
  // differing; ties by file name), to explain the difference without gating on it.
  bool others_exist = false;
  std::optional<Trace> nearest;
  std::string nearest_path;
};

class GoldenStore {
 public:
  // `dir` empty: golden/ next to the recipe's recipes/ folder (or next to the recipe).
  GoldenStore(const std::string& dir, const std::string& recipe_path);

  const std::string& dir() const { return dir_; }

  // Where the golden of `recipe_name` for `fingerprint` is, or would be written.
  std::string PathFor(const std::string& recipe_name, const Fingerprint& fingerprint) const;

  // The golden of `recipe_name` for `fingerprint`. InputError ("golden unusable (left
  // unchanged): ...") when the file is there but cannot be read.
  GoldenLookup Find(const std::string& recipe_name, const Fingerprint& fingerprint) const;

  // Stores `baseline_run` as the golden at `path` (a GoldenLookup's), stamped with the
  // fingerprint, rank 0's git revision, the time and `command_line`. InfrastructureError when
  // the file system refuses; the old golden stays in place then.
  void Replace(const std::string& path, Trace baseline_run, const Fingerprint& fingerprint,
               const std::string& command_line) const;

 private:
  std::string dir_;
};

}  // namespace bitparity

#endif  // BITPARITY_HARNESS_GOLDEN_STORE_H_
