#ifndef BITPARITY_TESTS_SUPPORT_TEST_SUPPORT_H_
#define BITPARITY_TESTS_SUPPORT_TEST_SUPPORT_H_

// Helpers shared by the test suites: temporary directories, running the bitparity binary as a
// separate process, and looking for processes left behind.

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace bitparity::testing {

// A fresh directory under the system temp dir, removed when the object goes away.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string File(const std::string& name) const { return path_ + "/" + name; }
  // Writes `text` to `name` in the directory and returns its path.
  std::string Write(const std::string& name, const std::string& text) const;

 private:
  std::string path_;
};

struct CommandResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
  double seconds = 0;
};

// Runs build/bitparity with `args` (and extra environment variables) and waits for it.
CommandResult RunBitparity(const std::vector<std::string>& args,
                           const std::vector<std::pair<std::string, std::string>>& env = {});

// Runs `program` with `args` (a shell that runs bitparity under a limit or in a namespace) with
// $BITPARITY set to the binary; its output is also left in `log`.
CommandResult RunWithBitparityVariable(const std::string& program,
                                       const std::vector<std::string>& args,
                                       const std::string& log);

// The repository root and the bitparity binary, as configured by CMake.
std::string SourceDir();
std::string BitparityBinary();

// The arguments of one rank's `bitparity worker` for `arm` of `recipe`, writing its trace part
// to `out_dir` (what the launcher passes; a launcher of the user's own is given these).
std::vector<std::string> WorkerArguments(const std::string& recipe, const std::string& arm,
                                         const std::string& out_dir);

// PIDs of running processes whose command line contains `needle`.
std::vector<int64_t> ProcessesMentioning(const std::string& needle);

// PIDs of live (not zombie) processes in process group `pgid`.
std::vector<int64_t> ProcessesInGroup(int64_t pgid);

// The process groups named by the `@rank ... pgid=G` lines of the rank logs in `log_dir`.
std::vector<int64_t> RankProcessGroups(const std::string& log_dir);

std::string ReadFile(const std::string& path);

// The [model] table of the small MoE GPT most suites train (hidden 32, 4 heads, 4 experts,
// sequence 16), with the layer count, MTP depth and top-k a suite needs; ends with a newline.
std::string SmallModelTable(int layers = 3, int mtp_layers = 1, int topk = 2);

}  // namespace bitparity::testing

#endif  // BITPARITY_TESTS_SUPPORT_TEST_SUPPORT_H_
