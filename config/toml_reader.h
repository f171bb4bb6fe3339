#ifndef BITPARITY_CONFIG_TOML_READER_H_
#define BITPARITY_CONFIG_TOML_READER_H_

// Typed reads of TOML tables with messages that name the file, the table, the key, what was
// expected and the line: the reader of recipes (config/recipe.cpp) and of matrix files
// (harness/matrix_command.cpp). A TableReader remembers the keys it was asked for; a key of
// the table that nothing asked for is reported as unknown, with the asked-for keys as the known
// ones. Diagnostics collects every message and throws them as one InputError.

#include <toml++/toml.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "core/enum_names.h"
#include "core/errors.h"

namespace bitparity {

// The largest recipe or matrix file read: real ones are a few KiB, and a bound keeps a path such
// as /dev/zero from being read until memory runs out.
inline constexpr size_t kMaxTomlFileBytes = size_t{1} << 20;

// The text of the `kind` file ("recipe", "matrix") at `path`, read once (a pipe such as
// <(cat r.toml) works). InputError naming `path` when it is missing, a directory, unreadable or
// larger than kMaxTomlFileBytes. Defined in config/recipe.cpp.
std::string ReadTomlFile(const std::string& path, const std::string& kind);

// `text` parsed as TOML; InputError "<path>:<line>:<column>: not valid TOML: ..." otherwise.
// Defined in config/recipe.cpp (recipes, matrices and recipe edits read TOML through it).
toml::table ParseTomlText(const std::string& text, const std::string& path);

// Collects every problem found in one file so that the user sees them all at once.
class Diagnostics {
 public:
  explicit Diagnostics(std::string path) : path_(std::move(path)) {}

  void Add(const std::string& where, const std::string& message) {
    messages_.push_back(path_ + ": " + (where.empty() ? "" : where + " ") + message);
  }
  bool empty() const { return messages_.empty(); }
  void ThrowIfAny() const {
    if (messages_.empty()) return;
    std::ostringstream out;
    for (size_t i = 0; i < messages_.size(); ++i) out << (i ? "\n" : "") << messages_[i];
    throw InputError(out.str());
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::vector<std::string> messages_;
};

// The one of `known` closest to `name` in edits (insert, delete, replace a character), when it is
// close enough to be a slip: at most one edit in three characters, and at least one. "" if none.
inline std::string ClosestKey(const std::string& name, const std::vector<std::string>& known) {
  std::string best;
  size_t best_distance = std::max<size_t>(1, name.size() / 3) + 1;
  for (const std::string& key : known) {
    std::vector<size_t> row(key.size() + 1);
    for (size_t j = 0; j <= key.size(); ++j) row[j] = j;
    for (size_t i = 1; i <= name.size(); ++i) {
      size_t diagonal = row[0];
      row[0] = i;
      for (size_t j = 1; j <= key.size(); ++j) {
        const size_t above = row[j];
        row[j] =
            std::min({above + 1, row[j - 1] + 1, diagonal + (name[i - 1] == key[j - 1] ? 0 : 1)});
        diagonal = above;
      }
    }
    if (row[key.size()] < best_distance) {
      best_distance = row[key.size()];
      best = key;
    }
  }
  return best;
}

inline std::string LineSuffix(const toml::node& node) {
  const auto& source = node.source();
  if (source.begin.line == 0) return "";
  return " (line " + std::to_string(source.begin.line) + ")";
}

inline std::string DescribeNode(const toml::node& node) {
  std::ostringstream out;
  switch (node.type()) {
    case toml::node_type::string:
      out << "string \"" << node.as_string()->get() << "\"";
      break;
    case toml::node_type::integer:
      out << "integer " << node.as_integer()->get();
      break;
    case toml::node_type::floating_point:
      out << "float " << node.as_floating_point()->get();
      break;
    case toml::node_type::boolean:
      out << "boolean " << (node.as_boolean()->get() ? "true" : "false");
      break;
    case toml::node_type::array:
      out << "an array";
      break;
    case toml::node_type::table:
      out << "a table";
      break;
    default:
      out << "a date/time";
      break;
  }
  return out.str();
}

// Reads typed keys from one TOML table, remembering which keys were consumed so that unknown
// keys (typos) are reported instead of silently ignored.
class TableReader {
 public:
  TableReader(const toml::table* table, std::string where, Diagnostics* diag)
      : table_(table), where_(std::move(where)), diag_(diag) {}

  bool Has(const std::string& key) const { return table_ && table_->contains(key); }

  int64_t Int(const std::string& key, int64_t fallback, int64_t min, int64_t max) {
    const toml::node* node = Take(key);
    if (!node) return fallback;
    if (!node->is_integer()) {
      Error(key, "must be an integer, got " + DescribeNode(*node) + LineSuffix(*node));
      return fallback;
    }
    int64_t value = node->as_integer()->get();
    if (value < min || value > max) {
      Error(key,
            "must be " + Range(min, max) + ", got " + std::to_string(value) + LineSuffix(*node));
      return fallback;
    }
    return value;
  }

  double Float(const std::string& key, double fallback, double min, double max,
               bool min_exclusive = false) {
    const toml::node* node = Take(key);
    if (!node) return fallback;
    double value;
    if (node->is_floating_point()) {
      value = node->as_floating_point()->get();
    } else if (node->is_integer()) {
      value = static_cast<double>(node->as_integer()->get());
    } else {
      Error(key, "must be a number, got " + DescribeNode(*node) + LineSuffix(*node));
      return fallback;
    }
    bool below = min_exclusive ? !(value > min) : !(value >= min);
    if (!std::isfinite(value) || below || value > max) {
      std::ostringstream msg;
      msg << "must be a finite number " << (min_exclusive ? "> " : ">= ") << min;
      if (max < std::numeric_limits<double>::max()) msg << " and <= " << max;
      msg << ", got " << value << LineSuffix(*node);
      Error(key, msg.str());
      return fallback;
    }
    return value;
  }

  bool Bool(const std::string& key, bool fallback) {
    const toml::node* node = Take(key);
    if (!node) return fallback;
    if (!node->is_boolean()) {
      Error(key, "must be true or false, got " + DescribeNode(*node) + LineSuffix(*node));
      return fallback;
    }
    return node->as_boolean()->get();
  }

  std::string String(const std::string& key, const std::string& fallback) {
    const toml::node* node = Take(key);
    if (!node) return fallback;
    if (!node->is_string()) {
      Error(key, "must be a string, got " + DescribeNode(*node) + LineSuffix(*node));
      return fallback;
    }
    return node->as_string()->get();
  }

  // A string restricted to the names of `choices`; returns the value named, or `fallback`.
  template <typename E, size_t N>
  E Enum(const std::string& key, E fallback, const EnumName<E> (&choices)[N],
         bool* was_set = nullptr) {
    const toml::node* node = Take(key);
    if (!node) return fallback;
    const std::string names = QuotedNames(choices);
    if (!node->is_string()) {
      Error(key, "must be one of " + names + ", got " + DescribeNode(*node) + LineSuffix(*node));
      return fallback;
    }
    const std::string& value = node->as_string()->get();
    if (std::optional<E> e = ValueIn(choices, value)) {
      if (was_set) *was_set = true;
      return *e;
    }
    Error(key, "must be one of " + names + ", got \"" + value + "\"" + LineSuffix(*node));
    return fallback;
  }

  std::vector<int64_t> IntList(const std::string& key, int64_t min, int64_t max) {
    std::vector<int64_t> out;
    const toml::node* node = Take(key);
    if (!node) return out;
    const toml::array* array = node->as_array();
    if (!array) {
      Error(key, "must be an array of integers, got " + DescribeNode(*node) + LineSuffix(*node));
      return out;
    }
    for (const toml::node& element : *array) {
      if (!element.is_integer()) {
        Error(key,
              "must contain only integers, found " + DescribeNode(element) + LineSuffix(element));
        continue;
      }
      int64_t value = element.as_integer()->get();
      if (value < min || value > max) {
        Error(key, "entries must be " + Range(min, max) + ", got " + std::to_string(value) +
                       LineSuffix(element));
        continue;
      }
      out.push_back(value);
    }
    return out;
  }

  // A non-empty array of non-empty strings (an argv); empty when the key is absent or wrong.
  std::vector<std::string> StringList(const std::string& key) {
    std::vector<std::string> out;
    const toml::node* node = Take(key);
    if (!node) return out;
    const toml::array* array = node->as_array();
    if (!array || array->empty()) {
      Error(key,
            "must be a non-empty array of strings, got " + DescribeNode(*node) + LineSuffix(*node));
      return out;
    }
    for (const toml::node& element : *array) {
      if (!element.is_string() || element.as_string()->get().empty()) {
        Error(key, "must contain only non-empty strings, found " + DescribeNode(element) +
                       LineSuffix(element));
        return {};
      }
      out.push_back(element.as_string()->get());
    }
    return out;
  }

  // The key's node (consumed), or nullptr.
  const toml::node* Node(const std::string& key) { return Take(key); }

  // The key's table if it is one (consumed); nullptr otherwise, without an error.
  const toml::table* SubTableOrNull(const std::string& key) {
    if (!table_) return nullptr;
    const toml::node* node = table_->get(key);
    if (!node || !node->is_table()) return nullptr;
    return Take(key)->as_table();
  }

  // A sub-table; an error if the key exists with another type.
  const toml::table* SubTable(const std::string& key) {
    const toml::node* node = Take(key);
    if (!node) return nullptr;
    if (!node->is_table()) {
      Error(key, "must be a table, got " + DescribeNode(*node) + LineSuffix(*node));
      return nullptr;
    }
    return node->as_table();
  }

  // Reports every key of the table that no read asked for, listing the keys that were asked
  // for (in the order they were read) as the known ones: the reads are the schema.
  void RejectUnknown() {
    if (!table_) return;
    std::string known;
    for (const std::string& key : asked_) known += (known.empty() ? "" : ", ") + key;
    for (const auto& [key, node] : *table_) {
      std::string name(key.str());
      if (consumed_.count(name)) continue;
      const std::string closest = ClosestKey(name, asked_);
      diag_->Add(where_, "has unknown key '" + name + "'" + LineSuffix(node) +
                             (closest.empty() ? "" : "; did you mean '" + closest + "'?") +
                             (known.empty() ? "" : "; known keys: " + known));
    }
  }

  void Error(const std::string& key, const std::string& message) {
    diag_->Add(where_, key + " " + message);
  }
  const std::string& where() const { return where_; }
  // Where this reader's messages go; a sub-table's reader reports to the same place.
  Diagnostics* diagnostics() const { return diag_; }

 private:
  const toml::node* Take(const std::string& key) {
    if (consumed_.insert(key).second) asked_.push_back(key);
    if (!table_) return nullptr;
    return table_->get(key);
  }

  static std::string Range(int64_t min, int64_t max) {
    if (max == std::numeric_limits<int64_t>::max()) return "an integer >= " + std::to_string(min);
    return "an integer in [" + std::to_string(min) + ", " + std::to_string(max) + "]";
  }
  const toml::table* table_;
  std::string where_;
  Diagnostics* diag_;
  std::set<std::string> consumed_;
  std::vector<std::string> asked_;  // consumed_ in the order of the reads
};

// The strings or integers (as decimal text) of a non-empty array, e.g. a matrix axis's values;
// an error naming the key otherwise.
inline std::vector<std::string> ScalarList(TableReader& r, const std::string& key) {
  std::vector<std::string> out;
  const toml::node* node = r.Node(key);
  if (!node) return out;
  const toml::array* array = node->as_array();
  if (!array || array->empty()) {
    r.Error(key, "must be a non-empty array, got " +
                     (array ? std::string("an empty one") : DescribeNode(*node)) +
                     LineSuffix(*node));
    return out;
  }
  for (const toml::node& value : *array) {
    if (value.is_string()) {
      out.push_back(value.as_string()->get());
    } else if (value.is_integer()) {
      out.push_back(std::to_string(value.as_integer()->get()));
    } else {
      r.Error(key,
              "values must be strings or integers, got " + DescribeNode(value) + LineSuffix(value));
      return {};
    }
  }
  return out;
}

}  // namespace bitparity

#endif  // BITPARITY_CONFIG_TOML_READER_H_
