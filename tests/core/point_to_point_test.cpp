// Point-to-point transfers and subgroups of the communicator: what pipeline stages exchange.
// Bits arrive as sent, receives match sends by (peer, tag) whatever order either side posts
// them in, and subgroups of one world (EP groups inside pipeline groups) work side by side. The
// pipeline channel on top matches by order within a lane and checks each transfer's label.

#include <gtest/gtest.h>

#include <mutex>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "comm/pipeline_channel.h"
#include "core/errors.h"
#include "tests/support/random_tensor.h"
#include "tests/support/thread_world.h"
#include "trace/digest.h"

namespace bitparity {
namespace {

uint64_t Bits(const at::Tensor& t) {
  at::Tensor c = t.contiguous();
  return Digest(c.data_ptr(), static_cast<size_t>(c.numel()) * c.element_size());
}

at::Tensor Payload(int64_t seed, at::ScalarType dtype) {
  return testing::RandomNormal({3, 5, 7}, 42, static_cast<uint64_t>(seed)).to(dtype);
}

TEST(PointToPoint, ReceivesMatchSendsByTagAndKeepEveryBit) {
  testing::RunOnThreadWorld(2, [&](int64_t rank, Communicator& comm) {
    if (rank == 0) {
      // Sent in tag order 1, 2, 3; received below in the order 3, 1, 2.
      std::vector<PendingTransfer> sends;
      sends.push_back(comm.StartSend(Payload(1, at::kFloat), 1, 1));
      sends.push_back(comm.StartSend(Payload(2, at::kBFloat16), 1, 2));
      sends.push_back(comm.StartSend(Payload(3, at::kFloat), 1, 3));
      for (PendingTransfer& s : sends) s.Wait();
      EXPECT_EQ(comm.stats().p2p.count, 3);
      EXPECT_EQ(comm.stats().p2p.bytes, 105 * 4 + 105 * 2 + 105 * 4);
    } else {
      PendingTransfer third = comm.StartRecv({3, 5, 7}, at::kFloat, 0, 3);
      PendingTransfer first = comm.StartRecv({3, 5, 7}, at::kFloat, 0, 1);
      PendingTransfer second = comm.StartRecv({3, 5, 7}, at::kBFloat16, 0, 2);
      EXPECT_EQ(Bits(third.Wait()), Bits(Payload(3, at::kFloat)));
      EXPECT_EQ(Bits(first.Wait()), Bits(Payload(1, at::kFloat)));
      at::Tensor bf16 = second.Wait();
      EXPECT_EQ(bf16.scalar_type(), at::kBFloat16);
      EXPECT_EQ(Bits(bf16), Bits(Payload(2, at::kBFloat16)));
    }
  });
}

// Transfers of one (peer, tag) arrive in the order they were sent.
TEST(PointToPoint, TransfersOfOneTagArriveInOrder) {
  testing::RunOnThreadWorld(2, [&](int64_t rank, Communicator& comm) {
    if (rank == 1) {
      for (int64_t i = 0; i < 4; ++i) comm.StartSend(Payload(10 + i, at::kFloat), 0, 7).Wait();
    } else {
      std::vector<PendingTransfer> receives;
      for (int64_t i = 0; i < 4; ++i)
        receives.push_back(comm.StartRecv({3, 5, 7}, at::kFloat, 1, 7));
      for (int64_t i = 0; i < 4; ++i) {
        EXPECT_EQ(Bits(receives[i].Wait()), Bits(Payload(10 + i, at::kFloat))) << "transfer " << i;
      }
    }
  });
}

// A world of 4 as 2 pipeline stages of EP 2: rank = stage x 2 + ep_rank. Each stage's EP group
// runs an all-to-all while the pipeline groups move a tensor from stage 0 to stage 1.
// Within a lane, transfers match in order; the two lanes (activations, gradients) keep their own
// orders, so a gradient sent before an activation can be received after it.
TEST(PipelineChannel, LanesKeepTheirOwnOrderAndLabelsCheckEachReceive) {
  testing::RunOnThreadWorld(2, [&](int64_t rank, Communicator& comm) {
    PipelineChannel channel(&comm);
    EXPECT_TRUE(channel.labelled());
    if (rank == 0) {
      std::vector<PendingTransfer> sends;
      channel.Send(Payload(1, at::kFloat), 1, {true, 1, 0}, &sends);
      channel.Send(Payload(2, at::kFloat), 1, {false, 1, 0}, &sends);
      channel.Send(Payload(3, at::kFloat), 1, {false, 1, 1}, &sends);
      for (PendingTransfer& s : sends) s.Wait();
    } else {
      PendingPipelineReceive a0 = channel.Receive({3, 5, 7}, at::kFloat, 0, {false, 1, 0});
      PendingPipelineReceive a1 = channel.Receive({3, 5, 7}, at::kFloat, 0, {false, 1, 1});
      PendingPipelineReceive g0 = channel.Receive({3, 5, 7}, at::kFloat, 0, {true, 1, 0});
      EXPECT_EQ(Bits(a0.Wait()), Bits(Payload(2, at::kFloat)));
      EXPECT_EQ(Bits(a1.Wait()), Bits(Payload(3, at::kFloat)));
      EXPECT_EQ(Bits(g0.Wait()), Bits(Payload(1, at::kFloat)));
    }
  });
}

// A receive posted out of the sender's order takes the next transfer of its lane, and its label
// says so: the receive fails naming the rank, the pass it was for and the pass that arrived.
TEST(PipelineChannel, AReceiveOutOfTheSendersOrderFailsNamingBothPasses) {
  std::string message;
  testing::RunOnThreadWorld(2, [&](int64_t rank, Communicator& comm) {
    PipelineChannel channel(&comm);
    if (rank == 0) {
      std::vector<PendingTransfer> sends;
      channel.Send(Payload(1, at::kFloat), 1, {false, 3, 0}, &sends);
      channel.Send(Payload(2, at::kFloat), 1, {false, 3, 1}, &sends);
      for (PendingTransfer& s : sends) s.Wait();
    } else {
      PendingPipelineReceive second = channel.Receive({3, 5, 7}, at::kFloat, 0, {false, 3, 1});
      PendingPipelineReceive first = channel.Receive({3, 5, 7}, at::kFloat, 0, {false, 3, 0});
      try {
        second.Wait();
      } catch (const InfrastructureError& e) {
        message = e.what();
      }
      EXPECT_THROW(first.Wait(), InfrastructureError);  // it got the second transfer
    }
  });
  EXPECT_EQ(message,
            "pp rank 1: the pipeline receive posted for the activation entering stage 3 for "
            "microbatch 1 from pp rank 0 got the activation entering stage 3 for microbatch 0: "
            "the two ranks post their transfers in different orders");
}

TEST(PointToPoint, SubgroupsOfOneWorldWorkSideBySide) {
  std::mutex mutex;
  std::vector<uint64_t> received(4, 0);
  testing::RunOnThreadWorld(4, [&](int64_t rank, Communicator& world) {
    const int64_t stage = rank / 2, ep_rank = rank % 2;
    auto ep = world.Subgroup("ep/" + std::to_string(stage), {stage * 2, stage * 2 + 1});
    auto pipeline = world.Subgroup("pp/" + std::to_string(ep_rank), {ep_rank, 2 + ep_rank});
    EXPECT_EQ(ep->rank(), ep_rank);
    EXPECT_EQ(ep->world_size(), 2);
    EXPECT_EQ(pipeline->rank(), stage);

    at::Tensor rows = at::full({2, 3}, static_cast<float>(rank));
    at::Tensor exchanged = ep->AllToAll(rows, {1, 1}, {1, 1});
    // Row j came from EP rank j of this stage.
    EXPECT_EQ(exchanged[0][0].item<float>(), static_cast<float>(stage * 2));
    EXPECT_EQ(exchanged[1][0].item<float>(), static_cast<float>(stage * 2 + 1));

    if (stage == 0) {
      pipeline->StartSend(Payload(100 + ep_rank, at::kBFloat16), 1, 0).Wait();
    } else {
      at::Tensor got = pipeline->StartRecv({3, 5, 7}, at::kBFloat16, 0, 0).Wait();
      std::lock_guard<std::mutex> lock(mutex);
      received[static_cast<size_t>(rank)] = Bits(got);
    }
  });
  EXPECT_EQ(received[2], Bits(Payload(100, at::kBFloat16)));
  EXPECT_EQ(received[3], Bits(Payload(101, at::kBFloat16)));
}

TEST(PointToPoint, APeerOutsideTheGroupIsAProgrammingError) {
  testing::RunOnThreadWorld(2, [&](int64_t rank, Communicator& comm) {
    EXPECT_THROW(comm.StartSend(Payload(1, at::kFloat), rank, 0), std::logic_error);
    EXPECT_THROW(comm.StartRecv({1}, at::kFloat, 5, 0), std::logic_error);
    EXPECT_THROW(comm.Subgroup("x", {1 - rank}), std::logic_error);
  });
}

}  // namespace
}  // namespace bitparity
