#include "config/recipe_edit.h"

#include <toml++/toml.h>

#include <map>
#include <sstream>

#include "config/toml_reader.h"
#include "core/errors.h"

namespace bitparity {

std::string EditRecipe(const std::string& text, const std::vector<RecipeEdit>& edits,
                       const std::string& path) {
  toml::table root = ParseTomlText(text, path);
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

namespace {

// Every leaf of `table` as "dotted.key" -> its value written as TOML.
void Flatten(const toml::table& table, const std::string& prefix,
             std::map<std::string, std::string>* out) {
  for (const auto& [key, node] : table) {
    const std::string leaf(key.str());
    const std::string name = prefix.empty() ? leaf : prefix + "." + leaf;
    if (const toml::table* sub = node.as_table()) {
      Flatten(*sub, name, out);
      continue;
    }
    std::ostringstream value;
    node.visit([&](const auto& leaf) { value << toml::toml_formatter(leaf); });
    (*out)[name] = value.str();
  }
}

bool FlattenText(const std::string& text, std::map<std::string, std::string>* out) {
  try {
    Flatten(toml::parse(text), "", out);
    return true;
  } catch (const toml::parse_error&) {
    return false;
  }
}

}  // namespace

std::vector<std::string> RecipeSettingChanges(const std::string& before, const std::string& after) {
  std::map<std::string, std::string> a, b;
  const bool a_ok = FlattenText(before, &a), b_ok = FlattenText(after, &b);
  if (!a_ok || !b_ok) {
    if (before == after) return {};
    return {std::string("(not TOML): ") + (a_ok ? "the second text" : "the first text")};
  }
  std::vector<std::string> changes;
  std::map<std::string, std::string> all = a;
  all.insert(b.begin(), b.end());
  for (const auto& [key, unused] : all) {
    auto x = a.find(key), y = b.find(key);
    const std::string from = x == a.end() ? "(absent)" : x->second;
    const std::string to = y == b.end() ? "(absent)" : y->second;
    if (from != to) changes.push_back(key + ": " + from + " -> " + to);
  }
  return changes;
}

}  // namespace bitparity
