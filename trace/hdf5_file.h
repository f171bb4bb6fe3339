#ifndef BITPARITY_TRACE_HDF5_FILE_H_
#define BITPARITY_TRACE_HDF5_FILE_H_

// The HDF5 plumbing bitparity's file formats share (the trace, trace/trace.h; the checkpoint,
// trace/checkpoint_file.h): a writer and a reader of one file that name the file in every error,
// and the atomic write of a file built in memory. A writer's failure is InfrastructureError; a
// reader's is InputError ("<path>: <reason>"), because what it reads came from outside the
// process and may be truncated, corrupt or crafted. Torch-free.

#include <hdf5.h>

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/errors.h"
#include "trace/trace_hdf5.h"

namespace bitparity {
namespace trace_hdf5 {

class Hdf5FileWriter {
 public:
  explicit Hdf5FileWriter(std::string path) : path_(std::move(path)) {}
  const std::string& path() const { return path_; }

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

 protected:
  std::string path_;
};

// Builds the writer's file in memory with HDF5's core driver (no backing store), `build` adding
// its contents, then writes its image with WriteFileAtomically: HDF5 itself never writes to the
// disk, so a full disk is one failed write(2) with its errno and nothing half-written, not a
// failed flush inside HDF5 whose clean-up crashes the process. The file's folder must exist.
void WriteHdf5FileAtomically(const Hdf5FileWriter& writer,
                             const std::function<void(hid_t file)>& build);

class Hdf5FileReader {
 public:
  explicit Hdf5FileReader(std::string path) : path_(std::move(path)) {}
  const std::string& path() const { return path_; }

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
           "stores " + std::to_string(stored) + " (a crafted or corrupt file)");
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

 protected:
  std::string path_;
};

// Opens the reader's file read-only; InputError naming it when it is missing ("<what> not
// found"), a directory, or not HDF5.
Hid OpenHdf5File(const Hdf5FileReader& reader, const std::string& what);

}  // namespace trace_hdf5
}  // namespace bitparity

#endif  // BITPARITY_TRACE_HDF5_FILE_H_
