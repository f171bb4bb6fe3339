// libFuzzer target: the matrix reader on arbitrary bytes. Every input must either expand into
// cells or be refused with InputError; a crash, a sanitizer report, a hang or another exception
// is a finding. The shipped matrices' base recipes are copied next to the fuzzed file, so that a
// `base` the fuzzer keeps resolves and the expansion (axis edits, named layouts, cell names,
// filters, the edited cell recipes) is reached.

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>

#include "config/matrix_file.h"
#include "config/recipe.h"
#include "core/errors.h"

namespace {

// A folder with the shipped base recipes, made once per process.
const std::string& Folder() {
  static const std::string folder = [] {
    namespace fs = std::filesystem;
    const fs::path dir =
        fs::temp_directory_path() / ("bitparity-fuzz-matrix-" + std::to_string(::getpid()));
    fs::create_directories(dir);
    for (const char* base : {"matrix_base.toml", "matrix_pipeline_base.toml"}) {
      fs::copy_file(fs::path(BITPARITY_SOURCE_DIR) / "recipes" / base, dir / base,
                    fs::copy_options::overwrite_existing);
    }
    return dir.string();
  }();
  return folder;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  // A base outside the folder is the file system's business, not the reader's: a device such as
  // /dev/stdin would block the fuzzer.
  if (text.find("/dev") != std::string::npos || text.find("/proc") != std::string::npos ||
      text.find("/sys") != std::string::npos) {
    return 0;
  }
  try {
    const bitparity::Matrix matrix = bitparity::ParseMatrix(text, Folder() + "/fuzz.toml");
    size_t parsed = 0;
    for (const bitparity::MatrixCell& cell : matrix.cells) {
      for (const auto& [name, filter] : matrix.filters) {
        try {
          (void)bitparity::CellMatches(matrix, cell, name);
        } catch (const bitparity::InputError&) {
        }
      }
      if (parsed++ < 4) {  // the cells' recipes: the edits must give text the reader can judge
        try {
          (void)bitparity::ParseRecipe(cell.recipe_text, "cell.toml");
        } catch (const bitparity::InputError&) {
        }
      }
    }
  } catch (const bitparity::InputError&) {
  }
  return 0;
}
