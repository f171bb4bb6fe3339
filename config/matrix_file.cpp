#include "config/matrix_file.h"

#include <toml++/toml.h>

#include <algorithm>
#include <filesystem>
#include <numeric>
#include <regex>
#include <sstream>

#include "config/names.h"
#include "config/recipe.h"
#include "config/recipe_edit.h"
#include "config/recipe_schema.h"
#include "config/toml_reader.h"
#include "core/errors.h"
#include "schedule/pipeline_layout.h"

namespace bitparity {
namespace {

namespace fs = std::filesystem;

const std::vector<std::string> kKnownAxes = {"precision", "recompute", "mtp_layers", "dispatcher",
                                             "pipeline"};

// A named pipeline of [matrix.layouts]: pipeline ranks and a layout in Megatron's syntax.
struct NamedLayout {
  int64_t pp = 1;
  std::string layout;
};

std::string Trim(const std::string& s) {
  const size_t a = s.find_first_not_of(" \t");
  const size_t b = s.find_last_not_of(" \t");
  return a == std::string::npos ? "" : s.substr(a, b - a + 1);
}

// The edits of a pipeline value: "ppP-vppV" (the even split), "ppP" (vpp 1), or the name of
// one of [matrix.layouts].
std::vector<RecipeEdit> PipelineEdits(const std::string& value,
                                      const std::map<std::string, NamedLayout>& layouts,
                                      const std::string& where) {
  auto named = layouts.find(value);
  if (named != layouts.end()) {
    return {{"parallel.vpp", std::monostate()},
            {"parallel.pp", named->second.pp},
            {"model.pipeline_layout", named->second.layout}};
  }
  static const std::regex even(R"(pp([0-9]{1,3})(-vpp([0-9]{1,3}))?)");
  std::smatch m;
  if (!std::regex_match(value, m, even)) {
    throw InputError(where +
                     ": pipeline values are ppP-vppV, ppP or a name of [matrix.layouts], "
                     "got '" +
                     value + "'");
  }
  return {{"model.pipeline_layout", std::monostate()},
          {"parallel.pp", static_cast<int64_t>(std::stoll(m[1].str()))},
          {"parallel.vpp", static_cast<int64_t>(m[3].matched ? std::stoll(m[3].str()) : 1)}};
}

// The edit of an axis whose values are the names of one of the recipe's enums (config/
// recipe_schema.h): a misspelt value is bad input here, not a cell that is skipped.
template <typename E, size_t N>
std::vector<RecipeEdit> NamedValueEdits(const std::string& axis, const std::string& key,
                                        const EnumName<E> (&names)[N], const std::string& value,
                                        const std::string& where) {
  if (!ValueIn(names, value)) {
    throw InputError(where + ": " + axis + " values are " + QuotedNames(names) + ", got '" + value +
                     "'");
  }
  return {{key, value}};
}

// The recipe edits of one axis value; InputError for a value the axis cannot take.
std::vector<RecipeEdit> AxisEdits(const std::string& axis, const std::string& value,
                                  const std::map<std::string, NamedLayout>& layouts,
                                  const std::string& where) {
  if (axis == "pipeline") return PipelineEdits(value, layouts, where);
  if (axis == "precision")
    return NamedValueEdits(axis, "precision.recipe", kPrecisionNames, value, where);
  if (axis == "dispatcher")
    return NamedValueEdits(axis, "model.dispatcher", kDispatcherNames, value, where);
  if (axis == "mtp_layers") {
    try {
      return {{"model.mtp_layers", static_cast<int64_t>(std::stoll(value))}};
    } catch (const std::exception&) {
      throw InputError(where + ": mtp_layers values must be integers, got '" + value + "'");
    }
  }
  // recompute: the whole [recompute] table is replaced.
  std::vector<RecipeEdit> edits = {{"recompute", std::monostate()}};
  if (value == "none") {
    edits.push_back({"recompute.granularity", std::string("none")});
    return edits;
  }
  if (value == "chunk") {
    edits.push_back({"recompute.granularity", std::string("full")});
    edits.push_back({"recompute.unit", std::string("chunk")});
    return edits;
  }
  const size_t dash = value.find('-');
  const std::string method = value.substr(0, dash);
  long long k = 0;
  try {
    k = dash == std::string::npos ? 0 : std::stoll(value.substr(dash + 1));
  } catch (const std::exception&) {
    k = 0;
  }
  if ((method != "uniform" && method != "block") || k < 1) {
    throw InputError(where + ": recompute values are none, chunk, uniform-K or block-K, got '" +
                     value + "'");
  }
  edits.push_back({"recompute.granularity", std::string("full")});
  edits.push_back({"recompute.method", method});
  edits.push_back({"recompute.num_layers", static_cast<int64_t>(k)});
  return edits;
}

std::string CellName(const std::vector<std::string>& axes,
                     const std::map<std::string, std::string>& values) {
  std::string name;
  for (const std::string& axis : axes) {
    std::string v = values.at(axis);
    if (axis == "mtp_layers") v = "mtp" + v;
    v.erase(std::remove(v.begin(), v.end(), '-'), v.end());
    name += (name.empty() ? "" : "-") + v;
  }
  return name;
}

// [matrix.layouts]: named pipeline layouts an axis value may choose.
std::map<std::string, NamedLayout> ReadLayouts(const toml::table* table, Diagnostics& diag) {
  std::map<std::string, NamedLayout> layouts;
  if (!table) return layouts;
  static const std::regex identifier("[a-z][a-z0-9_]*");
  for (const auto& [key, node] : *table) {
    const std::string name(key.str());
    const std::string where = "[matrix.layouts] " + name;
    if (!std::regex_match(name, identifier)) {
      diag.Add("[matrix.layouts]",
               "names are lower-case identifiers (they name cells), got '" + name + "'");
      continue;
    }
    const toml::table* entry = node.as_table();
    if (!entry) {
      diag.Add("[matrix.layouts]", name + " must be a table { pp = P, layout = \"...\" }");
      continue;
    }
    TableReader reader(entry, where, &diag);
    NamedLayout layout;
    if (!reader.Has("pp")) diag.Add(where, "pp must be set (the layout's pipeline ranks)");
    if (!reader.Has("layout")) diag.Add(where, "layout must be set (Megatron's syntax)");
    layout.pp = reader.Int("pp", 1, 1, 1024);
    layout.layout = reader.String("layout", "");
    reader.RejectUnknown();
    layouts[name] = layout;
  }
  return layouts;
}

// [matrix.axes]: the values of each known axis that is listed, by axis name.
std::map<std::string, std::vector<std::string>> ReadAxes(const toml::table* table,
                                                         Diagnostics& diag) {
  std::map<std::string, std::vector<std::string>> axis_values;
  TableReader axes(table, "[matrix.axes]", &diag);
  for (const std::string& axis : kKnownAxes) {
    std::vector<std::string> values = ScalarList(axes, axis);
    // Two equal values would make two cells of one name, one folder, the second overwriting.
    std::vector<std::string> sorted = values;
    std::sort(sorted.begin(), sorted.end());
    const auto repeated = std::adjacent_find(sorted.begin(), sorted.end());
    if (repeated != sorted.end()) {
      diag.Add("[matrix.axes]", axis + " lists '" + *repeated + "' twice");
    }
    if (!values.empty()) axis_values[axis] = std::move(values);
  }
  axes.RejectUnknown();
  if (axis_values.empty()) diag.Add("[matrix.axes]", "must list at least one axis");
  return axis_values;
}

// A named layout must place the base's decoder layers (its MTP layers are its own 'm's): a
// typo is bad input here, not a column of skipped cells.
void CheckLayoutsPlace(const std::map<std::string, NamedLayout>& layouts, const Recipe& base,
                       Diagnostics& diag) {
  for (const auto& [name, layout] : layouts) {
    if (layout.layout.empty()) continue;
    try {
      const std::string letters = ExpandPipelineLayout(layout.layout);
      const int64_t mtp = std::count(letters.begin(), letters.end(), 'm');
      ParsePipelineLayout(layout.layout, layout.pp, base.model.layers, mtp);
    } catch (const InputError& e) {
      diag.Add("[matrix.layouts] " + name, std::string("layout ") + e.what());
    }
  }
}

// The cell of one choice of value per axis (`index`): its name and its recipe text.
MatrixCell ExpandCell(const Matrix& m, const std::vector<std::vector<std::string>>& values,
                      const std::vector<size_t>& index,
                      const std::map<std::string, NamedLayout>& layouts,
                      const std::string& base_text) {
  MatrixCell cell;
  std::vector<RecipeEdit> edits;
  for (size_t a = 0; a < m.axes.size(); ++a) {
    cell.values[m.axes[a]] = values[a][index[a]];
    for (RecipeEdit& e : AxisEdits(m.axes[a], values[a][index[a]], layouts, m.path)) {
      edits.push_back(std::move(e));
    }
  }
  cell.name = CellName(m.axes, cell.values);
  // A cell's name is a folder of the output: an identifier, whatever its axis values say.
  if (const std::string problem = IdentifierProblem("cell name", cell.name); !problem.empty()) {
    throw InputError(
        m.path + ": [matrix.axes] " + problem + " (from the values of " +
        std::accumulate(std::next(m.axes.begin()), m.axes.end(), m.axes.front(),
                        [](const std::string& a, const std::string& b) { return a + ", " + b; }) +
        ")");
  }
  edits.push_back({"name", m.name + "-" + cell.name});
  cell.recipe_text = "# Cell " + cell.name + " of " + m.path + ", expanded from " + m.base_path +
                     "\n" + EditRecipe(base_text, edits, m.base_path);
  return cell;
}

// Every cell, the last axis varying fastest.
void ExpandCells(Matrix& m, const std::vector<std::vector<std::string>>& values,
                 const std::map<std::string, NamedLayout>& layouts, const std::string& base_text) {
  std::vector<size_t> index(m.axes.size(), 0);
  for (;;) {
    m.cells.push_back(ExpandCell(m, values, index, layouts, base_text));
    size_t a = m.axes.size();
    while (a > 0) {
      --a;
      if (++index[a] < values[a].size()) break;
      index[a] = 0;
      if (a == 0) return;
    }
    if (m.axes.empty()) return;
  }
}

}  // namespace

Matrix LoadMatrix(const std::string& path) {
  return ParseMatrix(ReadTomlFile(path, "matrix"), path);
}

Matrix ParseMatrix(const std::string& text, const std::string& path) {
  toml::table root = ParseTomlText(text, path);
  Diagnostics diag(path);
  for (const auto& [key, node] : root) {
    if (key.str() != "matrix") {
      diag.Add("", "has unknown key '" + std::string(key.str()) + "'" + LineSuffix(node) +
                       " (a matrix file holds only [matrix]; the recipe goes in its base)");
    }
  }
  TableReader top(&root, "", &diag);
  const toml::table* matrix_table = top.SubTable("matrix");
  if (!matrix_table) {
    diag.Add("", "has no [matrix] table");
    diag.ThrowIfAny();
  }
  TableReader matrix(matrix_table, "[matrix]", &diag);
  Matrix m;
  m.path = path;
  m.name = matrix.String("name", fs::path(path).stem().string());
  if (const std::string problem = IdentifierProblem("name", m.name); !problem.empty()) {
    diag.Add("[matrix]", problem);
  }
  matrix.String("description", "");
  const std::string base = matrix.String("base", "");
  if (base.empty()) diag.Add("[matrix]", "base must name a recipe file");
  m.base_path = (fs::path(path).parent_path() / base).string();
  const toml::table* axes_table = matrix.SubTable("axes");
  const toml::table* filters_table = matrix.SubTable("filters");
  const toml::table* layouts_table = matrix.SubTable("layouts");
  matrix.RejectUnknown();
  const std::map<std::string, NamedLayout> layouts = ReadLayouts(layouts_table, diag);
  const std::map<std::string, std::vector<std::string>> axis_values = ReadAxes(axes_table, diag);
  TableReader filters(filters_table, "[matrix.filters]", &diag);
  if (filters_table) {
    for (const auto& [key, node] : *filters_table) {
      const std::string name(key.str());
      m.filters[name] = filters.String(name, "");
    }
  }
  diag.ThrowIfAny();
  // The axes in the table's (name) order.
  std::vector<std::vector<std::string>> values;
  size_t cell_count = 1;
  for (const auto& [axis, list] : axis_values) {
    m.axes.push_back(axis);
    values.push_back(list);
    if (cell_count <= kMaxMatrixCells) cell_count *= list.size();  // stops before it overflows
  }
  if (cell_count > kMaxMatrixCells) {
    throw InputError(path + ": [matrix.axes] give more than " + std::to_string(kMaxMatrixCells) +
                     " cells; split the matrix or use fewer values");
  }
  // The base is a full recipe in its own right; each cell overrides the axes' keys.
  const Recipe base_recipe = LoadRecipe(m.base_path);
  CheckLayoutsPlace(layouts, base_recipe, diag);
  diag.ThrowIfAny();
  ExpandCells(m, values, layouts, base_recipe.text);
  return m;
}

bool CellMatches(const Matrix& matrix, const MatrixCell& cell, const std::string& filter) {
  auto named = matrix.filters.find(filter);
  const std::string expression = named == matrix.filters.end() ? filter : named->second;
  if (Trim(expression).empty()) {
    throw InputError("--filter '" + filter +
                     "' is empty (an unset variable?); leave --filter out "
                     "to run every cell");
  }
  std::stringstream terms(expression + (expression.back() == ',' ? "," : ""));
  std::string term;
  while (std::getline(terms, term, ',')) {
    term = Trim(term);
    if (term.empty()) {
      throw InputError("--filter '" + filter + "' has an empty term (a separator too many?)");
    }
    const size_t eq = term.find('=');
    if (eq == std::string::npos) {
      throw InputError("--filter '" + filter + "': '" + term + "' is neither a filter of " +
                       matrix.path + " nor axis=value[|value...]");
    }
    const std::string axis = Trim(term.substr(0, eq));
    auto it = cell.values.find(axis);
    if (it == cell.values.end()) {
      throw InputError("--filter '" + filter + "': the matrix has no axis '" + axis + "'");
    }
    bool any = false;
    const std::string values = term.substr(eq + 1);
    std::stringstream alternatives(values + (!values.empty() && values.back() == '|' ? "|" : ""));
    std::string value;
    while (std::getline(alternatives, value, '|')) {
      if (Trim(value).empty()) {
        throw InputError("--filter '" + filter + "': '" + term + "' has an empty value");
      }
      any |= Trim(value) == it->second;
    }
    if (values.empty()) {
      throw InputError("--filter '" + filter + "': '" + term + "' has an empty value");
    }
    if (!any) return false;
  }
  return true;
}

}  // namespace bitparity
