#include "tests/support/thread_world.h"

#include <ATen/Parallel.h>

#include <exception>
#include <mutex>
#include <thread>
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
  std::exception_ptr error;
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
        if (!error) error = std::current_exception();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  if (error) std::rethrow_exception(error);
}

}  // namespace bitparity::testing
