#ifndef BITPARITY_CORE_CLOCK_H_
#define BITPARITY_CORE_CLOCK_H_

// The two clocks bitparity reads: a steady clock for durations and timelines, and UTC wall time
// for the records a person reads (traces, reports).

#include <cstdint>
#include <string>

namespace bitparity {

// Steady-clock time in nanoseconds (timelines and durations; comparable within one host).
int64_t SteadyNanoseconds();

// The current UTC time in ISO 8601, "2026-12-01T18:41:51Z"; without the zone suffix when
// `with_zone` is false (JUnit's timestamp attribute takes none).
std::string UtcTimestamp(bool with_zone = true);

}  // namespace bitparity

#endif  // BITPARITY_CORE_CLOCK_H_
