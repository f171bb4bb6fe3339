#ifndef BITPARITY_CONFIG_RECIPE_EDIT_H_
#define BITPARITY_CONFIG_RECIPE_EDIT_H_

// Recipes derived from other recipes: a base recipe's text with some keys set or removed (the
// cells of a matrix, the benchmarks' longer runs, a recipe moved to another device); and what
// two recipe texts set differently (a golden's recipe against the run's).

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

// The settings two recipe texts write differently, one line per dotted key in key order
// ("train.iterations: 10 -> 20", "model.dropout: (absent) -> 0.1"); comments, formatting and the
// order of keys do not count. A text that is not TOML differs as a whole ("(not TOML)").
std::vector<std::string> RecipeSettingChanges(const std::string& before, const std::string& after);

}  // namespace bitparity

#endif  // BITPARITY_CONFIG_RECIPE_EDIT_H_
