#ifndef BITPARITY_CORE_ATOMIC_FILE_H_
#define BITPARITY_CORE_ATOMIC_FILE_H_

// Writing a result file so that a reader sees either the old file or the complete new one, never
// a part: every report, trace and golden bitparity writes goes through WriteFileAtomically. The
// bytes go to `<path>.tmp.<mark>` (core/temporary_mark.h) with write(2), are flushed to the disk
// with fsync(2) and renamed over `path`; on any failure the temporary is removed and the old file
// (if any) stays as it was. A full disk is named as such ("no space left on <path>"), with the
// errno, so that the report says what to free rather than which library crashed.

#include <string>

namespace bitparity {

// Writes `bytes` to `path` atomically (see above). InfrastructureError naming `path`, what failed
// and the errno when the file system refuses: a full disk or quota is "no space left on <path>
// (errno 28: No space left on device)"; a write beyond the process's file-size limit (`ulimit -f`;
// bitparity ignores SIGXFSZ, so the write fails with EFBIG instead of killing the process) is
// "file size limit reached writing <path> (errno 27: File too large; raise `ulimit -f`)".
void WriteFileAtomically(const std::string& path, const std::string& bytes);

// "<path>: <doing>: <strerror> (errno N)", or "no space left on <path> (errno N: ...)" for
// ENOSPC and EDQUOT. For messages about a write that failed with `error_number`.
std::string DescribeWriteError(const std::string& path, const std::string& doing, int error_number);

}  // namespace bitparity

#endif  // BITPARITY_CORE_ATOMIC_FILE_H_
