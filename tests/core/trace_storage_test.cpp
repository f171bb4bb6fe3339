// Traces round-trip bit for bit through HDF5, are written atomically, and any unusable file
// is reported as bad input naming the file and the reason.

#include <gtest/gtest.h>
#include <hdf5.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <tuple>
#include <vector>

#include "core/errors.h"
#include "harness/isolated_trace_read.h"
#include "numerics/float_bits.h"
#include "tests/support/test_support.h"
#include "tests/support/trace_builder.h"
#include "trace/trace.h"

namespace bitparity {
namespace {

namespace fs = std::filesystem;

void ExpectBadTrace(const std::string& path, const std::string& reason) {
  try {
    ReadTrace(path);
    FAIL() << "read an unusable trace";
  } catch (const InputError& e) {
    std::string message = e.what();
    EXPECT_NE(message.find(path), std::string::npos) << message;
    EXPECT_NE(message.find(reason), std::string::npos) << message;
  }
}

TEST(TraceStorage, RoundTripsEveryRecordBitForBit) {
  testing::TempDir dir;
  Trace written = testing::MakeTrace(2, 3);
  written.ranks[1].iterations[2].loss = FloatFromBits(0x7fc00001);  // a NaN payload survives too
  written.ranks[1].replay_census = {{1, 0, 1, 2, 300, 200, 100}, {3, 1, 0, 1, 7, -8, 9}};
  written.ranks[0].schedule_timeline = {{"attn", 0, 0, 0, 50, "forward", 0},
                                        {"moe_dispatch", 1, 1, 40, 90, "replay", 30}};
  WriteTrace(dir.File("t.h5"), written);
  Trace read = ReadTrace(dir.File("t.h5"));
  EXPECT_EQ(read.attribute("arm"), "reference");
  EXPECT_EQ(read.attribute("schema"), kTraceSchema);
  ASSERT_EQ(read.ranks.size(), 2u);
  for (size_t r = 0; r < 2; ++r) {
    const RankTrace& a = written.ranks[r];
    const RankTrace& b = read.ranks[r];
    EXPECT_EQ(a.param_names, b.param_names);
    EXPECT_EQ(a.param_shapes, b.param_shapes);
    EXPECT_EQ(b.attributes.at("provenance.host"), "test");
    ASSERT_EQ(a.schedule_timeline.size(), b.schedule_timeline.size());
    for (size_t i = 0; i < a.schedule_timeline.size(); ++i) {
      const ScheduleInterval& x = a.schedule_timeline[i];
      const ScheduleInterval& y = b.schedule_timeline[i];
      EXPECT_EQ(std::tie(x.node, x.microbatch, x.comm, x.begin_ns, x.end_ns, x.phase, x.wait_ns),
                std::tie(y.node, y.microbatch, y.comm, y.begin_ns, y.end_ns, y.phase, y.wait_ns));
    }
    ASSERT_EQ(a.replay_census.size(), b.replay_census.size());
    for (size_t i = 0; i < a.replay_census.size(); ++i) {
      const ReplayCensusSample& x = a.replay_census[i];
      const ReplayCensusSample& y = b.replay_census[i];
      EXPECT_EQ(std::tie(x.iteration, x.chunk, x.microbatch, x.segment, x.live_bytes, x.model_bytes,
                         x.segment_bytes),
                std::tie(y.iteration, y.chunk, y.microbatch, y.segment, y.live_bytes, y.model_bytes,
                         y.segment_bytes));
    }
    ASSERT_EQ(a.iterations.size(), b.iterations.size());
    for (size_t i = 0; i < a.iterations.size(); ++i) {
      EXPECT_EQ(FloatBits(a.iterations[i].loss), FloatBits(b.iterations[i].loss));
      EXPECT_EQ(DoubleBits(a.iterations[i].grad_norm), DoubleBits(b.iterations[i].grad_norm));
      EXPECT_EQ(a.iterations[i].grad_digests, b.iterations[i].grad_digests);
      EXPECT_EQ(a.iterations[i].param_digests, b.iterations[i].param_digests);
      EXPECT_EQ(a.iterations[i].peak_bytes, b.iterations[i].peak_bytes);
    }
    ASSERT_EQ(b.grad_dumps.size(), 1u);
    const auto& dumps = b.grad_dumps.at(2);
    ASSERT_EQ(dumps.size(), 2u);
    for (size_t p = 0; p < 2; ++p) {
      const TensorDump* original = nullptr;
      for (const auto& d : a.grad_dumps.at(2)) {
        if (d.name == dumps[p].name) original = &d;
      }
      ASSERT_NE(original, nullptr);
      EXPECT_EQ(original->shape, dumps[p].shape);
      ASSERT_EQ(original->values.size(), dumps[p].values.size());
      for (size_t i = 0; i < original->values.size(); ++i) {
        EXPECT_EQ(FloatBits(original->values[i]), FloatBits(dumps[p].values[i]));
      }
    }
  }
}

TEST(TraceStorage, WriteLeavesNoTemporaryFilesAndReplacesAtomically) {
  testing::TempDir dir;
  WriteTrace(dir.File("t.h5"), testing::MakeTrace(1, 2));
  WriteTrace(dir.File("t.h5"), testing::MakeTrace(1, 4));
  EXPECT_EQ(ReadTrace(dir.File("t.h5")).ranks[0].iterations.size(), 4u);
  int files = 0;
  for (const auto& entry : fs::directory_iterator(dir.path())) {
    ++files;
    EXPECT_EQ(entry.path().filename(), "t.h5");
  }
  EXPECT_EQ(files, 1);
}

TEST(TraceStorage, WriteIntoMissingDirectoryFailsWithoutLeavingFiles) {
  testing::TempDir dir;
  EXPECT_THROW(WriteTrace(dir.File("missing/t.h5"), testing::MakeTrace(1, 1)), InfrastructureError);
  EXPECT_FALSE(fs::exists(dir.File("missing")));
}

TEST(TraceStorage, MissingFileIsBadInput) {
  testing::TempDir dir;
  ExpectBadTrace(dir.File("absent.h5"), "trace file not found");
}

TEST(TraceStorage, NonHdf5FileIsBadInput) {
  testing::TempDir dir;
  ExpectBadTrace(dir.Write("text.h5", "this is not HDF5\n"), "not an HDF5 file");
}

TEST(TraceStorage, TruncatedFileIsBadInput) {
  testing::TempDir dir;
  WriteTrace(dir.File("t.h5"), testing::MakeTrace(2, 3));
  const auto size = fs::file_size(dir.File("t.h5"));
  for (uintmax_t keep : {size / 2, size - 100, uintmax_t{600}}) {
    fs::copy_file(dir.File("t.h5"), dir.File("cut.h5"), fs::copy_options::overwrite_existing);
    fs::resize_file(dir.File("cut.h5"), keep);
    try {
      ReadTrace(dir.File("cut.h5"));
      ADD_FAILURE() << "read a trace truncated to " << keep << " bytes";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(dir.File("cut.h5")), std::string::npos) << e.what();
    }
  }
}

TEST(TraceStorage, CorruptedBytesAreBadInputNotACrash) {
  testing::TempDir dir;
  WriteTrace(dir.File("t.h5"), testing::MakeTrace(2, 3));
  const std::string original = testing::ReadFile(dir.File("t.h5"));
  int rejected = 0, accepted = 0;
  // Overwrite a window of bytes at many offsets; every outcome must be a clean read or an
  // InputError, never a crash or another exception type. Read as every file from outside is
  // (ReadTraceIsolated): HDF5 itself crashes on some corrupt layouts, which must become bad input.
  for (size_t offset = 0; offset + 64 < original.size(); offset += original.size() / 40) {
    std::string bytes = original;
    for (size_t i = 0; i < 64; ++i) bytes[offset + i] = static_cast<char>(0xA5 ^ i);
    std::ofstream(dir.File("bad.h5"), std::ios::binary) << bytes;
    try {
      ReadTraceIsolated(dir.File("bad.h5"));
      ++accepted;
    } catch (const InputError&) {
      ++rejected;
    }
  }
  EXPECT_GT(rejected, 0);
  SUCCEED() << rejected << " rejected, " << accepted << " readable";
}

// An HDF5 file with one string attribute on its root, written with the HDF5 C API.
void WriteHdf5WithSchema(const std::string& path, const char* schema) {
  hid_t file = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  hid_t type = H5Tcopy(H5T_C_S1);
  H5Tset_size(type, H5T_VARIABLE);
  hid_t space = H5Screate(H5S_SCALAR);
  hid_t attr = H5Acreate2(file, "schema", type, space, H5P_DEFAULT, H5P_DEFAULT);
  H5Awrite(attr, type, &schema);
  H5Aclose(attr);
  H5Sclose(space);
  H5Tclose(type);
  H5Fclose(file);
}

TEST(TraceStorage, OtherHdf5FileIsBadInput) {
  testing::TempDir dir;
  WriteHdf5WithSchema(dir.File("other.h5"), "somebody.else");
  ExpectBadTrace(dir.File("other.h5"), "not a bitparity trace");
}

TEST(TraceStorage, MissingLayoutIsBadInput) {
  testing::TempDir dir;
  WriteTrace(dir.File("t.h5"), testing::MakeTrace(1, 2));
  hid_t file = H5Fopen(dir.File("t.h5").c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  ASSERT_GE(file, 0);
  ASSERT_GE(H5Ldelete(file, "rank_00000/grad_digest", H5P_DEFAULT), 0);
  H5Fclose(file);
  ExpectBadTrace(dir.File("t.h5"), "missing dataset 'grad_digest'");
}

// The schedule timeline's phase and wait_ns came into the format together: a trace from before
// them reads them as defaults, and a trace with one of the two is bad input.
TEST(TraceStorage, ATablesLaterColumnsArePresentTogetherOrAbsentTogether) {
  testing::TempDir dir;
  Trace written = testing::MakeTrace(1, 2);
  written.ranks[0].schedule_timeline = {{"attn", 0, 0, 0, 50, "forward", 7}};
  const auto delete_columns = [&](const std::string& path, std::vector<const char*> columns) {
    WriteTrace(path, written);
    hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    ASSERT_GE(file, 0);
    for (const char* column : columns) {
      const std::string link = std::string("rank_00000/schedule_timeline/") + column;
      ASSERT_GE(H5Ldelete(file, link.c_str(), H5P_DEFAULT), 0);
    }
    H5Fclose(file);
  };
  delete_columns(dir.File("older.h5"), {"phase", "wait_ns"});
  const ScheduleInterval read = ReadTrace(dir.File("older.h5")).ranks[0].schedule_timeline.at(0);
  EXPECT_EQ(std::tie(read.node, read.end_ns, read.phase, read.wait_ns),
            std::make_tuple(std::string("attn"), int64_t{50}, std::string(), int64_t{0}));
  delete_columns(dir.File("half.h5"), {"wait_ns"});
  ExpectBadTrace(dir.File("half.h5"), "schedule_timeline has column phase but not wait_ns");
}

// Replaces dataset `path` of trace `file` by a chunked float dataset of `dims` with nothing
// written: HDF5 stores a few hundred bytes and reads the rest as fill values.
void ReplaceWithEmptyDataset(const std::string& file_path, const std::string& path,
                             std::vector<hsize_t> dims) {
  hid_t file = H5Fopen(file_path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  ASSERT_GE(file, 0);
  ASSERT_GE(H5Ldelete(file, path.c_str(), H5P_DEFAULT), 0);
  hid_t space = H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr);
  hid_t create = H5Pcreate(H5P_DATASET_CREATE);
  std::vector<hsize_t> chunk(dims.size(), 1);
  H5Pset_chunk(create, static_cast<int>(chunk.size()), chunk.data());
  hid_t set =
      H5Dcreate2(file, path.c_str(), H5T_IEEE_F32LE, space, H5P_DEFAULT, create, H5P_DEFAULT);
  ASSERT_GE(set, 0);
  H5Dclose(set);
  H5Pclose(create);
  H5Sclose(space);
  H5Fclose(file);
}

TEST(TraceStorage, ADeclaredSizeTheFileCannotHoldIsBadInputBeforeAllocating) {
  testing::TempDir dir;
  // 2^34 iterations (128 GiB of records) declared in a file of a few KiB: refused, not
  // allocated.
  WriteTrace(dir.File("huge.h5"), testing::MakeTrace(1, 2));
  ReplaceWithEmptyDataset(dir.File("huge.h5"), "rank_00000/iteration", {hsize_t{1} << 34});
  ExpectBadTrace(dir.File("huge.h5"), "(a crafted or corrupt file)");
  // A dump whose shape is not its parameter's (w is [3, 4]).
  WriteTrace(dir.File("shape.h5"), testing::MakeTrace(1, 2));
  ReplaceWithEmptyDataset(dir.File("shape.h5"), "rank_00000/grad_dumps/iter_000002/w", {4, 3});
  ExpectBadTrace(dir.File("shape.h5"),
                 "dump 'w' of iteration 2 has shape [4,3], the parameter's is [3,4]");
  // A parameter shape whose element count overflows.
  Trace overflow = testing::MakeTrace(1, 2);
  overflow.ranks[0].param_shapes[1] = {int64_t{1} << 32, int64_t{1} << 32};
  overflow.ranks[0].grad_dumps.clear();
  WriteTrace(dir.File("overflow.h5"), overflow);
  ExpectBadTrace(dir.File("overflow.h5"), "parameter 'b' has a shape of more than 2^40 elements");
}

TEST(TraceStorage, AFileThatCrashesTheHdf5LibraryIsBadInput) {
  // Found by fuzz/fuzz_trace: a corrupt global-heap length makes HDF5 1.10's H5HG_read copy
  // far beyond its buffer while reading a string attribute.
  const std::string crash =
      testing::SourceDir() + "/tests/data/fuzz/crashes/hdf5_global_heap_length.h5";
  try {
    ReadTraceIsolated(crash);
    FAIL() << "read a trace that crashes the HDF5 library";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(crash), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("the HDF5 library crashed reading it"), std::string::npos)
        << e.what();
  }
  // A good trace reads the same either way; a bad one is the same InputError.
  testing::TempDir dir;
  WriteTrace(dir.File("t.h5"), testing::MakeTrace(2, 3));
  EXPECT_EQ(ReadTraceIsolated(dir.File("t.h5")).ranks.size(), 2u);
  try {
    ReadTraceIsolated(dir.File("missing.h5"));
    FAIL() << "read a missing file";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("missing.h5"), std::string::npos) << e.what();
  }
}

TEST(TraceStorage, IncompleteWorldIsBadInput) {
  testing::TempDir dir;
  Trace t = testing::MakeTrace(2, 2);
  t.attributes["world_size"] = "4";
  WriteTrace(dir.File("t.h5"), t);
  ExpectBadTrace(dir.File("t.h5"), "world_size is 4");
  EXPECT_NO_THROW(ReadTrace(dir.File("t.h5"), /*require_complete=*/false));
}

}  // namespace
}  // namespace bitparity
