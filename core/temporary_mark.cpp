#include "core/temporary_mark.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <sstream>

namespace bitparity {

namespace {

// FNV-1a, 64 bits: a stable digest of the machine's identity.
uint64_t Fnv1a(const std::string& text) {
  uint64_t hash = 0xcbf29ce484222325ULL;
  for (unsigned char c : text) {
    hash ^= c;
    hash *= 0x100000001b3ULL;
  }
  return hash;
}

std::string FirstLine(const char* path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

// Field 22 of /proc/<pid>/stat (the start time in clock ticks), or nullopt when the process
// does not exist. The command name (field 2) may hold spaces and parentheses: fields are counted
// after its last ')'.
std::optional<uint64_t> StartTime(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  if (!in) return std::nullopt;
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t close = stat.rfind(')');
  if (close == std::string::npos) return std::nullopt;
  std::istringstream fields(stat.substr(close + 1));
  std::string field;
  for (int i = 3; i <= 22; ++i) {
    if (!(fields >> field)) return std::nullopt;
  }
  try {
    return std::stoull(field);
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

bool IsHex(const std::string& s) {
  return s.find_first_not_of("0123456789abcdef") == std::string::npos;
}
bool IsDigits(const std::string& s) {
  return !s.empty() && s.size() <= 20 && s.find_first_not_of("0123456789") == std::string::npos;
}

}  // namespace

const std::string& ThisMachineMark() {
  static const std::string mark = [] {
    char host[256] = {};
    ::gethostname(host, sizeof(host) - 1);
    struct stat ns {};
    const bool has_ns = ::stat("/proc/self/ns/pid", &ns) == 0;
    const std::string identity = std::string(host) + "\n" +
                                 FirstLine("/proc/sys/kernel/random/boot_id") + "\n" +
                                 (has_ns ? std::to_string(ns.st_ino) : std::string("-"));
    char hex[17];
    std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(Fnv1a(identity)));
    return std::string(hex);
  }();
  return mark;
}

const std::string& ThisProcessMark() {
  static const std::string mark = ThisMachineMark() + "-" + std::to_string(::getpid()) + "-" +
                                  std::to_string(StartTime(::getpid()).value_or(0));
  return mark;
}

std::optional<TemporaryMark> ParseTemporaryMark(const std::string& file_name) {
  for (const char* tag : {".parts.", ".tmp."}) {
    const size_t at = file_name.rfind(tag);
    if (at == std::string::npos) continue;
    const std::string mark = file_name.substr(at + std::string(tag).size());
    const size_t first = mark.find('-');
    const size_t second = first == std::string::npos ? first : mark.find('-', first + 1);
    if (second == std::string::npos) continue;
    TemporaryMark parsed;
    parsed.machine = mark.substr(0, first);
    const std::string pid = mark.substr(first + 1, second - first - 1);
    const std::string start = mark.substr(second + 1);
    if (parsed.machine.size() != 16 || !IsHex(parsed.machine) || !IsDigits(pid) || pid.size() > 9 ||
        !IsDigits(start)) {
      continue;
    }
    parsed.pid = static_cast<pid_t>(std::stol(pid));
    parsed.start = std::stoull(start);
    return parsed;
  }
  return std::nullopt;
}

bool OwnerIsGone(const TemporaryMark& mark) {
  if (mark.machine != ThisMachineMark() || mark.pid <= 0 || mark.pid == ::getpid()) return false;
  if (::kill(mark.pid, 0) != 0 && errno == ESRCH) return true;
  const std::optional<uint64_t> start = StartTime(mark.pid);
  return start && *start != mark.start;  // the pid now names another process
}

}  // namespace bitparity
