#ifndef BITPARITY_CORE_RECIPE_EDIT_H_
#define BITPARITY_CORE_RECIPE_EDIT_H_

// Recipes derived from other recipes: a base recipe's text with some keys set or removed (the
// cells of a matrix, the benchmarks' longer runs, a recipe moved to another device).

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

namespace bitparity {

// One edit: `key` is dotted ("train.iterations", "parallel.device"); a value sets it (creating the
// tables on its way), std::monostate removes it (a key or a whole table).
struct RecipeEdit {
  std::string key;
  std::variant<std::monostate, int64_t, std::string> value;
};

// `text` (a recipe, TOML) with `edits` applied in order, as TOML text (comments are not kept).
// InputError, naming `path`, when the text is not TOML or an edit runs through a key that is not
// a table.
std::string EditRecipe(const std::string& text, const std::vector<RecipeEdit>& edits,
                       const std::string& path);

}  // namespace bitparity

#endif  // BITPARITY_CORE_RECIPE_EDIT_H_
