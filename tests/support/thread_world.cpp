#include "tests/support/thread_world.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace bitparity::testing {

int FreePort() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  int port = ntohs(addr.sin_port);
  ::close(fd);
  return port;
}

void RunOnThreadWorld(int64_t world,
                      const std::function<void(int64_t rank, Communicator& comm)>& body,
                      std::chrono::milliseconds timeout, DeviceKind device) {
  const int port = FreePort();
  std::mutex mutex;
  std::exception_ptr error;
  std::vector<std::thread> threads;
  for (int64_t r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      try {
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
