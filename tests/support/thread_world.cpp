#include "tests/support/thread_world.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <exception>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "harness/launcher.h"

namespace bitparity::testing {

void RunOnThreadWorld(int64_t world,
                      const std::function<void(int64_t rank, Communicator& comm)>& body,
                      std::chrono::milliseconds timeout, DeviceKind device) {
  const int port = FreeLoopbackPort();
  // A new thread starts with OpenMP's default team size (every core) and MKL's global thread
  // count until its first ATen parallel loop sets them: each rank thread takes the caller's
  // intra-op thread count before its first operation, as a rank process does.
  const int intra_op_threads = at::get_num_threads();
  std::mutex mutex;
  std::vector<std::pair<int64_t, std::exception_ptr>> errors;  // in the order they were thrown
  std::vector<std::thread> threads;
  for (int64_t r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      try {
        at::set_num_threads(intra_op_threads);
        RankContext context;
        context.rank = r;
        context.world_size = world;
        context.master_port = port;
        auto comm = Communicator::Connect(context, device, timeout);
        body(r, *comm);
        comm->Barrier();
      } catch (...) {
        std::lock_guard<std::mutex> lock(mutex);
        errors.emplace_back(r, std::current_exception());
      }
    });
  }
  for (std::thread& t : threads) t.join();
  if (errors.empty()) return;
  if (errors.size() == 1) std::rethrow_exception(errors.front().second);
  // Several ranks failed: one of them first, the others often because it left (a transfer
  // reset); which came first is a race, so every rank's message is kept, by rank.
  std::sort(errors.begin(), errors.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  std::string joined;
  for (const auto& [rank, error] : errors) {
    try {
      std::rethrow_exception(error);
    } catch (const std::exception& e) {
      joined += (joined.empty() ? "" : "; ") + ("rank " + std::to_string(rank) + ": ") + e.what();
    } catch (...) {
      joined += (joined.empty() ? "" : "; ") + ("rank " + std::to_string(rank) + ": unknown");
    }
  }
  throw std::runtime_error(joined);
}

}  // namespace bitparity::testing
