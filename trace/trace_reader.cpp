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
#include <optional>
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
// Reading

class Reader : public Hdf5FileReader {
 public:
  using Hdf5FileReader::Hdf5FileReader;

  std::vector<int64_t> ParseShape(const std::string& text, const std::string& param) const {
    std::vector<int64_t> shape;
    if (text.empty()) return shape;
    std::stringstream in(text);
    std::string part;
    int64_t elements = 1;
    while (std::getline(in, part, ',')) {
      try {
        size_t used = 0;
        long long v = std::stoll(part, &used);
        if (used != part.size() || v < 0 || v > (1LL << 40)) throw std::invalid_argument(part);
        shape.push_back(v);
      } catch (const std::exception&) {
        Fail("parameter '" + param + "' has a malformed shape '" + text + "'");
      }
    }
    for (int64_t d : shape) {
      if (d != 0 && elements > (int64_t{1} << 40) / d) {
        Fail("parameter '" + param + "' has a shape of more than 2^40 elements: [" + text + "]");
      }
      elements *= d;
    }
    return shape;
  }

  RankTrace ReadRank(hid_t file, const std::string& group_name) const {
    Hid group = OpenGroup(file, group_name);
    const hid_t g = group.get();
    RankTrace rank;
    rank.rank = IntAttribute(g, "rank");
    if (GroupNameForRank(rank.rank) != group_name) {
      Fail("group '" + group_name + "' holds rank " + std::to_string(rank.rank));
    }
    rank.attributes = StringAttributes(g);
    ReadIterations(g, group_name, &rank);
    ReadTables(g, &rank);
    ReadGradDumps(g, &rank);
    return rank;
  }

 private:
  // The parameters' names and shapes, every IterationRecord column and the digests.
  void ReadIterations(hid_t g, const std::string& group_name, RankTrace* out) const {
    RankTrace& rank = *out;
    rank.param_names = ReadStrings(g, "param_names");
    std::vector<std::string> shapes = ReadStrings(g, "param_shapes");
    const hsize_t params = rank.param_names.size();
    if (shapes.size() != params) Fail(group_name + ": param_shapes and param_names differ in size");
    for (size_t i = 0; i < params; ++i) {
      rank.param_shapes.push_back(ParseShape(shapes[i], rank.param_names[i]));
    }

    Hid iteration_set = OpenDataset(g, "iteration");
    std::vector<hsize_t> dims = Dims(iteration_set.get(), "iteration");
    if (dims.size() != 1) Fail(group_name + "/iteration must be one-dimensional");
    const hsize_t n = CheckedCount(iteration_set.get(), "iteration", dims, sizeof(int64_t));
    std::vector<IterationRecord> records(n);
    for (const IterationColumn& column : kIterationColumns) {
      std::visit(
          [&](auto member) {
            using T = std::remove_reference_t<decltype(IterationRecord{}.*member)>;
            if (column.optional && H5Lexists(g, column.name, H5P_DEFAULT) <= 0) return;
            std::vector<T> values =
                Read<T>(g, column.name, ColumnType<T>::Memory(), ColumnType<T>::kClass, {n});
            for (hsize_t i = 0; i < n; ++i) records[i].*member = values[i];
          },
          column.member);
    }
    auto grad_digest =
        Read<uint64_t>(g, "grad_digest", H5T_NATIVE_UINT64, H5T_INTEGER, {n, params}, H5T_SGN_NONE);
    auto param_digest = Read<uint64_t>(g, "param_digest", H5T_NATIVE_UINT64, H5T_INTEGER,
                                       {n, params}, H5T_SGN_NONE);
    for (hsize_t i = 0; i < n; ++i) {
      IterationRecord& r = records[i];
      if (i > 0 && r.iteration <= records[i - 1].iteration) {
        Fail(group_name + "/iteration is not strictly increasing");
      }
      r.grad_digests.assign(grad_digest.begin() + i * params,
                            grad_digest.begin() + (i + 1) * params);
      r.param_digests.assign(param_digest.begin() + i * params,
                             param_digest.begin() + (i + 1) * params);
    }
    rank.iterations = std::move(records);
  }

  // A table group (one row per element of each column dataset): its handle, its name and its
  // row count, read from `key_column`, which must be one-dimensional.
  struct Table {
    Hid group;
    std::string name;
    std::vector<hsize_t> dims;
    hid_t get() const { return group.get(); }
  };

  // nullopt when `g` holds no group `name` (every table is an optional section).
  std::optional<Table> OpenTable(hid_t g, const std::string& name,
                                 const std::string& key_column) const {
    if (H5Lexists(g, name.c_str(), H5P_DEFAULT) <= 0) return std::nullopt;
    Table table{OpenGroup(g, name), name, {}};
    Hid set = OpenDataset(table.get(), key_column);
    table.dims = Dims(set.get(), name + "/" + key_column);
    set.Reset();
    if (table.dims.size() != 1) Fail(name + "/" + key_column + " must be one-dimensional");
    return table;
  }

  std::vector<int64_t> Int64Column(const Table& table, const std::string& column) const {
    return Read<int64_t>(table.get(), column, H5T_NATIVE_INT64, H5T_INTEGER, table.dims);
  }

  std::vector<std::string> StringColumn(const Table& table, const std::string& column) const {
    std::vector<std::string> values = ReadStrings(table.get(), column);
    if (values.size() != table.dims[0]) Fail(table.name + "/" + column + " has the wrong length");
    return values;
  }

  // A table section into `rows`, one per element of its columns (left empty when the trace has
  // no such group); the table, for a column read by hand.
  template <typename Row, size_t N>
  std::optional<Table> ReadTable(hid_t g, const char* name, const TableColumn<Row> (&columns)[N],
                                 std::vector<Row>* rows) const {
    std::optional<Table> table = OpenTable(g, name, columns[0].name);
    if (!table) return table;
    rows->assign(table->dims[0], Row{});
    // The optional columns came into the format together: a table has all of them or none.
    const char* present = nullptr;
    const char* absent = nullptr;
    for (const TableColumn<Row>& column : columns) {
      if (!column.optional) continue;
      (H5Lexists(table->get(), column.name, H5P_DEFAULT) > 0 ? present : absent) = column.name;
    }
    if (present && absent) {
      Fail(std::string(name) + " has column " + present + " but not " + absent);
    }
    for (const TableColumn<Row>& column : columns) {
      if (column.optional && absent) continue;
      std::visit([&](auto member) { ReadColumn(*table, column.name, member, rows); },
                 column.member);
    }
    return table;
  }

  template <typename Row>
  void ReadColumn(const Table& table, const char* name, int64_t Row::*member,
                  std::vector<Row>* rows) const {
    const std::vector<int64_t> values = Int64Column(table, name);
    for (size_t i = 0; i < values.size(); ++i) (*rows)[i].*member = values[i];
  }
  template <typename Row>
  void ReadColumn(const Table& table, const char* name, uint64_t Row::*member,
                  std::vector<Row>* rows) const {
    const std::vector<uint64_t> values =
        Read<uint64_t>(table.get(), name, H5T_NATIVE_UINT64, H5T_INTEGER, table.dims, H5T_SGN_NONE);
    for (size_t i = 0; i < values.size(); ++i) (*rows)[i].*member = values[i];
  }
  template <typename Row>
  void ReadColumn(const Table& table, const char* name, std::string Row::*member,
                  std::vector<Row>* rows) const {
    std::vector<std::string> values = StringColumn(table, name);
    for (size_t i = 0; i < values.size(); ++i) (*rows)[i].*member = std::move(values[i]);
  }

  void ReadTables(hid_t g, RankTrace* out) const {
    ReadTable(g, "memory_timeline", kMemoryTimelineColumns, &out->memory_timeline);
    ReadTable(g, "schedule_timeline", kScheduleTimelineColumns, &out->schedule_timeline);
    ReadTable(g, "replay_census", kReplayCensusColumns, &out->replay_census);
    const std::optional<Table> probes = ReadTable(g, "probes", kProbeColumns, &out->probes);
    if (!probes) return;
    const std::vector<std::string> shapes = StringColumn(*probes, "shape");
    for (size_t i = 0; i < shapes.size(); ++i) {
      out->probes[i].shape = ParseShape(shapes[i], "probes/shape #" + std::to_string(i));
    }
  }

  // Each dump must be one of the rank's parameters, with its shape.
  void ReadGradDumps(hid_t g, RankTrace* out) const {
    RankTrace& rank = *out;
    Hid dumps = OpenGroup(g, "grad_dumps");
    for (const std::string& iter_name : Children(dumps.get())) {
      Hid iter_group = OpenGroup(dumps.get(), iter_name);
      int64_t it = IntAttribute(iter_group.get(), "iteration");
      if (GroupNameForIteration(it) != iter_name) {
        Fail("dump group '" + iter_name + "' holds iteration " + std::to_string(it));
      }
      std::vector<TensorDump> tensors;
      for (const std::string& tensor_name : Children(iter_group.get())) {
        Hid set = OpenDataset(iter_group.get(), tensor_name);
        std::vector<hsize_t> tdims = Dims(set.get(), tensor_name);
        set.Reset();
        // A dump is a parameter's main grad: it has that parameter's shape.
        auto param = std::find(rank.param_names.begin(), rank.param_names.end(), tensor_name);
        if (param == rank.param_names.end()) {
          Fail("dump '" + tensor_name + "' of iteration " + std::to_string(it) +
               " names no parameter of rank " + std::to_string(rank.rank));
        }
        const std::vector<int64_t>& expected =
            rank.param_shapes[static_cast<size_t>(param - rank.param_names.begin())];
        if (std::vector<int64_t>(tdims.begin(), tdims.end()) != expected) {
          std::vector<int64_t> got(tdims.begin(), tdims.end());
          Fail("dump '" + tensor_name + "' of iteration " + std::to_string(it) + " has shape [" +
               JoinShape(got) + "], the parameter's is [" + JoinShape(expected) + "]");
        }
        TensorDump dump;
        dump.name = tensor_name;
        dump.shape.assign(tdims.begin(), tdims.end());
        dump.values =
            Read<float>(iter_group.get(), tensor_name, H5T_NATIVE_FLOAT, H5T_FLOAT, tdims);
        tensors.push_back(std::move(dump));
      }
      rank.grad_dumps[it] = std::move(tensors);
    }
  }
};

}  // namespace

Trace ReadTrace(const std::string& path, bool require_complete) {
  Reader reader(path);
  Hid file = OpenHdf5File(reader, "trace file");

  Trace trace;
  trace.attributes = reader.StringAttributes(file.get());
  auto schema = trace.attributes.find("schema");
  if (schema == trace.attributes.end() || schema->second != kTraceSchema) {
    reader.Fail("not a bitparity trace (attribute 'schema' should be '" +
                std::string(kTraceSchema) + "')");
  }
  int64_t version = reader.IntAttribute(file.get(), "schema_version");
  if (version != kTraceSchemaVersion) {
    reader.Fail("trace schema version " + std::to_string(version) + " is not supported (this " +
                "build reads version " + std::to_string(kTraceSchemaVersion) + ")");
  }
  for (const std::string& child : reader.Children(file.get())) {
    if (child.rfind("rank_", 0) != 0) reader.Fail("unexpected top-level object '" + child + "'");
    trace.ranks.push_back(reader.ReadRank(file.get(), child));
  }
  if (trace.ranks.empty()) reader.Fail("holds no rank records");
  if (!require_complete) return trace;
  for (size_t i = 0; i < trace.ranks.size(); ++i) {
    if (trace.ranks[i].rank != static_cast<int64_t>(i)) {
      reader.Fail("rank records are not numbered 0.." + std::to_string(trace.ranks.size() - 1));
    }
  }
  const std::string& world = trace.attribute(trace_keys::kWorldSize);
  if (!world.empty() && world != std::to_string(trace.ranks.size())) {
    reader.Fail("holds " + std::to_string(trace.ranks.size()) + " rank(s) but its world_size is " +
                world + " (an incomplete trace?)");
  }
  const size_t iterations = trace.ranks[0].iterations.size();
  for (const RankTrace& r : trace.ranks) {
    if (r.iterations.size() != iterations) {
      reader.Fail("rank " + std::to_string(r.rank) + " holds " +
                  std::to_string(r.iterations.size()) + " iterations, rank 0 holds " +
                  std::to_string(iterations));
    }
  }
  return trace;
}

}  // namespace bitparity
