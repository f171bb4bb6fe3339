// A rank's checkpoint round-trips bit for bit through HDF5 (NaN payloads and bf16 weight bits
// included), is written atomically, and an unusable file is bad input naming the file.

#include "trace/checkpoint_file.h"

#include <gtest/gtest.h>
#include <hdf5.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/errors.h"
#include "numerics/float_bits.h"
#include "tests/support/test_support.h"
#include "tests/support/trace_builder.h"
#include "trace/trace.h"

namespace bitparity {
namespace {

namespace fs = std::filesystem;

RankCheckpoint MakeCheckpoint() {
  RankCheckpoint c;
  c.rank = 1;
  c.world_size = 2;
  c.recipe = "name = \"small\"\n";
  c.recipe_digest = "0x0123456789abcdef";
  c.arm = "overlap";
  c.engine = "overlap";
  c.position = {10, 9, 8, 7};
  CheckpointParameter w;
  w.name = "layers.0.attention.qkv";
  w.shape = {2, 3};
  w.master = {1.0f, -2.5f, FloatFromBits(0x7fc00001), 0.0f, -0.0f, 3.0e-39f};
  w.weight_dtype = "bfloat16";
  w.weight_bits = {0x3f80, 0xc020, 0x7fc1, 0x0000, 0x8000, 0x0021};
  w.exp_avg = {0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f};
  w.exp_avg_sq = {1e-8f, 2e-8f, 3e-8f, 4e-8f, 5e-8f, 6e-8f};
  CheckpointParameter r;
  r.name = "layers.1.mlp.router";
  r.shape = {3};
  r.master = {0.5f, 0.25f, -0.125f};
  r.weight_dtype = "float32";
  for (float v : r.master) r.weight_bits.push_back(FloatBits(v));
  r.weight_bits[2] = 0xffc00002;  // a NaN's payload survives in the fp32 weight too
  r.exp_avg = {0, 0, 0};
  r.exp_avg_sq = {1, 2, 3};
  c.parameters = {w, r};
  return c;
}

std::vector<uint32_t> Bits(const std::vector<float>& values) {
  std::vector<uint32_t> bits;
  for (float v : values) bits.push_back(FloatBits(v));
  return bits;
}

void ExpectBadCheckpoint(const std::string& path, const std::string& reason) {
  try {
    ReadCheckpoint(path);
    FAIL() << "read an unusable checkpoint";
  } catch (const InputError& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find(path), std::string::npos) << message;
    EXPECT_NE(message.find(reason), std::string::npos) << message;
  }
}

TEST(CheckpointFile, RoundTripsEveryFieldBitForBit) {
  testing::TempDir dir;
  const RankCheckpoint written = MakeCheckpoint();
  WriteCheckpoint(dir.File("rank_1.h5"), written);
  const RankCheckpoint read = ReadCheckpoint(dir.File("rank_1.h5"));
  EXPECT_EQ(read.rank, 1);
  EXPECT_EQ(read.world_size, 2);
  EXPECT_EQ(read.recipe, written.recipe);
  EXPECT_EQ(read.recipe_digest, written.recipe_digest);
  EXPECT_EQ(read.arm, "overlap");
  EXPECT_EQ(read.engine, "overlap");
  EXPECT_TRUE(read.position == written.position);
  ASSERT_EQ(read.parameters.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    const CheckpointParameter& a = written.parameters[i];
    const CheckpointParameter& b = read.parameters[i];
    EXPECT_EQ(a.name, b.name);  // in the model's order, not HDF5's name order
    EXPECT_EQ(a.shape, b.shape);
    EXPECT_EQ(Bits(a.master), Bits(b.master)) << a.name;
    EXPECT_EQ(Bits(a.exp_avg), Bits(b.exp_avg)) << a.name;
    EXPECT_EQ(Bits(a.exp_avg_sq), Bits(b.exp_avg_sq)) << a.name;
    EXPECT_EQ(a.weight_dtype, b.weight_dtype);
    EXPECT_EQ(a.weight_bits, b.weight_bits) << a.name;
  }
}

TEST(CheckpointFile, AFolderPerIterationAndAFilePerRank) {
  EXPECT_EQ(CheckpointFileName(3), "rank_3.h5");
  EXPECT_EQ(CheckpointFolder("out/ckpt", 10), "out/ckpt/iteration_10");
}

TEST(CheckpointFile, AnUnusableFileIsBadInputNamingIt) {
  testing::TempDir dir;
  ExpectBadCheckpoint(dir.File("missing.h5"), "checkpoint file not found");
  WriteCheckpoint(dir.File("good.h5"), MakeCheckpoint());
  const std::string bytes = testing::ReadFile(dir.File("good.h5"));
  {
    std::ofstream truncated(dir.File("truncated.h5"), std::ios::binary);
    truncated << bytes.substr(0, bytes.size() / 2);
  }
  ExpectBadCheckpoint(dir.File("truncated.h5"), "truncated or corrupt");
  {
    std::ofstream text(dir.File("text.h5"), std::ios::binary);
    text << "not a checkpoint\n";
  }
  ExpectBadCheckpoint(dir.File("text.h5"), "not an HDF5 file");
  fs::create_directories(dir.File("folder.h5"));
  ExpectBadCheckpoint(dir.File("folder.h5"), "is a directory");
}

TEST(CheckpointFile, AProblemInsideAParameterNamesTheParameter) {
  testing::TempDir dir;
  WriteCheckpoint(dir.File("rank_1.h5"), MakeCheckpoint());
  {  // exp_avg of the first parameter replaced by a dataset of another shape
    const hid_t file = H5Fopen(dir.File("rank_1.h5").c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    ASSERT_GE(file, 0);
    const std::string group = "parameters/layers.0.attention.qkv";
    ASSERT_GE(H5Ldelete(file, (group + "/exp_avg").c_str(), H5P_DEFAULT), 0);
    const hsize_t dims[1] = {4};
    const hid_t space = H5Screate_simple(1, dims, nullptr);
    const hid_t set = H5Dcreate2(file, (group + "/exp_avg").c_str(), H5T_IEEE_F32LE, space,
                                 H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    const float zeros[4] = {0, 0, 0, 0};
    H5Dwrite(set, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, zeros);
    H5Dclose(set);
    H5Sclose(space);
    H5Fclose(file);
  }
  ExpectBadCheckpoint(dir.File("rank_1.h5"),
                      ": parameter layers.0.attention.qkv: dataset 'exp_avg' has shape [4], "
                      "expected [2,3]");
}

TEST(CheckpointFile, ATraceIsNotACheckpoint) {
  testing::TempDir dir;
  WriteTrace(dir.File("trace.h5"), testing::MakeTrace(1, 2));
  ExpectBadCheckpoint(dir.File("trace.h5"), "not a bitparity checkpoint");
}

TEST(CheckpointFile, StateOfOtherSizesOrAnUnknownDtypeWritesNothing) {
  testing::TempDir dir;
  RankCheckpoint bad = MakeCheckpoint();
  bad.parameters[0].master.pop_back();  // a writer's own bug: sizes that disagree with the shape
  EXPECT_THROW(WriteCheckpoint(dir.File("bad.h5"), bad), InfrastructureError);
  EXPECT_FALSE(fs::exists(dir.File("bad.h5")));
  bad = MakeCheckpoint();
  bad.parameters[1].weight_dtype = "float16";
  EXPECT_THROW(WriteCheckpoint(dir.File("bad.h5"), bad), InfrastructureError);
  EXPECT_FALSE(fs::exists(dir.File("bad.h5")));
}

}  // namespace
}  // namespace bitparity
