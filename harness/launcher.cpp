#include "harness/launcher.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <thread>

#include "config/recipe.h"
#include "core/atomic_file.h"
#include "core/errors.h"
#include "core/temporary_mark.h"
#include "harness/process.h"
#include "harness/trace_merge.h"
#include "numerics/determinism.h"
#include "trace/trace.h"
#include "trace/trace_keys.h"

namespace bitparity {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

std::string LogTail(const std::string& path, size_t lines) {
  std::ifstream in(path);
  std::deque<std::string> tail;
  std::string line;
  while (std::getline(in, line)) {
    tail.push_back(line);
    if (tail.size() > lines) tail.pop_front();
  }
  std::string out;
  for (const std::string& l : tail) out += "    | " + l + "\n";
  return out.empty() ? "    | (empty log)\n" : out;
}

// The rank's own account of its failure: the last line of its log that RunMappingErrors wrote
// ("error: ...", "infrastructure error: ...", "internal error: ..."), without the prefix; empty
// when there is none.
std::string RankErrorLine(const std::string& path) {
  std::ifstream in(path);
  std::string line, found;
  while (std::getline(in, line)) {
    for (const char* prefix : {"error: ", "infrastructure error: ", "internal error: "}) {
      if (line.rfind(prefix, 0) == 0) found = line.substr(std::strlen(prefix));
    }
  }
  return found;
}

// "; the file system of <dir> is full" when it has no byte left for an unprivileged writer: what
// a rank that could not even write its log says through the launcher.
std::string FullDiskNote(const std::string& dir) {
  struct statvfs fs_info {};
  if (::statvfs(dir.c_str(), &fs_info) != 0 || fs_info.f_bavail > 0) return "";
  return "; no space left on " + dir + " (0 bytes free)";
}

// Follows a log file and hands complete new lines to a callback.
class LogFollower {
 public:
  explicit LogFollower(std::string path) : path_(std::move(path)) {}
  template <typename F>
  void Poll(F&& on_line) {
    std::ifstream in(path_, std::ios::binary);
    if (!in) return;
    in.seekg(static_cast<std::streamoff>(offset_));
    std::string chunk((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    offset_ += chunk.size();
    pending_ += chunk;
    size_t newline;
    while ((newline = pending_.find('\n')) != std::string::npos) {
      on_line(pending_.substr(0, newline));
      pending_.erase(0, newline + 1);
    }
  }

 private:
  std::string path_;
  size_t offset_ = 0;
  std::string pending_;
};

struct RankStatus {
  bool finished = false;
  int exit_code = 0;  // valid when finished and !signaled
  int signal = 0;     // valid when finished and signaled
  bool signaled = false;
  bool ended_by_launcher = false;  // still running when the launcher ended the group
  double finished_at = 0;          // seconds after the launch
  double quiet_seconds = 0;        // since the last progress line (or the launch) when it finished

  bool failed() const { return finished && (signaled || exit_code != 0); }
  std::string Describe() const {
    if (ended_by_launcher) return "was still running and was ended by the launcher";
    if (signaled)
      return "was killed by signal " + std::to_string(signal) + " (" + strsignal(signal) + ")";
    return "exited with code " + std::to_string(exit_code);
  }
};

void Decode(int status, RankStatus* s) {
  s->finished = true;
  if (WIFSIGNALED(status)) {
    s->signaled = true;
    s->signal = WTERMSIG(status);
  } else if (WIFEXITED(status)) {
    s->exit_code = WEXITSTATUS(status);
  } else {
    s->exit_code = status;
  }
}

// The rank that caused a failure: one killed by a signal, else one that failed on its own
// (exit 1 or 2), else the first that exited 3 well before a collective would give up on a peer
// after the last progress line (it failed on its own: its resources or its machine), else
// one that was still running while its peers gave up on it (hung), else the first that failed.
int64_t Culprit(const std::vector<RankStatus>& ranks, double collective_timeout_seconds) {
  for (size_t r = 0; r < ranks.size(); ++r) {
    if (ranks[r].failed() && ranks[r].signaled && !ranks[r].ended_by_launcher) return r;
  }
  for (size_t r = 0; r < ranks.size(); ++r) {
    if (ranks[r].failed() && !ranks[r].signaled && ranks[r].exit_code != kExitInfrastructure) {
      return r;
    }
  }
  int64_t first_on_its_own = -1;
  for (size_t r = 0; r < ranks.size(); ++r) {
    const RankStatus& s = ranks[r];
    if (!s.failed() || s.signaled || s.ended_by_launcher) continue;
    // A victim waited a whole collective timeout since about the last progress line; half of it
    // is the margin for a peer that printed its line just after the victim began to wait.
    if (s.quiet_seconds >= collective_timeout_seconds / 2) continue;
    if (first_on_its_own < 0 || s.finished_at < ranks[first_on_its_own].finished_at) {
      first_on_its_own = static_cast<int64_t>(r);
    }
  }
  if (first_on_its_own >= 0) return first_on_its_own;
  for (size_t r = 0; r < ranks.size(); ++r) {
    if (ranks[r].ended_by_launcher) return r;
  }
  for (size_t r = 0; r < ranks.size(); ++r) {
    if (ranks[r].failed()) return r;
  }
  return 0;
}

}  // namespace

std::string SelfExecutable() {
  std::error_code ec;
  fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (ec) throw InfrastructureError("cannot resolve /proc/self/exe: " + ec.message());
  return self.string();
}

namespace {

volatile std::sig_atomic_t interrupt_signal = 0;
void RecordInterrupt(int signal) { interrupt_signal = signal; }
struct sigaction previous_sigint, previous_sigterm;

}  // namespace

InterruptScope::InterruptScope() {
  interrupt_signal = 0;
  struct sigaction action {};
  action.sa_handler = RecordInterrupt;
  sigemptyset(&action.sa_mask);
  ::sigaction(SIGINT, &action, &previous_sigint);
  ::sigaction(SIGTERM, &action, &previous_sigterm);
}

InterruptScope::~InterruptScope() {
  ::sigaction(SIGINT, &previous_sigint, nullptr);
  ::sigaction(SIGTERM, &previous_sigterm, nullptr);
}

int InterruptSignal() { return interrupt_signal; }

std::string SignalName(int signal) {
  if (signal == SIGINT) return "SIGINT";
  if (signal == SIGTERM) return "SIGTERM";
  return "signal " + std::to_string(signal);
}

void RemoveDeadProcessDebris(const std::string& dir) {
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::optional<TemporaryMark> mark = ParseTemporaryMark(it->path().filename().string());
    if (!mark || !OwnerIsGone(*mark)) continue;  // not ours, or its owner may still need it
    std::error_code remove_error;
    fs::remove_all(it->path(), remove_error);
  }
}

namespace {

// One run of LaunchArm: the parts folder, the rank processes, their watch and the merged trace.
class RankGroupRun {
 public:
  explicit RankGroupRun(const LaunchOptions& options)
      : options_(options),
        world_(options.world_size),
        start_(Clock::now()),
        parts_(options.trace_path + ".parts." + ThisProcessMark()) {}

  ~RankGroupRun() {
    std::error_code ec;
    fs::remove_all(parts_, ec);
  }

  LaunchResult Run() {
    PrepareFolders();
    StartRanks();
    const bool timed_out = WatchRanks();
    EndRanks();
    result_.seconds = Elapsed();
    if (interrupted_ != 0) return Interrupted();
    bool any_failed = false;
    for (const RankStatus& s : status_) any_failed |= s.failed() || s.ended_by_launcher;
    if (timed_out || any_failed) return Failed(timed_out);
    if (!options_.merge_trace) return result_;  // exit_code 0: every rank did what it was asked
    return Merged();
  }

 private:
  double Elapsed() const { return std::chrono::duration<double>(Clock::now() - start_).count(); }

  // The log folder and the ranks' own parts folder, with the recipe text the ranks train.
  void PrepareFolders() {
    std::error_code ec;
    fs::create_directories(options_.log_dir, ec);
    if (ec) {
      throw InfrastructureError(
          DescribeWriteError(options_.log_dir, "cannot create the log directory", ec.value()));
    }
    RemoveDeadProcessDebris(fs::absolute(parts_, ec).parent_path().string());
    fs::remove_all(parts_, ec);
    fs::create_directories(parts_, ec);
    if (ec) {
      throw InfrastructureError(
          DescribeWriteError(parts_.string(), "cannot create the ranks' folder", ec.value()));
    }
    request_ = options_.worker;
    // Absolute: an external arm's ranks run in the recipe's folder.
    request_.out_dir = fs::absolute(parts_).string();
    if (!options_.recipe_text.empty()) {
      // The copy keeps the file's stem: a recipe without a name key is named after it.
      const fs::path copy =
          fs::absolute(parts_) /
          fs::path(options_.worker.recipe_path).filename().replace_extension(".toml");
      WriteFileAtomically(copy.string(), options_.recipe_text);
      request_.recipe_path = copy.string();
      request_.recipe_digest = RecipeDigest(options_.recipe_text);
    }
  }

  // What a rank runs: `bitparity worker` with the request as flags, or an external arm's program.
  ProcessOptions RankCommand() const {
    ProcessOptions process;
    if (!options_.external) {
      process.executable = options_.executable;
      process.arguments = WorkerArguments(request_);
      return process;
    }
    process.executable = options_.external->executable;
    process.arguments = options_.external->arguments;
    process.working_directory = options_.external->working_directory;
    return process;
  }

  // Every rank in one process group (led by rank 0), ended with SIGKILL if the launcher dies.
  void StartRanks() {
    const int port = world_ > 1 ? FreeLoopbackPort() : 0;
    for (int64_t r = 0; r < world_; ++r) {
      logs_.push_back(
          (fs::path(options_.log_dir) / ("rank_" + std::to_string(r) + ".log")).string());
      // The child opens (and truncates) its log after fork: remove an old one first so that the
      // progress follower never reads a previous run's lines.
      std::error_code ec;
      fs::remove(logs_.back(), ec);
      ProcessOptions process = RankCommand();
      process.set_environment = {{"RANK", std::to_string(r)},
                                 {"WORLD_SIZE", std::to_string(world_)},
                                 {"LOCAL_RANK", std::to_string(r)},
                                 {"MASTER_ADDR", "127.0.0.1"}};
      if (world_ > 1) process.set_environment["MASTER_PORT"] = std::to_string(port);
      for (const auto& [key, value] : options_.environment) process.set_environment[key] = value;
      if (options_.external) {
        for (const auto& [key, value] : ExternalRankVariables(request_)) {
          process.set_environment[key] = value;
        }
        if (!options_.external->cpu_memory_library.empty()) {
          process.set_environment[kExternalCpuMemoryLibraryVariable] =
              options_.external->cpu_memory_library;
        }
      }
      // What this process pinned for itself is not the rank's: it pins its recipe's level.
      process.unset_environment = VariablesPinnedHere();
      process.output_path = logs_.back();
      process.process_group = group_;
      try {
        children_.push_back(ChildProcess::Start(process));
      } catch (const std::exception& e) {
        SignalProcessGroup(group_, SIGKILL);
        for (ChildProcess& c : children_) c.Wait();
        throw InfrastructureError("cannot start rank " + std::to_string(r) + " (" +
                                  process.executable + "): " + e.what());
      }
      if (group_ == 0) group_ = children_.back().pid();
    }
    status_.resize(static_cast<size_t>(world_));
  }

  void PollRanks(LogFollower& progress) {
    for (int64_t r = 0; r < world_; ++r) {
      if (status_[r].finished) continue;
      if (children_[r].Poll()) {
        Decode(children_[r].wait_status(), &status_[r]);
        status_[r].finished_at = Elapsed();
        status_[r].quiet_seconds = status_[r].finished_at - last_progress_;
      }
    }
    progress.Poll([&](const std::string& line) {
      std::optional<ProgressEvent> event = ParseProgressLine(line);
      if (!event) return;
      last_progress_ = Elapsed();
      if (options_.on_progress) options_.on_progress(*event);
    });
  }

  // Until every rank finished, one failed (then a short grace for the others to notice), the
  // launcher was interrupted or the timeout passed; whether it timed out.
  bool WatchRanks() {
    LogFollower progress(logs_[0]);
    for (;;) {
      if ((interrupted_ = InterruptSignal()) != 0) return false;
      PollRanks(progress);
      bool all_done = true, any_failed = false;
      for (const RankStatus& s : status_) {
        all_done &= s.finished;
        any_failed |= s.failed();
      }
      if (all_done && !any_failed) return false;
      if (any_failed) {
        // Let the other ranks notice and exit on their own for a moment (their exit codes help
        // attribute the fault), then end whatever still runs.
        const auto grace_end = Clock::now() + std::chrono::milliseconds(1500);
        while (Clock::now() < grace_end) {
          PollRanks(progress);
          bool done = true;
          for (const RankStatus& s : status_) done &= s.finished;
          if (done) break;
          std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
        return false;
      }
      if (Elapsed() > options_.timeout_seconds) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }

  // Ends every rank still running and reaps them all.
  void EndRanks() {
    bool ended_any = false;
    for (RankStatus& s : status_) {
      if (s.finished) continue;
      s.ended_by_launcher = true;
      s.finished = true;
      ended_any = true;
    }
    if (ended_any) SignalProcessGroup(group_, SIGKILL);
    for (ChildProcess& c : children_) c.Wait();
  }

  LaunchResult Interrupted() {
    result_.exit_code = 128 + interrupted_;
    result_.failure = "interrupted by " + SignalName(interrupted_) + " after " +
                      std::to_string(static_cast<int64_t>(result_.seconds)) + " s; its " +
                      std::to_string(world_) + " rank(s) were ended (arm '" + options_.worker.arm +
                      "')";
    return result_;
  }

  // The failing rank, how it failed, what it said, its log's tail, and every other rank's state.
  LaunchResult Failed(bool timed_out) {
    bool all_bad_input = true;
    for (const RankStatus& s : status_) {
      if (!(s.failed() || s.ended_by_launcher)) continue;
      if (s.signaled || s.ended_by_launcher || s.exit_code != kExitBadInput) all_bad_input = false;
    }
    const int64_t culprit = Culprit(status_, CollectiveTimeoutSeconds(options_.timeout_seconds));
    result_.failed_rank = culprit;
    // The first rank to fail refused its input (exit 2, e.g. a perturbation naming a parameter it
    // does not hold): the others only lost their peer, so the run is bad input.
    const RankStatus& first = status_[culprit];
    if (!first.signaled && !first.ended_by_launcher && first.exit_code == kExitBadInput) {
      all_bad_input = true;
    }
    std::ostringstream msg;
    if (timed_out) {
      msg << "the run exceeded the recipe's timeout of " << options_.timeout_seconds << " s; rank "
          << culprit << " was still running and was ended";
    } else {
      msg << "rank " << culprit << " " << status_[culprit].Describe();
      const std::string said = RankErrorLine(logs_[culprit]);
      if (!said.empty()) msg << ": " << said;
      if (said.find("no space left") == std::string::npos) {
        msg << FullDiskNote(parts_.parent_path().empty() ? "." : parts_.parent_path().string());
      }
    }
    msg << " (arm '" << options_.worker.arm << "', " << world_ << " rank(s), after "
        << result_.seconds << " s)\n";
    for (int64_t r = 0; r < world_; ++r) {
      if (r != culprit) msg << "  rank " << r << " " << status_[r].Describe() << "\n";
    }
    msg << "  last lines of " << logs_[culprit] << ":\n" << LogTail(logs_[culprit], 20);
    result_.failure = msg.str();
    result_.exit_code = (!timed_out && all_bad_input) ? kExitBadInput : kExitInfrastructure;
    return result_;
  }

  // Every rank finished: their parts merged into one trace, written atomically.
  LaunchResult Merged() {
    try {
      result_.trace = MergeTraceParts(parts_.string());
    } catch (const InputError& e) {
      result_.exit_code = kExitInfrastructure;
      result_.failure =
          std::string("every rank exited 0 but the trace parts are unusable: ") + e.what();
      return result_;
    }
    for (const auto& [key, value] : options_.trace_attributes) {
      result_.trace.attributes[key] = value;
    }
    if (!options_.recipe_text.empty()) {
      // The ranks read the launcher's copy in the parts folder, which goes now; the trace names
      // the file the recipe came from.
      std::error_code absolute_error;
      const std::string origin =
          fs::absolute(options_.worker.recipe_path, absolute_error).lexically_normal().string();
      if (result_.trace.attributes.count(trace_keys::kRecipePath)) {
        result_.trace.attributes[trace_keys::kRecipePath] = origin;
      }
      for (RankTrace& rank : result_.trace.ranks) {
        if (rank.attributes.count(trace_keys::kRecipePath)) {
          rank.attributes[trace_keys::kRecipePath] = origin;
        }
      }
    }
    // The parts are in memory now: their disk space is given back before the merged trace needs
    // it.
    std::error_code ec;
    fs::remove_all(parts_, ec);
    try {
      WriteTrace(options_.trace_path, result_.trace);
    } catch (const InfrastructureError& e) {
      result_.exit_code = kExitInfrastructure;
      result_.failure =
          std::string("every rank finished, but the merged trace was not written: ") + e.what();
      result_.trace = Trace();
      return result_;
    }
    result_.exit_code = kExitPass;
    return result_;
  }

  const LaunchOptions& options_;
  const int64_t world_;
  const Clock::time_point start_;
  const fs::path parts_;
  WorkerRequest request_;
  pid_t group_ = 0;
  std::vector<ChildProcess> children_;
  std::vector<std::string> logs_;
  std::vector<RankStatus> status_;
  int interrupted_ = 0;
  double last_progress_ = 0;  // seconds after the launch of rank 0's last progress line
  LaunchResult result_;
};

}  // namespace

LaunchResult LaunchArm(const LaunchOptions& options) { return RankGroupRun(options).Run(); }

int FreeLoopbackPort() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) throw InfrastructureError("cannot create a socket to find a free port");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    ::close(fd);
    throw InfrastructureError("cannot find a free loopback port");
  }
  int port = ntohs(addr.sin_port);
  ::close(fd);
  return port;
}

}  // namespace bitparity
