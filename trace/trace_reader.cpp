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
#include "trace/trace.h"
#include "trace/trace_hdf5.h"
#include "trace/trace_keys.h"

namespace bitparity {
namespace {

using namespace trace_hdf5;  // NOLINT(build/namespaces): this file's own format helpers

// ---------------------------------------------------------------------------------------------
// Reading

class Reader {
 public:
  explicit Reader(std::string path) : path_(std::move(path)) {}

  [[noreturn]] void Fail(const std::string& reason) const {
    throw InputError(path_ + ": " + reason);
  }

  Hid Open(hid_t loc, const std::string& name, const std::string& what) const {
    if (H5Lexists(loc, name.c_str(), H5P_DEFAULT) <= 0) Fail("missing " + what + " '" + name + "'");
    H5O_info_t info;
    if (H5Oget_info_by_name2(loc, name.c_str(), &info, H5O_INFO_BASIC, H5P_DEFAULT) < 0) {
      Fail("cannot read " + what + " '" + name + "'");
    }
    if (info.type == H5O_TYPE_GROUP) {
      hid_t id = H5Gopen2(loc, name.c_str(), H5P_DEFAULT);
      if (id < 0) Fail("cannot open group '" + name + "'");
      return Hid(id, H5Gclose);
    }
    if (info.type == H5O_TYPE_DATASET) {
      hid_t id = H5Dopen2(loc, name.c_str(), H5P_DEFAULT);
      if (id < 0) Fail("cannot open dataset '" + name + "'");
      return Hid(id, H5Dclose);
    }
    Fail(what + " '" + name + "' has an unexpected object type");
  }

  Hid OpenGroup(hid_t loc, const std::string& name) const {
    Hid h = Open(loc, name, "group");
    if (H5Iget_type(h.get()) != H5I_GROUP) Fail("'" + name + "' is not a group");
    return h;
  }

  Hid OpenDataset(hid_t loc, const std::string& name) const {
    Hid h = Open(loc, name, "dataset");
    if (H5Iget_type(h.get()) != H5I_DATASET) Fail("'" + name + "' is not a dataset");
    return h;
  }

  std::vector<hsize_t> Dims(hid_t set, const std::string& name) const {
    Hid space(H5Dget_space(set), H5Sclose);
    if (!space.valid()) Fail("cannot read the shape of '" + name + "'");
    int rank = H5Sget_simple_extent_ndims(space.get());
    if (rank < 0) Fail("cannot read the shape of '" + name + "'");
    std::vector<hsize_t> dims(rank);
    if (rank > 0) H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr);
    return dims;
  }

  // Before a dataset of `dims` is allocated: its element count must not overflow, and the file must
  // hold its bytes. HDF5 lets a small file declare an enormous dataset (unwritten chunks read as
  // fill values); a trace's datasets are written whole, and shuffle + deflate shrinks them by at
  // most about 1000:1, so a declared size far beyond the stored bytes is a crafted or corrupt file.
  size_t CheckedCount(hid_t set, const std::string& name, const std::vector<hsize_t>& dims,
                      size_t element_size) const {
    constexpr hsize_t kMaxElements = hsize_t{1} << 40;
    hsize_t count = 1;
    for (hsize_t d : dims) {
      if (d != 0 && count > kMaxElements / d) {
        Fail("dataset '" + name + "' declares more than 2^40 elements");
      }
      count *= d;
    }
    const hsize_t stored = H5Dget_storage_size(set);
    const hsize_t bytes = count * element_size;
    if (bytes > stored * 1100 + (hsize_t{1} << 20)) {
      Fail("dataset '" + name + "' declares " + std::to_string(bytes) + " bytes but the file " +
           "stores " + std::to_string(stored) + " (a crafted or corrupt trace)");
    }
    return static_cast<size_t>(count);
  }

  // Checks the stored type class and size so that bits read back are the bits written.
  void CheckType(hid_t set, const std::string& name, H5T_class_t cls, size_t size,
                 H5T_sign_t sign = H5T_SGN_ERROR) const {
    Hid type(H5Dget_type(set), H5Tclose);
    if (!type.valid()) Fail("cannot read the type of '" + name + "'");
    bool ok = H5Tget_class(type.get()) == cls && H5Tget_size(type.get()) == size;
    if (ok && sign != H5T_SGN_ERROR) ok = H5Tget_sign(type.get()) == sign;
    if (!ok) Fail("dataset '" + name + "' has an unexpected element type");
  }

  template <typename T>
  std::vector<T> Read(hid_t loc, const std::string& name, hid_t memory_type, H5T_class_t cls,
                      const std::vector<hsize_t>& expected_dims,
                      H5T_sign_t sign = H5T_SGN_ERROR) const {
    Hid set = OpenDataset(loc, name);
    CheckType(set.get(), name, cls, sizeof(T), sign);
    std::vector<hsize_t> dims = Dims(set.get(), name);
    if (dims != expected_dims) {
      std::vector<int64_t> got(dims.begin(), dims.end()),
          want(expected_dims.begin(), expected_dims.end());
      Fail("dataset '" + name + "' has shape [" + JoinShape(got) + "], expected [" +
           JoinShape(want) + "]");
    }
    const size_t count = CheckedCount(set.get(), name, dims, sizeof(T));
    std::vector<T> out(count);
    if (count > 0 &&
        H5Dread(set.get(), memory_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, out.data()) < 0) {
      Fail("cannot read dataset '" + name + "' (truncated or corrupt file)");
    }
    return out;
  }

  std::vector<std::string> ReadStrings(hid_t loc, const std::string& name) const {
    Hid set = OpenDataset(loc, name);
    Hid type(H5Dget_type(set.get()), H5Tclose);
    if (!type.valid() || H5Tget_class(type.get()) != H5T_STRING ||
        !H5Tis_variable_str(type.get())) {
      Fail("dataset '" + name + "' is not a variable-length string dataset");
    }
    std::vector<hsize_t> dims = Dims(set.get(), name);
    if (dims.size() != 1) Fail("dataset '" + name + "' must be one-dimensional");
    // Variable-length strings are stored as 16-byte heap references.
    std::vector<char*> raw(CheckedCount(set.get(), name, dims, 16), nullptr);
    Hid mem(H5Tcopy(H5T_C_S1), H5Tclose);
    H5Tset_size(mem.get(), H5T_VARIABLE);
    H5Tset_cset(mem.get(), H5Tget_cset(type.get()));
    if (dims[0] > 0 &&
        H5Dread(set.get(), mem.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, raw.data()) < 0) {
      Fail("cannot read dataset '" + name + "' (truncated or corrupt file)");
    }
    std::vector<std::string> out;
    for (char* s : raw) {
      out.emplace_back(s ? s : "");
      H5free_memory(s);
    }
    return out;
  }

  // Reads every string attribute of `loc` (other attribute types are skipped).
  std::map<std::string, std::string> StringAttributes(hid_t loc) const {
    std::map<std::string, std::string> out;
    H5O_info_t info;
    if (H5Oget_info2(loc, &info, H5O_INFO_NUM_ATTRS) < 0) Fail("cannot list attributes");
    for (hsize_t i = 0; i < info.num_attrs; ++i) {
      Hid attr(H5Aopen_by_idx(loc, ".", H5_INDEX_NAME, H5_ITER_INC, i, H5P_DEFAULT, H5P_DEFAULT),
               H5Aclose);
      if (!attr.valid()) Fail("cannot open an attribute");
      ssize_t len = H5Aget_name(attr.get(), 0, nullptr);
      if (len < 0) Fail("cannot read an attribute name");
      std::string name(static_cast<size_t>(len), '\0');
      H5Aget_name(attr.get(), static_cast<size_t>(len) + 1, name.data());
      Hid type(H5Aget_type(attr.get()), H5Tclose);
      if (!type.valid() || H5Tget_class(type.get()) != H5T_STRING) continue;
      if (!H5Tis_variable_str(type.get())) Fail("attribute '" + name + "' is not a vlen string");
      Hid mem(H5Tcopy(H5T_C_S1), H5Tclose);
      H5Tset_size(mem.get(), H5T_VARIABLE);
      H5Tset_cset(mem.get(), H5Tget_cset(type.get()));  // HDF5 does not convert ASCII <-> UTF-8
      char* value = nullptr;
      if (H5Aread(attr.get(), mem.get(), &value) < 0) Fail("cannot read attribute '" + name + "'");
      out[name] = value ? value : "";
      H5free_memory(value);
    }
    return out;
  }

  int64_t IntAttribute(hid_t loc, const std::string& name) const {
    if (H5Aexists(loc, name.c_str()) <= 0) Fail("missing attribute '" + name + "'");
    Hid attr(H5Aopen(loc, name.c_str(), H5P_DEFAULT), H5Aclose);
    Hid type(H5Aget_type(attr.get()), H5Tclose);
    if (!type.valid() || H5Tget_class(type.get()) != H5T_INTEGER) {
      Fail("attribute '" + name + "' is not an integer");
    }
    int64_t value = 0;
    if (H5Aread(attr.get(), H5T_NATIVE_INT64, &value) < 0) Fail("cannot read attribute " + name);
    return value;
  }

  std::vector<std::string> Children(hid_t group) const {
    H5G_info_t info;
    if (H5Gget_info(group, &info) < 0) Fail("cannot list a group");
    std::vector<std::string> names;
    for (hsize_t i = 0; i < info.nlinks; ++i) {
      ssize_t len =
          H5Lget_name_by_idx(group, ".", H5_INDEX_NAME, H5_ITER_INC, i, nullptr, 0, H5P_DEFAULT);
      if (len < 0) Fail("cannot read a link name");
      std::string name(static_cast<size_t>(len), '\0');
      H5Lget_name_by_idx(group, ".", H5_INDEX_NAME, H5_ITER_INC, i, name.data(),
                         static_cast<size_t>(len) + 1, H5P_DEFAULT);
      names.push_back(name);
    }
    return names;
  }

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

  std::string path_;
};

}  // namespace

Trace ReadTrace(const std::string& path, bool require_complete) {
  QuietHdf5();
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) throw InputError(path + ": trace file not found");
  if (std::filesystem::is_directory(path, ec)) throw InputError(path + ": is a directory");
  Reader reader(path);
  htri_t is_hdf5 = H5Fis_hdf5(path.c_str());
  if (is_hdf5 <= 0) reader.Fail("not an HDF5 file (truncated or corrupt?)");
  Hid file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
  if (!file.valid()) reader.Fail("cannot open as HDF5 (truncated or corrupt?)");

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
