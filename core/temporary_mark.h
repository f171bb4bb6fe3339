#ifndef BITPARITY_CORE_TEMPORARY_MARK_H_
#define BITPARITY_CORE_TEMPORARY_MARK_H_

// The mark bitparity puts in the name of every temporary it creates (an atomic write's
// "<path>.tmp.<mark>", a launcher's "<trace>.parts.<mark>" folder), so that the clean-up of an
// interrupted run removes only its own debris, and only when the mark proves the owner gone.
//
// A mark is "<machine>-<pid>-<start>": <machine> 16 hex digits of the host name, the boot id and
// the pid namespace (one kernel's view of pids: another host, a reboot or another container has
// another), <pid> the creating process, <start> its start time in clock ticks since boot (which
// tells a reused pid from the owner). The owner is gone when the machine is this one and the
// pid runs no more, or runs a process started at another time. A name without a mark (a
// user's "notes.parts.4242"), or a mark of another machine (a folder shared with another host or
// container), is never judged gone. Torch-free.

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>

namespace bitparity {

struct TemporaryMark {
  std::string machine;  // 16 lowercase hex digits
  pid_t pid = 0;
  uint64_t start = 0;  // clock ticks after boot
};

// This process's mark, "<machine>-<pid>-<start>".
const std::string& ThisProcessMark();
// This machine's part of a mark.
const std::string& ThisMachineMark();

// The mark of a temporary's file name "<base>.tmp.<mark>" or "<base>.parts.<mark>", if it has one.
std::optional<TemporaryMark> ParseTemporaryMark(const std::string& file_name);

// Whether the mark proves its owner gone: same machine, and its pid not running or running a
// process that started at another time. This process is never gone.
bool OwnerIsGone(const TemporaryMark& mark);

}  // namespace bitparity

#endif  // BITPARITY_CORE_TEMPORARY_MARK_H_
