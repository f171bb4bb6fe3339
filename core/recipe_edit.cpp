#include "core/recipe_edit.h"

#include <toml++/toml.h>

#include <sstream>

#include "core/errors.h"

namespace bitparity {

std::string EditRecipe(const std::string& text, const std::vector<RecipeEdit>& edits,
                       const std::string& path) {
  toml::table root;
  try {
    root = toml::parse(text, path);
  } catch (const toml::parse_error& e) {
    throw InputError(path + ":" + std::to_string(e.source().begin.line) +
                     ": not valid TOML: " + std::string(e.description()));
  }
  for (const RecipeEdit& edit : edits) {
    toml::table* table = &root;
    std::string rest = edit.key;
    for (size_t dot = rest.find('.'); dot != std::string::npos; dot = rest.find('.')) {
      const std::string name = rest.substr(0, dot);
      if (!table->contains(name)) {
        if (std::holds_alternative<std::monostate>(edit.value)) break;  // nothing to remove
        table->insert(name, toml::table{});
      }
      table = (*table)[name].as_table();
      if (table == nullptr) {
        throw InputError(path + ": cannot set " + edit.key + ": " + name + " is not a table");
      }
      rest = rest.substr(dot + 1);
    }
    if (rest.find('.') != std::string::npos) continue;  // a removal under an absent table
    if (const auto* v = std::get_if<int64_t>(&edit.value)) {
      table->insert_or_assign(rest, *v);
    } else if (const auto* s = std::get_if<std::string>(&edit.value)) {
      table->insert_or_assign(rest, *s);
    } else {
      table->erase(rest);
    }
  }
  std::ostringstream out;
  out << root << "\n";
  return out.str();
}

}  // namespace bitparity
