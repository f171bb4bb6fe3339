#include "harness/matrix_command.h"

#include <toml++/toml.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <numeric>
#include <ostream>
#include <regex>
#include <sstream>
#include <thread>

#include "core/clock.h"
#include "core/errors.h"
#include "core/names.h"
#include "core/pipeline_layout.h"
#include "core/recipe.h"
#include "core/recipe_edit.h"
#include "core/toml_reader.h"
#include "harness/output_lock.h"
#include "harness/report.h"
#include "harness/run_command.h"

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

std::string ReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(path + ": cannot open");
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
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

// The recipe edits of one axis value; InputError for a value the axis cannot take.
std::vector<RecipeEdit> AxisEdits(const std::string& axis, const std::string& value,
                                  const std::map<std::string, NamedLayout>& layouts,
                                  const std::string& where) {
  if (axis == "pipeline") return PipelineEdits(value, layouts, where);
  if (axis == "precision") return {{"precision.recipe", value}};
  if (axis == "dispatcher") return {{"model.dispatcher", value}};
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

}  // namespace

Matrix LoadMatrix(const std::string& path) {
  if (!fs::exists(path)) throw InputError(path + ": matrix file not found");
  toml::table root;
  try {
    root = toml::parse(ReadText(path), path);
  } catch (const toml::parse_error& e) {
    throw InputError(path + ":" + std::to_string(e.source().begin.line) +
                     ": not valid TOML: " + std::string(e.description()));
  }
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
  std::map<std::string, NamedLayout> layouts;
  if (layouts_table) {
    static const std::regex identifier("[a-z][a-z0-9_]*");
    for (const auto& [key, node] : *layouts_table) {
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
  }
  std::map<std::string, std::vector<std::string>> axis_values;
  {
    TableReader axes(axes_table, "[matrix.axes]", &diag);
    for (const std::string& axis : kKnownAxes) {
      std::vector<std::string> values = ScalarList(axes, axis);
      if (!values.empty()) axis_values[axis] = std::move(values);
    }
    axes.RejectUnknown();
    if (axis_values.empty()) diag.Add("[matrix.axes]", "must list at least one axis");
  }
  {
    TableReader filters(filters_table, "[matrix.filters]", &diag);
    if (filters_table) {
      for (const auto& [key, node] : *filters_table) {
        const std::string name(key.str());
        m.filters[name] = filters.String(name, "");
      }
    }
  }
  diag.ThrowIfAny();
  // The axes in the table's (name) order.
  std::vector<std::vector<std::string>> values;
  for (const auto& [axis, list] : axis_values) {
    m.axes.push_back(axis);
    values.push_back(list);
  }
  // The base is a full recipe in its own right; each cell overrides the axes' keys.
  const Recipe base_recipe = LoadRecipe(m.base_path);
  const std::string& base_text = base_recipe.text;
  // A named layout must place the base's decoder layers (its MTP layers are its own 'm's): a
  // typo is bad input here, not a column of skipped cells.
  for (const auto& [name, layout] : layouts) {
    if (layout.layout.empty()) continue;
    try {
      const std::string letters = ExpandPipelineLayout(layout.layout);
      const int64_t mtp = std::count(letters.begin(), letters.end(), 'm');
      ParsePipelineLayout(layout.layout, layout.pp, base_recipe.model.layers, mtp);
    } catch (const InputError& e) {
      diag.Add("[matrix.layouts] " + name, std::string("layout ") + e.what());
    }
  }
  diag.ThrowIfAny();
  std::vector<size_t> index(m.axes.size(), 0);
  for (;;) {
    MatrixCell cell;
    std::vector<RecipeEdit> edits;
    for (size_t a = 0; a < m.axes.size(); ++a) {
      cell.values[m.axes[a]] = values[a][index[a]];
      for (RecipeEdit& e : AxisEdits(m.axes[a], values[a][index[a]], layouts, path)) {
        edits.push_back(std::move(e));
      }
    }
    cell.name = CellName(m.axes, cell.values);
    // A cell's name is a folder of the output: an identifier, whatever its axis values say.
    if (const std::string problem = IdentifierProblem("cell name", cell.name); !problem.empty()) {
      throw InputError(
          path + ": [matrix.axes] " + problem + " (from the values of " +
          std::accumulate(std::next(m.axes.begin()), m.axes.end(), m.axes.front(),
                          [](const std::string& a, const std::string& b) { return a + ", " + b; }) +
          ")");
    }
    edits.push_back({"name", m.name + "-" + cell.name});
    cell.recipe_text = "# Cell " + cell.name + " of " + path + ", expanded from " + m.base_path +
                       "\n" + EditRecipe(base_text, edits, m.base_path);
    m.cells.push_back(std::move(cell));
    size_t a = m.axes.size();
    while (a > 0) {
      --a;
      if (++index[a] < values[a].size()) break;
      index[a] = 0;
      if (a == 0) return m;
    }
    if (m.axes.empty()) return m;
  }
}

bool CellMatches(const Matrix& matrix, const MatrixCell& cell, const std::string& filter) {
  if (filter.empty()) return true;
  auto named = matrix.filters.find(filter);
  const std::string expression = named == matrix.filters.end() ? filter : named->second;
  std::stringstream terms(expression);
  std::string term;
  while (std::getline(terms, term, ',')) {
    term = Trim(term);
    if (term.empty()) continue;
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
    std::stringstream alternatives(term.substr(eq + 1));
    std::string value;
    while (std::getline(alternatives, value, '|')) any |= Trim(value) == it->second;
    if (!any) return false;
  }
  return true;
}

int RunMatrix(const MatrixOptions& options, std::ostream& console) {
  const auto start = std::chrono::steady_clock::now();
  Matrix matrix = LoadMatrix(options.matrix_path);
  std::vector<const MatrixCell*> selected;
  for (const MatrixCell& cell : matrix.cells) {
    if (CellMatches(matrix, cell, options.filter)) selected.push_back(&cell);
  }
  if (selected.empty()) throw InputError("--filter '" + options.filter + "' selects no cell");
  const std::string out_dir = options.out_dir.empty() ? "out/" + matrix.name : options.out_dir;
  std::error_code ec;
  if (fs::exists(out_dir, ec) && !fs::is_directory(out_dir, ec)) {
    throw InputError(out_dir + ": --out is a file, expected a directory");
  }
  fs::create_directories(out_dir, ec);
  if (ec) throw InputError(out_dir + ": cannot create the output directory: " + ec.message());
  const OutputLock lock(out_dir);

  // Cells whose recipe breaks a rule cannot run: skipped, with the validation message.
  std::vector<RunReport> cells(selected.size());
  std::vector<std::string> paths(selected.size());
  std::vector<size_t> runnable;
  for (size_t i = 0; i < selected.size(); ++i) {
    const MatrixCell& cell = *selected[i];
    cells[i].name = matrix.name + "." + cell.name;
    cells[i].timestamp = UtcTimestamp(/*with_zone=*/false);
    const fs::path dir = fs::path(out_dir) / cell.name;
    fs::create_directories(dir);
    paths[i] = (dir / "recipe.toml").string();
    std::ofstream(paths[i], std::ios::binary) << cell.recipe_text;
    try {
      ParseRecipe(cell.recipe_text, paths[i]);
      runnable.push_back(i);
    } catch (const InputError& e) {
      CheckResult skipped;
      skipped.kind = CheckKind::kCell;
      skipped.name = "cell";
      skipped.verdict = Verdict::kSkipped;
      skipped.summary = std::string("cannot run: ") + e.what();
      cells[i].checks.push_back(skipped);
    }
  }

  console << "matrix " << matrix.name << ": " << selected.size() << " of " << matrix.cells.size()
          << " cells selected, " << runnable.size() << " runnable, " << options.jobs
          << " at a time\n";
  std::mutex mutex;
  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (size_t n = next++; n < runnable.size(); n = next++) {
      const size_t i = runnable[n];
      RunOptions run;
      run.recipe_path = paths[i];
      run.out_dir = (fs::path(out_dir) / selected[i]->name).string();
      run.repeats = options.repeats;
      run.no_golden = true;
      run.no_golden_reason = "matrix cells are compared across arms, not with goldens";
      run.quiet = true;
      run.command_line = options.command_line;
      std::ostringstream cell_console;
      RunReport outcome;
      outcome.timestamp = UtcTimestamp(/*with_zone=*/false);
      try {
        outcome = RunRecipe(run, cell_console);
      } catch (const std::exception& e) {
        // A cell that passed validation can still meet bad input (an unreadable trace, say).
        const bool bad_input = dynamic_cast<const InputError*>(&e) != nullptr;
        outcome.exit_code = bad_input ? kExitBadInput : kExitInfrastructure;
        CheckResult error;
        error.kind = CheckKind::kCell;
        error.name = "cell";
        error.verdict = Verdict::kError;
        error.summary = e.what();
        outcome.checks.push_back(error);
      }
      std::lock_guard<std::mutex> lock(mutex);
      outcome.name = cells[i].name;
      cells[i] = outcome;
      int failed = 0;
      for (const CheckResult& c : outcome.checks) {
        failed += c.verdict == Verdict::kFail || c.verdict == Verdict::kError;
      }
      char line[256];
      std::snprintf(line, sizeof(line), "  %-40s %s (%zu checks, %d failed, %.1f s)\n",
                    selected[i]->name.c_str(), failed ? "FAIL" : "pass", outcome.checks.size(),
                    failed, outcome.seconds);
      console << line << std::flush;
      if (failed && !options.quiet) console << cell_console.str();
    }
  };
  std::vector<std::thread> threads;
  for (int64_t j = 0; j < std::max<int64_t>(1, options.jobs); ++j) threads.emplace_back(worker);
  for (std::thread& t : threads) t.join();

  // The cells x checks table.
  std::vector<std::string> columns;
  auto column_of = [&](const std::string& check) {
    // "overlap vs reference: loss" and the like share a column across cells.
    auto it = std::find(columns.begin(), columns.end(), check);
    if (it == columns.end()) {
      columns.push_back(check);
      return columns.size() - 1;
    }
    return static_cast<size_t>(it - columns.begin());
  };
  for (const RunReport& cell : cells) {
    for (const CheckResult& c : cell.checks) column_of(c.name);
  }
  nlohmann::json report;
  report["matrix"] = {{"name", matrix.name}, {"path", matrix.path}, {"base", matrix.base_path}};
  report["filter"] = options.filter;
  report["axes"] = matrix.axes;
  report["checks"] = columns;
  report["cells"] = nlohmann::json::array();
  int worst = kExitPass;
  std::ostringstream table;
  table << "\ncells x checks (P pass, F fail, S skipped, E error):\n";
  for (size_t c = 0; c < columns.size(); ++c) table << "  [" << c + 1 << "] " << columns[c] << "\n";
  for (size_t i = 0; i < selected.size(); ++i) {
    nlohmann::json cell = {{"name", selected[i]->name},
                           {"values", selected[i]->values},
                           {"exit_code", cells[i].exit_code},
                           {"seconds", cells[i].seconds}};
    std::string row(columns.size(), '-');
    nlohmann::json verdicts = nlohmann::json::object();
    for (const CheckResult& c : cells[i].checks) {
      const char mark = c.verdict == Verdict::kPass      ? 'P'
                        : c.verdict == Verdict::kFail    ? 'F'
                        : c.verdict == Verdict::kSkipped ? 'S'
                                                         : 'E';
      row[column_of(c.name)] = mark;
      verdicts[c.name] = {{"verdict", ToString(c.verdict)}, {"summary", c.summary}};
    }
    cell["checks"] = verdicts;
    report["cells"].push_back(cell);
    char line[128];
    std::snprintf(line, sizeof(line), "  %-40s ", selected[i]->name.c_str());
    table << line;
    for (char mark : row) table << ' ' << mark;
    table << "\n";
    worst = std::max(worst, cells[i].exit_code);
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  report["exit_code"] = worst;
  report["seconds"] = seconds;
  WriteFileAtomically((fs::path(out_dir) / "junit.xml").string(), JunitReport(cells));
  WriteFileAtomically((fs::path(out_dir) / "report.json").string(), report.dump(2) + "\n");
  table << "result: " << ResultWord(worst) << " (exit " << worst << ") in "
        << static_cast<int>(seconds) << " s; reports: " << out_dir << "/junit.xml, " << out_dir
        << "/report.json\n";
  console << table.str() << std::flush;
  return worst;
}

}  // namespace bitparity
