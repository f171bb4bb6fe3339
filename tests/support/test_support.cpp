#include "tests/support/test_support.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <random>
#include <sstream>

#include "comm/rank_protocol.h"
#include "harness/process.h"

namespace bitparity::testing {

namespace fs = std::filesystem;

TempDir::TempDir() {
  std::random_device rd;
  fs::path base = fs::temp_directory_path();
  for (;;) {
    fs::path candidate = base / ("bitparity-test-" + std::to_string(::getpid()) + "-" +
                                 std::to_string(rd() % 1000000));
    if (fs::create_directory(candidate)) {
      path_ = candidate.string();
      return;
    }
  }
}

TempDir::~TempDir() {
  if (std::getenv("BITPARITY_KEEP_TEST_DIRS")) return;
  std::error_code ec;
  fs::remove_all(path_, ec);
}

std::string TempDir::Write(const std::string& name, const std::string& text) const {
  std::string path = File(name);
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

std::string SourceDir() { return BITPARITY_SOURCE_DIR; }
std::string BitparityBinary() { return BITPARITY_BINARY; }

std::vector<std::string> WorkerArguments(const std::string& recipe, const std::string& arm,
                                         const std::string& out_dir) {
  return {"worker", "--recipe", recipe, "--arm", arm, "--out-dir", out_dir};
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

CommandResult RunBitparity(const std::vector<std::string>& args,
                           const std::vector<std::pair<std::string, std::string>>& env) {
  TempDir scratch;
  const std::string log = scratch.File("output.log");
  ProcessOptions process;
  process.executable = BitparityBinary();
  process.arguments = args;
  for (const auto& [key, value] : env) process.set_environment[key] = value;
  process.output_path = log;
  const auto start = std::chrono::steady_clock::now();
  CommandResult result;
  result.exit_code = RunProcess(process);
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  result.output = ReadFile(log);
  return result;
}

CommandResult RunWithBitparityVariable(const std::string& program,
                                       const std::vector<std::string>& args,
                                       const std::string& log) {
  ProcessOptions process;
  process.executable = program;
  process.arguments = args;
  process.set_environment["BITPARITY"] = BitparityBinary();
  process.output_path = log;
  CommandResult result;
  result.exit_code = RunProcess(process);
  result.output = ReadFile(log);
  return result;
}

// PIDs of the processes in /proc (but this one) for which `keep(pid_dir)` holds.
std::vector<int64_t> ProcessesWhere(const std::function<bool(const std::string&)>& keep) {
  std::vector<int64_t> pids;
  for (const auto& entry : fs::directory_iterator("/proc")) {
    const std::string name = entry.path().filename().string();
    if (name.empty() || !std::isdigit(static_cast<unsigned char>(name[0]))) continue;
    if (std::stoll(name) != ::getpid() && keep(entry.path().string())) {
      pids.push_back(std::stoll(name));
    }
  }
  return pids;
}

std::vector<int64_t> ProcessesMentioning(const std::string& needle) {
  return ProcessesWhere([&](const std::string& dir) {
    std::string cmdline = ReadFile(dir + "/cmdline");
    std::replace(cmdline.begin(), cmdline.end(), '\0', ' ');
    return cmdline.find(needle) != std::string::npos;
  });
}

std::vector<int64_t> ProcessesInGroup(int64_t pgid) {
  return ProcessesWhere([&](const std::string& dir) {
    // /proc/PID/stat: "pid (comm) state ppid pgrp ..."; comm may hold spaces and parentheses.
    const std::string stat = ReadFile(dir + "/stat");
    const size_t close = stat.rfind(')');
    if (close == std::string::npos) return false;
    std::istringstream rest(stat.substr(close + 1));
    std::string state;
    int64_t ppid = 0, group = 0;
    if (!(rest >> state >> ppid >> group)) return false;
    return group == pgid && state != "Z" && state != "X";
  });
}

std::vector<int64_t> RankProcessGroups(const std::string& log_dir) {
  std::vector<int64_t> groups;
  if (!fs::is_directory(log_dir)) return groups;
  for (const auto& entry : fs::directory_iterator(log_dir)) {
    std::istringstream in(ReadFile(entry.path().string()));
    std::string line;
    while (std::getline(in, line)) {
      if (std::optional<RankIdentity> identity = ParseRankIdentityLine(line)) {
        groups.push_back(identity->process_group);
      }
    }
  }
  std::sort(groups.begin(), groups.end());
  groups.erase(std::unique(groups.begin(), groups.end()), groups.end());
  return groups;
}

std::string SmallModelTable(int layers, int mtp_layers, int topk) {
  return "[model]\nhidden = 32\nheads = 4\nlayers = " + std::to_string(layers) +
         "\nfirst_k_dense = 1\nexperts = 4\ntopk = " + std::to_string(topk) +
         "\nmoe_ffn = 32\nffn = 64\nvocab = 64\nseq_len = 16\nmtp_layers = " +
         std::to_string(mtp_layers) + "\n";
}

}  // namespace bitparity::testing
