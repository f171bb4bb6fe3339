#include "tests/support/recipe_builder.h"

#include <sstream>
#include <stdexcept>

#include "tests/support/test_support.h"

namespace bitparity::testing {

RecipeBuilder::RecipeBuilder(int layers, int mtp_layers) {
  root_ = toml::parse(SmallModelTable(layers, mtp_layers));
  Set("parallel.ep", 2);
  Set("train.micro_batch", 2);
  Set("train.global_batch", 12);
  Set("train.iterations", 3);
}

toml::table& RecipeBuilder::TableOf(const std::string& key, std::string* leaf) {
  toml::table* table = &root_;
  std::string rest = key;
  for (size_t dot = rest.find('.'); dot != std::string::npos; dot = rest.find('.')) {
    const std::string name = rest.substr(0, dot);
    if (!table->contains(name)) table->insert(name, toml::table{});
    table = (*table)[name].as_table();
    if (table == nullptr) throw std::logic_error("RecipeBuilder: " + key + " runs through a value");
    rest = rest.substr(dot + 1);
  }
  *leaf = rest;
  return *table;
}

RecipeBuilder& RecipeBuilder::Set(const std::string& key, int64_t value) {
  std::string leaf;
  TableOf(key, &leaf).insert_or_assign(leaf, value);
  return *this;
}

RecipeBuilder& RecipeBuilder::Set(const std::string& key, double value) {
  std::string leaf;
  TableOf(key, &leaf).insert_or_assign(leaf, value);
  return *this;
}

RecipeBuilder& RecipeBuilder::Set(const std::string& key, const std::string& value) {
  std::string leaf;
  TableOf(key, &leaf).insert_or_assign(leaf, value);
  return *this;
}

RecipeBuilder& RecipeBuilder::Set(const std::string& key, bool value) {
  std::string leaf;
  TableOf(key, &leaf).insert_or_assign(leaf, value);
  return *this;
}

RecipeBuilder& RecipeBuilder::SetList(const std::string& key, const std::vector<int64_t>& values) {
  toml::array list;
  for (int64_t v : values) list.push_back(v);
  std::string leaf;
  TableOf(key, &leaf).insert_or_assign(leaf, list);
  return *this;
}

RecipeBuilder& RecipeBuilder::AddTable(const std::string& key, const std::string& table) {
  std::string leaf;
  toml::table& parent = TableOf(key, &leaf);
  if (!parent.contains(leaf)) parent.insert(leaf, toml::array{});
  toml::array* tables = parent[leaf].as_array();
  if (tables == nullptr) throw std::logic_error("RecipeBuilder: " + key + " is not an array");
  tables->push_back(toml::parse(table));
  return *this;
}

RecipeBuilder& RecipeBuilder::FullRecomputeAll(const std::string& method, int num_layers) {
  return Set("recompute.granularity", "full")
      .Set("recompute.method", method)
      .Set("recompute.num_layers", num_layers);
}

RecipeBuilder& RecipeBuilder::Arm(const std::string& name, const std::string& engine,
                                  const std::string& overrides) {
  toml::table arm = toml::parse(overrides);
  arm.insert_or_assign("engine", engine);
  std::string leaf;
  TableOf("arms." + name, &leaf).insert_or_assign(leaf, arm);
  return *this;
}

RecipeBuilder& RecipeBuilder::ModelShape(int64_t hidden, int64_t moe_ffn, int64_t ffn,
                                         int64_t vocab, int64_t seq_len) {
  return Set("model.hidden", hidden)
      .Set("model.moe_ffn", moe_ffn)
      .Set("model.ffn", ffn)
      .Set("model.vocab", vocab)
      .Set("model.seq_len", seq_len);
}

RecipeBuilder& RecipeBuilder::Batches(int64_t global_batch, int64_t iterations) {
  return Set("train.global_batch", global_batch).Set("train.iterations", iterations);
}

RecipeBuilder& RecipeBuilder::ParityArms(const std::string& recompute) {
  return Arm("reference", "reference", recompute)
      .Arm("overlap", "overlap", recompute)
      .Arm("reference_none", "reference");
}

std::string FullRecompute(const std::string& method, int num_layers) {
  return "recompute = { granularity = \"full\", method = \"" + method +
         "\", num_layers = " + std::to_string(num_layers) + " }";
}

std::string RecomputeOverride(const std::string& setting) {
  if (setting == "none") return "recompute = { granularity = \"none\" }";
  const size_t dash = setting.find('-');
  if (dash == std::string::npos) {
    throw std::logic_error("RecomputeOverride: '" + setting + "' is not none or METHOD-N");
  }
  return FullRecompute(setting.substr(0, dash), std::stoi(setting.substr(dash + 1)));
}

RecipeBuilder& RecipeBuilder::TwoChunkPipeline(int64_t pp) {
  return Set("parallel.pp", pp)
      .Set("parallel.vpp", int64_t{2})
      .Set("train.global_batch", int64_t{16});
}

std::string RecipeBuilder::Text() const {
  std::ostringstream out;
  out << root_ << "\n";
  return out.str();
}

Recipe RecipeBuilder::Build(const std::string& path) const { return ParseRecipe(Text(), path); }

}  // namespace bitparity::testing
