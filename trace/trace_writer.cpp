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
#include "trace/hdf5_file.h"
#include "trace/trace.h"
#include "trace/trace_hdf5.h"
#include "trace/trace_keys.h"

namespace bitparity {
namespace {

using namespace trace_hdf5;  // NOLINT(build/namespaces): this file's own format helpers

// ---------------------------------------------------------------------------------------------
// Writing

class Writer : public Hdf5FileWriter {
 public:
  using Hdf5FileWriter::Hdf5FileWriter;

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
};

}  // namespace

void WriteTrace(const std::string& path, const Trace& trace) {
  Writer writer(path);
  WriteHdf5FileAtomically(writer, [&](hid_t file) {
    writer.StringAttribute(file, "schema", kTraceSchema);
    writer.IntAttribute(file, "schema_version", kTraceSchemaVersion);
    for (const auto& [key, value] : trace.attributes) {
      if (key == "schema" || key == "schema_version") continue;
      writer.StringAttribute(file, key, value);
    }
    for (const RankTrace& rank : trace.ranks) writer.WriteRank(file, rank);
  });
}

}  // namespace bitparity
