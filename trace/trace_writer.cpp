#include <hdf5.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <sstream>
#include <thread>
#include <type_traits>
#include <utility>
#include <variant>

#include "core/atomic_file.h"
#include "core/errors.h"
#include "trace/trace.h"
#include "trace/trace_hdf5.h"
#include "trace/trace_keys.h"

namespace bitparity {
namespace {

using namespace trace_hdf5;  // NOLINT(build/namespaces): this file's own format helpers

// ---------------------------------------------------------------------------------------------
// Writing

class Writer {
 public:
  explicit Writer(std::string path) : path_(std::move(path)) {}

  void Check(herr_t status, const std::string& what) const {
    if (status < 0) throw InfrastructureError(path_ + ": HDF5 failed to " + what);
  }
  Hid CheckId(hid_t id, herr_t (*closer)(hid_t), const std::string& what) const {
    if (id < 0) throw InfrastructureError(path_ + ": HDF5 failed to " + what);
    return Hid(id, closer);
  }

  Hid StringType() const {
    Hid type = CheckId(H5Tcopy(H5T_C_S1), H5Tclose, "create a string type");
    Check(H5Tset_size(type.get(), H5T_VARIABLE), "size a string type");
    Check(H5Tset_cset(type.get(), H5T_CSET_UTF8), "set a string charset");
    return type;
  }

  void StringAttribute(hid_t loc, const std::string& name, const std::string& value) const {
    Hid type = StringType();
    Hid space = CheckId(H5Screate(H5S_SCALAR), H5Sclose, "create a scalar space");
    Hid attr =
        CheckId(H5Acreate2(loc, name.c_str(), type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT),
                H5Aclose, "create attribute " + name);
    const char* data = value.c_str();
    Check(H5Awrite(attr.get(), type.get(), &data), "write attribute " + name);
  }

  void IntAttribute(hid_t loc, const std::string& name, int64_t value) const {
    Hid space = CheckId(H5Screate(H5S_SCALAR), H5Sclose, "create a scalar space");
    Hid attr =
        CheckId(H5Acreate2(loc, name.c_str(), H5T_STD_I64LE, space.get(), H5P_DEFAULT, H5P_DEFAULT),
                H5Aclose, "create attribute " + name);
    Check(H5Awrite(attr.get(), H5T_NATIVE_INT64, &value), "write attribute " + name);
  }

  Hid Group(hid_t loc, const std::string& name) const {
    return CheckId(H5Gcreate2(loc, name.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Gclose,
                   "create group " + name);
  }

  void Dataset(hid_t loc, const std::string& name, const std::vector<hsize_t>& dims,
               hid_t file_type, hid_t memory_type, const void* data, bool compress = false) const {
    Hid space = CheckId(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr),
                        H5Sclose, "create a data space for " + name);
    Hid create = CheckId(H5Pcreate(H5P_DATASET_CREATE), H5Pclose, "create dataset properties");
    hsize_t count = 1;
    for (hsize_t d : dims) count *= d;
    if (compress && count > 0) {
      // Byte-shuffled deflate over chunks of whole rows: lossless, a few ten percent smaller.
      std::vector<hsize_t> chunk = dims;
      hsize_t elements = count;
      for (size_t d = 0; d < chunk.size() && elements > (hsize_t{1} << 18); ++d) {
        elements /= chunk[d];
        chunk[d] = 1;
      }
      Check(H5Pset_chunk(create.get(), static_cast<int>(chunk.size()), chunk.data()),
            "chunk " + name);
      Check(H5Pset_shuffle(create.get()), "shuffle " + name);
      Check(H5Pset_deflate(create.get(), 4), "deflate " + name);
    }
    Hid set = CheckId(H5Dcreate2(loc, name.c_str(), file_type, space.get(), H5P_DEFAULT,
                                 create.get(), H5P_DEFAULT),
                      H5Dclose, "create dataset " + name);
    if (count > 0) {
      Check(H5Dwrite(set.get(), memory_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data),
            "write dataset " + name);
    }
  }

  void StringDataset(hid_t loc, const std::string& name,
                     const std::vector<std::string>& values) const {
    std::vector<const char*> pointers;
    for (const std::string& v : values) pointers.push_back(v.c_str());
    Hid type = StringType();
    Dataset(loc, name, {values.size()}, type.get(), type.get(), pointers.data());
  }

  void WriteRank(hid_t file, const RankTrace& rank) const {
    Hid group = Group(file, GroupNameForRank(rank.rank));
    IntAttribute(group.get(), "rank", rank.rank);
    for (const auto& [key, value] : rank.attributes) StringAttribute(group.get(), key, value);
    const hid_t g = group.get();
    WriteIterations(g, rank);
    WriteTables(g, rank);
    WriteGradDumps(g, rank);
  }

 private:
  // The parameters' names and shapes, one column per IterationRecord scalar, and the digests.
  void WriteIterations(hid_t g, const RankTrace& rank) const {
    const size_t params = rank.param_names.size();
    if (rank.param_shapes.size() != params) {
      throw InfrastructureError(path_ + ": rank " + std::to_string(rank.rank) +
                                " has mismatched parameter names and shapes");
    }
    StringDataset(g, "param_names", rank.param_names);
    std::vector<std::string> shapes;
    for (const auto& s : rank.param_shapes) shapes.push_back(JoinShape(s));
    StringDataset(g, "param_shapes", shapes);

    const size_t n = rank.iterations.size();
    std::vector<uint64_t> grad_digest(n * params), param_digest(n * params);
    for (size_t i = 0; i < n; ++i) {
      const IterationRecord& r = rank.iterations[i];
      if (r.grad_digests.size() != params || r.param_digests.size() != params) {
        throw InfrastructureError(path_ + ": iteration " + std::to_string(r.iteration) +
                                  " of rank " + std::to_string(rank.rank) +
                                  " has the wrong number of digests");
      }
      std::copy(r.grad_digests.begin(), r.grad_digests.end(), grad_digest.begin() + i * params);
      std::copy(r.param_digests.begin(), r.param_digests.end(), param_digest.begin() + i * params);
    }
    for (const IterationColumn& column : kIterationColumns) {
      std::visit(
          [&](auto member) {
            using T = std::remove_reference_t<decltype(IterationRecord{}.*member)>;
            std::vector<T> values(n);
            for (size_t i = 0; i < n; ++i) values[i] = rank.iterations[i].*member;
            Dataset(g, column.name, {n}, ColumnType<T>::File(), ColumnType<T>::Memory(),
                    values.data());
          },
          column.member);
    }
    Dataset(g, "grad_digest", {n, params}, H5T_STD_U64LE, H5T_NATIVE_UINT64, grad_digest.data());
    Dataset(g, "param_digest", {n, params}, H5T_STD_U64LE, H5T_NATIVE_UINT64, param_digest.data());
  }

  // One column of a table group: `member` of every row.
  template <typename Row>
  void Column(hid_t g, const char* name, const std::vector<Row>& rows, int64_t Row::*member) const {
    std::vector<int64_t> values;
    for (const Row& row : rows) values.push_back(row.*member);
    Dataset(g, name, {rows.size()}, H5T_STD_I64LE, H5T_NATIVE_INT64, values.data());
  }
  template <typename Row>
  void Column(hid_t g, const char* name, const std::vector<Row>& rows,
              uint64_t Row::*member) const {
    std::vector<uint64_t> values;
    for (const Row& row : rows) values.push_back(row.*member);
    Dataset(g, name, {rows.size()}, H5T_STD_U64LE, H5T_NATIVE_UINT64, values.data());
  }
  template <typename Row>
  void Column(hid_t g, const char* name, const std::vector<Row>& rows,
              std::string Row::*member) const {
    std::vector<std::string> values;
    for (const Row& row : rows) values.push_back(row.*member);
    StringDataset(g, name, values);
  }

  // A table section: nothing when `rows` is empty, else a group `name` with one dataset per
  // column; the group's handle, for a column written by hand.
  template <typename Row, size_t N>
  Hid WriteTable(hid_t g, const char* name, const std::vector<Row>& rows,
                 const TableColumn<Row> (&columns)[N]) const {
    if (rows.empty()) return Hid();
    Hid table = Group(g, name);
    for (const TableColumn<Row>& column : columns) {
      std::visit([&](auto member) { Column(table.get(), column.name, rows, member); },
                 column.member);
    }
    return table;
  }

  void WriteTables(hid_t g, const RankTrace& rank) const {
    WriteTable(g, "memory_timeline", rank.memory_timeline, kMemoryTimelineColumns);
    WriteTable(g, "schedule_timeline", rank.schedule_timeline, kScheduleTimelineColumns);
    WriteTable(g, "replay_census", rank.replay_census, kReplayCensusColumns);
    Hid probes = WriteTable(g, "probes", rank.probes, kProbeColumns);
    if (!probes.valid()) return;
    std::vector<std::string> shapes;
    for (const ProbeRecord& p : rank.probes) shapes.push_back(JoinShape(p.shape));
    StringDataset(probes.get(), "shape", shapes);
  }

  void WriteGradDumps(hid_t g, const RankTrace& rank) const {
    Hid dumps = Group(g, "grad_dumps");
    for (const auto& [it, tensors] : rank.grad_dumps) {
      Hid iter_group = Group(dumps.get(), GroupNameForIteration(it));
      IntAttribute(iter_group.get(), "iteration", it);
      for (const TensorDump& t : tensors) {
        std::vector<hsize_t> dims(t.shape.begin(), t.shape.end());
        size_t count = 1;
        for (int64_t d : t.shape) count *= static_cast<size_t>(d);
        if (count != t.values.size()) {
          throw InfrastructureError(path_ + ": dump of " + t.name + " has " +
                                    std::to_string(t.values.size()) + " values for shape [" +
                                    JoinShape(t.shape) + "]");
        }
        Dataset(iter_group.get(), t.name, dims, H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, t.values.data(),
                /*compress=*/true);
      }
    }
  }

  std::string path_;
};

}  // namespace

void WriteTrace(const std::string& path, const Trace& trace) {
  QuietHdf5();
  namespace fs = std::filesystem;
  fs::path target(path);
  fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    throw InfrastructureError(path + ": directory " + dir.string() + " does not exist");
  }
  // The file is built in memory (HDF5's core driver without a backing store) and then written by
  // WriteFileAtomically. HDF5 itself never writes to the disk: a full disk is one failed write(2)
  // with its errno and nothing half-written, not a failed flush inside HDF5 whose clean-up
  // crashes the process.
  std::string image;
  {
    Writer writer(path);
    Hid access =
        writer.CheckId(H5Pcreate(H5P_FILE_ACCESS), H5Pclose, "create file access properties");
    writer.Check(H5Pset_fapl_core(access.get(), size_t{1} << 20, /*backing_store=*/0),
                 "select the in-memory file driver");
    Hid file = writer.CheckId(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, access.get()),
                              H5Fclose, "create the file in memory");
    writer.StringAttribute(file.get(), "schema", kTraceSchema);
    writer.IntAttribute(file.get(), "schema_version", kTraceSchemaVersion);
    for (const auto& [key, value] : trace.attributes) {
      if (key == "schema" || key == "schema_version") continue;
      writer.StringAttribute(file.get(), key, value);
    }
    for (const RankTrace& rank : trace.ranks) writer.WriteRank(file.get(), rank);
    writer.Check(H5Fflush(file.get(), H5F_SCOPE_GLOBAL), "flush the file");
    const ssize_t size = H5Fget_file_image(file.get(), nullptr, 0);
    if (size <= 0) throw InfrastructureError(path + ": HDF5 failed to size the file image");
    image.resize(static_cast<size_t>(size));
    if (H5Fget_file_image(file.get(), image.data(), image.size()) != size) {
      throw InfrastructureError(path + ": HDF5 failed to copy the file image");
    }
  }  // every handle is closed here, each object before the file that holds it
  WriteFileAtomically(path, image);
}

}  // namespace bitparity
