#include "trace/checkpoint_file.h"

#include <hdf5.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "core/errors.h"
#include "trace/hdf5_file.h"
#include "trace/trace_hdf5.h"

namespace bitparity {
namespace {

using trace_hdf5::Hdf5FileReader;
using trace_hdf5::Hdf5FileWriter;
using trace_hdf5::Hid;

constexpr char kParameterNames[] = "parameter_names";
constexpr char kParameters[] = "parameters";
constexpr char kWeightDtype[] = "dtype";

// The counters, as integer attributes of the file's root, in the order docs/checkpoint-format.md
// lists them.
struct PositionField {
  const char* name;
  int64_t TrainingPosition::*member;
};
constexpr PositionField kPositionFields[] = {
    {"iteration", &TrainingPosition::iteration},
    {"optimizer_steps", &TrainingPosition::optimizer_steps},
    {"lr_steps", &TrainingPosition::lr_steps},
    {"data_batches", &TrainingPosition::data_batches},
};

std::vector<hsize_t> ShapeDims(const std::vector<int64_t>& shape) {
  return std::vector<hsize_t>(shape.begin(), shape.end());
}

int64_t Elements(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

void WriteParameter(const Hdf5FileWriter& writer, hid_t parameters, const CheckpointParameter& p) {
  const size_t n = static_cast<size_t>(Elements(p.shape));
  if (p.master.size() != n || p.exp_avg.size() != n || p.exp_avg_sq.size() != n ||
      p.weight_bits.size() != n) {
    throw InfrastructureError(writer.path() + ": parameter " + p.name +
                              " holds tensors of other sizes than its shape");
  }
  Hid group = writer.Group(parameters, p.name);
  const std::vector<hsize_t> dims = ShapeDims(p.shape);
  writer.Dataset(group.get(), "master", dims, H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, p.master.data());
  writer.Dataset(group.get(), "exp_avg", dims, H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, p.exp_avg.data());
  writer.Dataset(group.get(), "exp_avg_sq", dims, H5T_IEEE_F32LE, H5T_NATIVE_FLOAT,
                 p.exp_avg_sq.data());
  if (p.weight_dtype == "bfloat16") {
    std::vector<uint16_t> bits(p.weight_bits.begin(), p.weight_bits.end());
    writer.Dataset(group.get(), "weight", dims, H5T_STD_U16LE, H5T_NATIVE_UINT16, bits.data());
  } else if (p.weight_dtype == "float32") {
    // The bits as they are: the buffer is read as the floats it holds.
    writer.Dataset(group.get(), "weight", dims, H5T_IEEE_F32LE, H5T_NATIVE_FLOAT,
                   p.weight_bits.data());
  } else {
    throw InfrastructureError(writer.path() + ": parameter " + p.name +
                              " has a weight dtype a checkpoint cannot hold: " + p.weight_dtype);
  }
  Hid weight(H5Dopen2(group.get(), "weight", H5P_DEFAULT), H5Dclose);
  writer.StringAttribute(weight.get(), kWeightDtype, p.weight_dtype);
}

class CheckpointReader : public Hdf5FileReader {
 public:
  using Hdf5FileReader::Hdf5FileReader;

  std::vector<float> Floats(hid_t group, const std::string& name,
                            const std::vector<int64_t>& shape) const {
    return Read<float>(group, name, H5T_NATIVE_FLOAT, H5T_FLOAT, ShapeDims(shape));
  }

  // One parameter's group; a problem inside it is named with the parameter
  // ("<path>: parameter layers.0.qkv: dataset 'exp_avg' has shape [4], expected [3]").
  CheckpointParameter ReadParameter(hid_t parameters, const std::string& name) const {
    try {
      return ReadParameterData(parameters, name);
    } catch (const InputError& e) {
      const std::string message = e.what();
      const std::string prefix = path_ + ": ";
      if (message.rfind(prefix, 0) != 0) throw;
      throw InputError(prefix + "parameter " + name + ": " + message.substr(prefix.size()));
    }
  }

 private:
  CheckpointParameter ReadParameterData(hid_t parameters, const std::string& name) const {
    CheckpointParameter p;
    p.name = name;
    Hid group = OpenGroup(parameters, name);
    Hid master = OpenDataset(group.get(), "master");
    for (hsize_t d : Dims(master.get(), name + "/master"))
      p.shape.push_back(static_cast<int64_t>(d));
    p.master = Floats(group.get(), "master", p.shape);
    p.exp_avg = Floats(group.get(), "exp_avg", p.shape);
    p.exp_avg_sq = Floats(group.get(), "exp_avg_sq", p.shape);
    Hid weight = OpenDataset(group.get(), "weight");
    const auto attributes = StringAttributes(weight.get());
    auto dtype = attributes.find(kWeightDtype);
    if (dtype == attributes.end()) Fail("its weight has no dtype attribute");
    p.weight_dtype = dtype->second;
    if (p.weight_dtype == "bfloat16") {
      std::vector<uint16_t> bits = Read<uint16_t>(group.get(), "weight", H5T_NATIVE_UINT16,
                                                  H5T_INTEGER, ShapeDims(p.shape), H5T_SGN_NONE);
      p.weight_bits.assign(bits.begin(), bits.end());
    } else if (p.weight_dtype == "float32") {
      p.weight_bits =
          Read<uint32_t>(group.get(), "weight", H5T_NATIVE_FLOAT, H5T_FLOAT, ShapeDims(p.shape));
    } else {
      Fail("weight dtype '" + p.weight_dtype + "' is not float32 or bfloat16");
    }
    return p;
  }
};

}  // namespace

std::string CheckpointFileName(int64_t rank) { return "rank_" + std::to_string(rank) + ".h5"; }

std::string CheckpointFolder(const std::string& dir, int64_t iteration) {
  return (std::filesystem::path(dir) / ("iteration_" + std::to_string(iteration))).string();
}

void WriteCheckpoint(const std::string& path, const RankCheckpoint& checkpoint) {
  Hdf5FileWriter writer(path);
  trace_hdf5::WriteHdf5FileAtomically(writer, [&](hid_t file) {
    writer.StringAttribute(file, "schema", kCheckpointSchema);
    writer.IntAttribute(file, "schema_version", kCheckpointSchemaVersion);
    writer.IntAttribute(file, "rank", checkpoint.rank);
    writer.IntAttribute(file, "world_size", checkpoint.world_size);
    for (const PositionField& field : kPositionFields) {
      writer.IntAttribute(file, field.name, checkpoint.position.*field.member);
    }
    writer.StringAttribute(file, "recipe", checkpoint.recipe);
    writer.StringAttribute(file, "recipe_digest", checkpoint.recipe_digest);
    writer.StringAttribute(file, "arm", checkpoint.arm);
    writer.StringAttribute(file, "engine", checkpoint.engine);
    std::vector<std::string> names;
    for (const CheckpointParameter& p : checkpoint.parameters) names.push_back(p.name);
    writer.StringDataset(file, kParameterNames, names);
    Hid parameters = writer.Group(file, kParameters);
    for (const CheckpointParameter& p : checkpoint.parameters) {
      WriteParameter(writer, parameters.get(), p);
    }
  });
}

RankCheckpoint ReadCheckpoint(const std::string& path) {
  CheckpointReader reader(path);
  Hid file = trace_hdf5::OpenHdf5File(reader, "checkpoint file");
  const auto attributes = reader.StringAttributes(file.get());
  auto text = [&](const char* name) {
    auto it = attributes.find(name);
    if (it == attributes.end()) reader.Fail(std::string("missing attribute '") + name + "'");
    return it->second;
  };
  if (attributes.count("schema") == 0 || attributes.at("schema") != kCheckpointSchema) {
    reader.Fail(std::string("not a bitparity checkpoint (attribute 'schema' should be '") +
                kCheckpointSchema + "')");
  }
  const int64_t version = reader.IntAttribute(file.get(), "schema_version");
  if (version != kCheckpointSchemaVersion) {
    reader.Fail("checkpoint schema version " + std::to_string(version) +
                " is not supported (this build reads version " +
                std::to_string(kCheckpointSchemaVersion) + ")");
  }
  RankCheckpoint checkpoint;
  checkpoint.rank = reader.IntAttribute(file.get(), "rank");
  checkpoint.world_size = reader.IntAttribute(file.get(), "world_size");
  for (const PositionField& field : kPositionFields) {
    checkpoint.position.*field.member = reader.IntAttribute(file.get(), field.name);
    if (checkpoint.position.*field.member < 0) {
      reader.Fail(std::string("attribute '") + field.name + "' is negative");
    }
  }
  checkpoint.recipe = text("recipe");
  checkpoint.recipe_digest = text("recipe_digest");
  checkpoint.arm = text("arm");
  checkpoint.engine = text("engine");
  const std::vector<std::string> names = reader.ReadStrings(file.get(), kParameterNames);
  Hid parameters = reader.OpenGroup(file.get(), kParameters);
  const std::vector<std::string> stored = reader.Children(parameters.get());
  if (stored.size() != names.size()) {
    reader.Fail("lists " + std::to_string(names.size()) + " parameters but stores " +
                std::to_string(stored.size()));
  }
  for (const std::string& name : names) {
    checkpoint.parameters.push_back(reader.ReadParameter(parameters.get(), name));
  }
  return checkpoint;
}

}  // namespace bitparity
