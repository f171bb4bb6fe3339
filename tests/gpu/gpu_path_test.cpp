// The GPU path where a GPU exists (ci/device-check runs this binary there; without a GPU every
// test is skipped, saying so):
//   - the tensor quantizer on the GPU gives the CPU emulation's codes and values bit for bit,
//     every float through E4M3 and E5M2 included;
//   - native blockwise FP8 GEMMs (forward, dgrad, wgrad) on the quantized operands stay within
//     a stated bound of the emulated ones, and the measured errors are printed;
//   - the determinism switches are in effect and a GEMM reproduces its bits;
//   - the memory tracker reads the caching allocator;
//   - the model on the GPU: each arm reproduces itself, and the overlap arm equals the reference
//     arm bit for bit;
//   - NCCL (a process group of one rank): the all-to-all on the communication stream, its CUDA
//     events, and the other collectives.

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>
#include <thread>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "comm/communicator.h"
#include "config/recipe.h"
#include "core/cuda_support.h"
#include "core/memory.h"
#include "harness/launcher.h"
#include "model/ops.h"
#include "numerics/determinism.h"
#include "numerics/fp8.h"
#include "numerics/fp8_tensor.h"
#include "tests/support/random_tensor.h"
#include "tests/support/recipe_builder.h"
#include "tests/support/test_support.h"
#include "tests/support/thread_trainer.h"
#include "tests/support/thread_world.h"

namespace bitparity {
namespace {

class GpuEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    PinEnvironment("cuda");
    ConfigureDeterminism(1);
    if (cuda::DeviceCount() > 0) cuda::ConfigureDeterminism();
  }
};
const auto* const kEnvironment = ::testing::AddGlobalTestEnvironment(new GpuEnvironment);

#define SKIP_WITHOUT_GPU()                                                 \
  if (cuda::DeviceCount() == 0) {                                          \
    GTEST_SKIP() << (cuda::Compiled() ? "no GPU visible" : "no GPU path"); \
  }

const at::Device kGpu(at::kCUDA, 0);

at::Tensor RandomNormal(const std::vector<int64_t>& shape, uint64_t stream, double scale = 1.0) {
  return testing::RandomNormal(shape, 77, stream, scale);
}

TEST(GpuPath, EveryFloatEncodesOnTheGpuAsInTheEmulation) {
  SKIP_WITHOUT_GPU();
  constexpr int64_t kChunk = int64_t{1} << 26;
  // The CPU side encodes on every core (codes do not depend on the thread count).
  const int threads = at::get_num_threads();
  at::set_num_threads(static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
  for (const bool e4m3 : {true, false}) {
    const double max = e4m3 ? fp8::kE4M3Max : fp8::kE5M2Max;
    const at::ScalarType dtype = e4m3 ? at::kFloat8_e4m3fn : at::kFloat8_e5m2;
    for (int64_t start = 0; start < (int64_t{1} << 32); start += kChunk) {
      at::Tensor values =
          at::arange(start, start + kChunk, at::kLong).to(at::kUInt32).view(at::kFloat);
      at::Tensor gpu = values.to(kGpu);
      at::Tensor saturated = at::where(at::isnan(gpu), gpu, gpu.clamp(-max, max));
      at::Tensor theirs = saturated.to(dtype).view(at::kByte).cpu();
      at::Tensor ours = at::empty({kChunk}, at::kByte);
      const float* in = values.data_ptr<float>();
      uint8_t* out = ours.data_ptr<uint8_t>();
      at::parallel_for(0, kChunk, 1 << 16, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) {
          out[i] = e4m3 ? fp8::EncodeE4M3(in[i]) : fp8::EncodeE5M2(in[i]);
        }
      });
      EXPECT_TRUE(at::equal(ours, theirs))
          << (e4m3 ? "E4M3" : "E5M2") << ": codes differ in the chunk from bit pattern " << start;
      if (HasFailure()) break;
    }
  }
  at::set_num_threads(threads);
}

TEST(GpuPath, TensorQuantizerOnTheGpuGivesTheEmulationsValues) {
  SKIP_WITHOUT_GPU();
  struct Case {
    int64_t rows, cols, block_rows, block_cols;
    fp8::Scaling scaling;
  };
  const fp8::Scaling kB = fp8::Scaling::kBlockwise, kMx = fp8::Scaling::kMx;
  const Case cases[] = {{300, 260, 1, 128, kB},  {300, 260, 128, 128, kB}, {300, 260, 128, 1, kB},
                        {300, 260, 1, 32, kMx},  {300, 260, 32, 1, kMx},   {1024, 512, 1, 128, kB},
                        {129, 129, 128, 128, kB}};
  uint64_t stream = 0;
  for (const Case& c : cases) {
    ++stream;
    at::Tensor m =
        RandomNormal({c.rows, c.cols}, stream, std::ldexp(1.0, static_cast<int>(stream) - 4));
    m.view({-1})[0] = std::numeric_limits<float>::quiet_NaN();
    m.view({-1})[1] = std::numeric_limits<float>::infinity();
    m.view({-1})[2] = 1e30f;
    at::Tensor emulated = m.clone();
    fp8::QuantizeDequantize(emulated.data_ptr<float>(), c.rows, c.cols, c.block_rows, c.block_cols,
                            c.scaling);
    at::Tensor gpu =
        fp8::Dequantize(fp8::QuantizeBlocks(m.to(kGpu), c.block_rows, c.block_cols, c.scaling))
            .cpu();
    at::Tensor differ =
        gpu.view(at::kInt)
            .ne(emulated.view(at::kInt))
            .logical_and(at::isnan(gpu).logical_and(at::isnan(emulated)).logical_not());
    EXPECT_EQ(differ.sum().item<int64_t>(), 0)
        << c.rows << "x" << c.cols << " blocks " << c.block_rows << "x" << c.block_cols;
  }
}

// max |native - emulated| over the largest |emulated| of a GEMM's output, and the Frobenius
// relative error.
struct GemmError {
  double max_over_largest = 0;
  double frobenius = 0;
};
GemmError Compare(const at::Tensor& native, const at::Tensor& emulated) {
  at::Tensor n = native.to(at::kDouble).cpu(), e = emulated.to(at::kDouble).cpu();
  GemmError error;
  error.max_over_largest = (n - e).abs().max().item<double>() / e.abs().max().item<double>();
  error.frobenius = (n - e).norm().item<double>() / e.norm().item<double>();
  return error;
}

TEST(GpuPath, NativeBlockwiseGemmsStayWithinTheBoundOfTheEmulatedOnes) {
  SKIP_WITHOUT_GPU();
  if (cuda::Info(0).sm_major != 9) GTEST_SKIP() << "native blockwise FP8 needs sm_90";
  PrecisionConfig emulated, native;
  emulated.recipe = native.recipe = PrecisionRecipe::kBlockwise;
  native.fp8_backend = Fp8Backend::kNative;
  // The dequantized operands are exact in bf16 and both GEMMs accumulate their exact products in
  // fp32, in different orders; the bf16 outputs then differ by about one bf16 rounding of the
  // output's size. The bound: 2^-7 of the largest output element (measured values printed).
  const double kBound = std::ldexp(1.0, -7);
  struct Shape {
    int64_t tokens, in, out;
  };
  for (const Shape& s : {Shape{256, 512, 384}, Shape{300, 256, 128}, Shape{1000, 1024, 512}}) {
    at::Tensor x = RandomNormal({s.tokens, s.in}, 1).to(kGpu).to(at::kBFloat16);
    at::Tensor w = RandomNormal({s.out, s.in}, 2, 0.05).to(kGpu).to(at::kBFloat16);
    at::Tensor g = RandomNormal({s.tokens, s.out}, 3, 0.01).to(kGpu).to(at::kBFloat16);
    auto run = [&](const PrecisionConfig& p) {
      at::Tensor xr = x.detach().requires_grad_(), wr = w.detach().requires_grad_();
      at::Tensor y = ops::Linear(xr, wr, p);
      y.backward(g);
      return std::vector<at::Tensor>{y.detach(), xr.grad(), wr.grad()};
    };
    const std::vector<at::Tensor> e = run(emulated), n = run(native);
    const char* names[] = {"forward", "dgrad", "wgrad"};
    for (int i = 0; i < 3; ++i) {
      const GemmError error = Compare(n[i], e[i]);
      std::printf(
          "native vs emulated blockwise %s, %lldx%lldx%lld: max |diff| / max |y| %.3e, "
          "Frobenius %.3e\n",
          names[i], static_cast<long long>(s.tokens), static_cast<long long>(s.in),
          static_cast<long long>(s.out), error.max_over_largest, error.frobenius);
      EXPECT_LE(error.max_over_largest, kBound) << names[i];
      EXPECT_GT(error.frobenius, 0.0) << names[i] << ": bit-identical is not expected";
    }
  }
}

TEST(GpuPath, DeterminismSwitchesAreInEffectAndAGemmReproducesItsBits) {
  SKIP_WITHOUT_GPU();
  EXPECT_TRUE(at::globalContext().deterministicAlgorithms());
  EXPECT_FALSE(at::globalContext().allowTF32CuBLAS());
  EXPECT_STREQ(std::getenv("CUBLAS_WORKSPACE_CONFIG"), ":4096:8");
  const auto provenance = cuda::Provenance(0);
  for (const char* key : {"gpu_name", "gpu_sm", "cuda_runtime", "cublas", "cudnn", "nccl"}) {
    ASSERT_TRUE(provenance.count(key)) << key;
    EXPECT_NE(provenance.at(key), "unknown") << key;
  }
  at::Tensor a = RandomNormal({2048, 1024}, 4).to(kGpu), b = RandomNormal({1024, 768}, 5).to(kGpu);
  at::Tensor first = at::mm(a, b), second = at::mm(a, b);
  EXPECT_TRUE(at::equal(first, second));
  // fp32 GEMMs run in fp32, not TF32: close to the float64 product.
  at::Tensor exact = at::mm(a.to(at::kDouble), b.to(at::kDouble));
  EXPECT_LT(Compare(first, exact).max_over_largest, 1e-5);
}

TEST(GpuPath, MemoryTrackerReadsTheCachingAllocator) {
  SKIP_WITHOUT_GPU();
  MemoryTracker::TrackCudaDevice(0);
  const int64_t before = MemoryTracker::current_bytes();
  MemoryTracker::ResetPeak();
  {
    at::Tensor big = at::empty({16 << 20}, at::TensorOptions().dtype(at::kFloat).device(kGpu));
    EXPECT_GE(MemoryTracker::current_bytes() - before, int64_t{64} << 20);
  }
  EXPECT_EQ(MemoryTracker::current_bytes(), before);
  EXPECT_GE(MemoryTracker::peak_bytes() - before, int64_t{64} << 20);
  MemoryTracker::ResetPeak();
  EXPECT_EQ(MemoryTracker::peak_bytes(), MemoryTracker::current_bytes());
}

// One rank in this process: LibTorch's autograd engine runs every backward on a GPU on one thread
// per device, so two ranks as threads of one process would wait for each other's collectives on
// it. Several ranks on the GPU are the multi-process runs of ci/device-check.
TEST(GpuPath, OverlapArmEqualsTheReferenceArmOnTheGpu) {
  SKIP_WITHOUT_GPU();
  const Recipe recipe = testing::RecipeBuilder(3, 1)
                            .Set("parallel.device", "cuda")
                            .Set("parallel.ep", 1)
                            .Set("train.global_batch", 6)
                            .Set("train.lr", 1e-2)
                            .Set("precision.recipe", "bf16")
                            .Arm("reference", "reference", testing::FullRecompute("uniform", 1))
                            .Arm("overlap", "overlap")
                            .Build("gpu.toml");
  testing::RankRecords reference = testing::TrainOnThreads(recipe, "reference");
  EXPECT_EQ(testing::FirstDifference(reference, testing::TrainOnThreads(recipe, "reference")), "")
      << "the reference arm does not reproduce itself on the GPU";
  testing::RankRecords overlap = testing::TrainOnThreads(recipe, "overlap");
  EXPECT_EQ(testing::FirstDifference(overlap, testing::TrainOnThreads(recipe, "overlap")), "")
      << "the overlap arm does not reproduce itself on the GPU";
  EXPECT_EQ(testing::FirstDifference(reference, overlap), "");
  EXPECT_LT(overlap.records[0].back().loss, overlap.records[0].front().loss);
}

// NCCL on one GPU: a process group of one rank, so that the communication stream, its events
// and the compute stream's wait run for real.
TEST(GpuPath, NcclAllToAllRunsOnTheCommStreamAndMovesBytesExactly) {
  SKIP_WITHOUT_GPU();
  c10d::TCPStoreOptions options;
  options.port = static_cast<uint16_t>(FreeLoopbackPort());
  options.isServer = true;
  options.numWorkers = 1;
  RankContext context;
  context.master_port = options.port;
  auto store = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", options);
  std::shared_ptr<Communicator> comm =
      Communicator::Join(store, context, DeviceKind::kCuda, std::chrono::seconds(60));
  ASSERT_EQ(comm->transport(), Transport::kNccl) << comm->transport_description();
  at::Tensor rows = RandomNormal({4096, 1024}, 6).to(kGpu).to(at::kBFloat16);
  comm->ResetStats();
  PendingAllToAll pending = comm->StartAllToAll(rows, {4096}, {4096});
  // Compute queued while the exchange is in flight, on the compute stream.
  at::Tensor busy = at::mm(rows, rows.t());
  at::Tensor received = pending.Wait();
  EXPECT_TRUE(at::equal(received, rows));
  const CommStats& stats = comm->stats();
  EXPECT_EQ(stats.count, 1);
  EXPECT_GT(stats.in_flight_seconds, 0.0);
  std::printf("NCCL all-to-all of 8 MiB on one GPU: %.3f ms in flight, %.3f ms exposed\n",
              stats.in_flight_seconds * 1e3, stats.exposed_seconds * 1e3);
  at::Tensor counts = at::tensor(std::vector<int64_t>{3, 5}, at::kLong);
  EXPECT_TRUE(at::equal(comm->AllToAll(counts, {2}, {2}), counts));  // a host tensor over NCCL
  EXPECT_TRUE(at::equal(comm->AllReduceSumOrdered(busy), busy));
  comm->Barrier();
}

}  // namespace
}  // namespace bitparity
