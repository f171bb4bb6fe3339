#ifndef BITPARITY_TESTS_SUPPORT_THREAD_WORLD_H_
#define BITPARITY_TESTS_SUPPORT_THREAD_WORLD_H_

// Runs one function per rank on threads of this process, each with a real Gloo communicator
// joined over loopback: collectives can be tested without starting processes.

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>

#include "comm/communicator.h"

namespace bitparity::testing {

// Calls body(rank, comm) on `world` threads and waits; rethrows the first exception. Collectives
// give up after `timeout` (a rank that throws leaves its peers waiting that long).
// On DeviceKind::kCuda every rank takes GPU 0 (ranks sharing a GPU: host-staged Gloo).
void RunOnThreadWorld(int64_t world,
                      const std::function<void(int64_t rank, Communicator& comm)>& body,
                      std::chrono::milliseconds timeout = std::chrono::seconds(60),
                      DeviceKind device = DeviceKind::kCpu);

}  // namespace bitparity::testing

#endif  // BITPARITY_TESTS_SUPPORT_THREAD_WORLD_H_
