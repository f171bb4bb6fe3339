#ifndef BITPARITY_CONFIG_RECIPE_SCHEMA_H_
#define BITPARITY_CONFIG_RECIPE_SCHEMA_H_

// The recipe's keys as data. Each table of a recipe has one KeyTable: every key with the member
// it fills, its range or choices, and what it means. The reader (config/recipe.cpp) reads a table
// by walking its KeyTable, so an unknown key's message lists exactly these keys; `bitparity
// validate --keys` and the README's key table print them. A key, its default (the struct's
// member initializer), its range and its doc are written once, here and in config/recipe.h.
//
//   KeyTable<DataConfig>("[data]").Int("branching", &DataConfig::branching, 1, 1 << 16,
//                                      "successors per token of the synthetic Markov chain");

#include <cstdint>
#include <functional>
#include <limits>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "config/recipe.h"
#include "config/toml_reader.h"
#include "core/enum_names.h"

namespace bitparity {

// The spelling of every enum value a recipe can name.
inline constexpr EnumName<EngineKind> kEngineNames[] = {{EngineKind::kReference, "reference"},
                                                        {EngineKind::kOverlap, "overlap"},
                                                        {EngineKind::kExternal, "external"}};
inline constexpr EnumName<Dispatcher> kDispatcherNames[] = {{Dispatcher::kAllToAll, "alltoall"},
                                                            {Dispatcher::kFlex, "flex"}};
inline constexpr EnumName<PrecisionRecipe> kPrecisionNames[] = {
    {PrecisionRecipe::kFp32, "fp32"},
    {PrecisionRecipe::kBf16, "bf16"},
    {PrecisionRecipe::kBlockwise, "blockwise"},
    {PrecisionRecipe::kMxfp8, "mxfp8"}};
inline constexpr EnumName<Fp8Scaling> kFp8ScalingNames[] = {{Fp8Scaling::kCurrent, "current"},
                                                            {Fp8Scaling::kDelayed, "delayed"}};
inline constexpr EnumName<Fp8Backend> kFp8BackendNames[] = {{Fp8Backend::kEmulated, "emulated"},
                                                            {Fp8Backend::kNative, "native"}};
inline constexpr EnumName<DeviceKind> kDeviceNames[] = {{DeviceKind::kCpu, "cpu"},
                                                        {DeviceKind::kCuda, "cuda"}};
inline constexpr EnumName<RecomputeGranularity> kGranularityNames[] = {
    {RecomputeGranularity::kNone, "none"}, {RecomputeGranularity::kFull, "full"}};
inline constexpr EnumName<RecomputeMethod> kMethodNames[] = {{RecomputeMethod::kUniform, "uniform"},
                                                             {RecomputeMethod::kBlock, "block"}};
inline constexpr EnumName<RecomputeUnit> kUnitNames[] = {{RecomputeUnit::kSegment, "segment"},
                                                         {RecomputeUnit::kChunk, "chunk"}};
inline constexpr EnumName<LrSchedule> kLrScheduleNames[] = {{LrSchedule::kConstant, "constant"},
                                                            {LrSchedule::kCosine, "cosine"}};

// One key of the recipe as the reference prints it.
struct RecipeKeyDoc {
  std::string table;          // "[model]"; "top level" for the file's own keys
  std::string key;            // "hidden"
  std::string type;           // "integer in [2, 65536]", "\"alltoall\" | \"flex\"", ...
  std::string default_value;  // as TOML writes it; "" when the key has no default
  std::string doc;            // what the key means
};

// The keys of one table of type Config, in the order they are read and printed.
template <typename Config>
class KeyTable {
 public:
  using Read = std::function<void(TableReader&, Config*)>;

  explicit KeyTable(std::string table) : table_(std::move(table)) {}

  KeyTable& Int(const char* key, int64_t Config::*member, int64_t min, int64_t max,
                const char* doc) {
    return Add(
        key, IntRange(min, max), [member](const Config& c) { return std::to_string(c.*member); },
        doc, [=](TableReader& r, Config* c) { c->*member = r.Int(key, c->*member, min, max); });
  }

  // A number in [min, max] (or (min, max] when min_exclusive); integers are accepted.
  KeyTable& Float(const char* key, double Config::*member, double min, double max, const char* doc,
                  bool min_exclusive = false) {
    std::ostringstream type;
    type << "number " << (min_exclusive ? "> " : ">= ") << FloatText(min);
    if (max < std::numeric_limits<double>::max()) type << ", <= " << FloatText(max);
    return Add(
        key, type.str(), [member](const Config& c) { return FloatText(c.*member); }, doc,
        [=](TableReader& r, Config* c) {
          c->*member = r.Float(key, c->*member, min, max, min_exclusive);
        });
  }

  // One of the names of `names`; `was_set` (if given) records that the recipe wrote the key.
  template <typename E, size_t N>
  KeyTable& Enum(const char* key, E Config::*member, const EnumName<E> (&names)[N], const char* doc,
                 bool Config::*was_set = nullptr) {
    std::string type;
    for (const EnumName<E>& n : names) type += (type.empty() ? "" : " | ") + Quoted(n.name);
    return Add(
        key, type, [member, &names](const Config& c) { return Quoted(NameIn(names, c.*member)); },
        doc,
        [=, &names](TableReader& r, Config* c) {
          bool set = false;
          c->*member = r.Enum(key, c->*member, names, &set);
          if (was_set && set) c->*was_set = true;
        });
  }

  KeyTable& Bool(const char* key, bool Config::*member, const char* doc) {
    return Add(
        key, "true | false", [member](const Config& c) { return c.*member ? "true" : "false"; },
        doc, [=](TableReader& r, Config* c) { c->*member = r.Bool(key, c->*member); });
  }

  KeyTable& String(const char* key, std::string Config::*member, const char* doc) {
    return Add(
        key, "string", [member](const Config& c) { return Quoted((c.*member).c_str()); }, doc,
        [=](TableReader& r, Config* c) { c->*member = r.String(key, c->*member); });
  }

  // A key whose reading is its own (a list, a sub-table, a value without a member).
  KeyTable& Custom(const char* key, std::string type, std::string default_value, const char* doc,
                   Read read) {
    return Add(
        key, std::move(type), [default_value](const Config&) { return default_value; }, doc,
        std::move(read));
  }

  // The last key's default as the reference shows it, when the member's initial value means
  // "not set" rather than a value a recipe could write.
  KeyTable& ShownDefault(std::string text) {
    keys_.back().default_text = [text](const Config&) { return text; };
    return *this;
  }

  // Reads every key of the table into `config`, then reports the keys the table does not have.
  void ReadAll(TableReader& r, Config* config) const {
    ReadKeys(r, config);
    r.RejectUnknown();
  }
  // Reads every key of the table; other keys are the caller's to read or reject.
  void ReadKeys(TableReader& r, Config* config) const {
    for (const Key& k : keys_) k.read(r, config);
  }

  // The keys for the reference, with their defaults taken from `defaults`.
  void Describe(const Config& defaults, std::vector<RecipeKeyDoc>* out) const {
    for (const Key& k : keys_)
      out->push_back({table_, k.key, k.type, k.default_text(defaults), k.doc});
  }

  const std::string& table() const { return table_; }

 private:
  struct Key {
    const char* key;
    std::string type;
    std::function<std::string(const Config&)> default_text;
    const char* doc;
    Read read;
  };

  KeyTable& Add(const char* key, std::string type,
                std::function<std::string(const Config&)> default_text, const char* doc,
                Read read) {
    keys_.push_back({key, std::move(type), std::move(default_text), doc, std::move(read)});
    return *this;
  }

  static std::string Quoted(const char* name) { return std::string("\"") + name + "\""; }
  static std::string IntRange(int64_t min, int64_t max) {
    if (max == std::numeric_limits<int64_t>::max()) return "integer >= " + std::to_string(min);
    return "integer in [" + std::to_string(min) + ", " + std::to_string(max) + "]";
  }
  static std::string FloatText(double value) {
    std::ostringstream out;
    out << value;
    return out.str();
  }

  std::string table_;
  std::vector<Key> keys_;
};

// The key tables of a recipe (config/recipe_schema.cpp). TopLevelKeys reads only the file's own
// scalar keys; the reader reads the tables it names.
const KeyTable<Recipe>& TopLevelKeys();
const KeyTable<ModelConfig>& ModelKeys();
const KeyTable<ParallelConfig>& ParallelKeys();
const KeyTable<DataConfig>& DataKeys();
const KeyTable<TrainConfig>& TrainKeys();
const KeyTable<PrecisionConfig>& PrecisionKeys();
const KeyTable<RecomputeConfig>& RecomputeKeys();
const KeyTable<TraceConfig>& TraceKeys();
// [arms.NAME]: `arm` starts with the recipe's [recompute], [precision] and dispatcher.
const KeyTable<ArmConfig>& ArmKeys();
// [compare]; each entry of [[compare.memory]] is read by MemoryBoundKeys.
const KeyTable<ComparePolicy>& CompareKeys();
const KeyTable<MemoryBound>& MemoryBoundKeys();
// Each entry of [[compare.overlap]].
const KeyTable<OverlapBound>& OverlapBoundKeys();

// Every key of a recipe, table by table in the order a recipe lists them.
std::vector<RecipeKeyDoc> RecipeKeyDocs();

// The reference as a Markdown table (key, type, default, meaning): `bitparity validate --keys`
// prints it and docs/recipe-keys.md is it.
std::string RecipeKeysMarkdown();

// One row per table with its keys (and an enum's choices): the README's summary table.
std::string RecipeKeysSummaryMarkdown();

}  // namespace bitparity

#endif  // BITPARITY_CONFIG_RECIPE_SCHEMA_H_
