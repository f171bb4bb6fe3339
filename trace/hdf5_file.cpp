#include "trace/hdf5_file.h"

#include <filesystem>
#include <string>

#include "core/atomic_file.h"
#include "core/errors.h"

namespace bitparity {
namespace trace_hdf5 {

void WriteHdf5FileAtomically(const Hdf5FileWriter& writer,
                             const std::function<void(hid_t file)>& build) {
  QuietHdf5();
  namespace fs = std::filesystem;
  const std::string& path = writer.path();
  fs::path target(path);
  fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    throw InfrastructureError(path + ": directory " + dir.string() + " does not exist");
  }
  std::string image;
  {
    Hid access =
        writer.CheckId(H5Pcreate(H5P_FILE_ACCESS), H5Pclose, "create file access properties");
    writer.Check(H5Pset_fapl_core(access.get(), size_t{1} << 20, /*backing_store=*/0),
                 "select the in-memory file driver");
    Hid file = writer.CheckId(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, access.get()),
                              H5Fclose, "create the file in memory");
    build(file.get());
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

Hid OpenHdf5File(const Hdf5FileReader& reader, const std::string& what) {
  QuietHdf5();
  const std::string& path = reader.path();
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) throw InputError(path + ": " + what + " not found");
  if (std::filesystem::is_directory(path, ec)) throw InputError(path + ": is a directory");
  htri_t is_hdf5 = H5Fis_hdf5(path.c_str());
  if (is_hdf5 <= 0) reader.Fail("not an HDF5 file (truncated or corrupt?)");
  Hid file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
  if (!file.valid()) reader.Fail("cannot open as HDF5 (truncated or corrupt?)");
  return file;
}

}  // namespace trace_hdf5
}  // namespace bitparity
