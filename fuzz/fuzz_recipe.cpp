// libFuzzer target: the recipe reader on arbitrary bytes. Every input must either parse into a
// recipe or be refused with InputError (bad input, exit 2); anything else (a crash, a sanitizer
// report, another exception) is a bug.

#include <cstddef>
#include <cstdint>
#include <string>

#include "config/recipe.h"
#include "core/errors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    bitparity::Recipe recipe = bitparity::ParseRecipe(text, "fuzz.toml");
    (void)bitparity::ParameterCount(recipe.model);
  } catch (const bitparity::InputError&) {
  }
  return 0;
}
