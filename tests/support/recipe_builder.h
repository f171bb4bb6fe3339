#ifndef BITPARITY_TESTS_SUPPORT_RECIPE_BUILDER_H_
#define BITPARITY_TESTS_SUPPORT_RECIPE_BUILDER_H_

// Test recipes as data instead of the same TOML template in every test: the small model
// (SmallModelTable: hidden 32, 4 experts, seq 16), EP 2 and a short run by default, then dotted
// keys set and arms added with their overrides.
//
//   Recipe r = RecipeBuilder(3, 1).Set("precision.recipe", "fp32")
//                  .Arm("reference", "reference", "recompute = { granularity = \"full\", ... }")
//                  .Arm("overlap", "overlap").Build("parity.toml");

#include <toml++/toml.h>

#include <cstdint>
#include <string>
#include <vector>

#include "config/recipe.h"

namespace bitparity::testing {

// `recompute = { granularity = "full", method = METHOD, num_layers = N }`, an arm override.
std::string FullRecompute(const std::string& method, int num_layers);
// The override of a recompute setting written "none" or "METHOD-N" (e.g. "block-2").
std::string RecomputeOverride(const std::string& setting);

class RecipeBuilder {
 public:
  // [model] of SmallModelTable(layers, mtp_layers); [parallel] ep = 2; [train] micro_batch = 2,
  // global_batch = 12 (3 microbatches per rank), iterations = 3; no arms yet.
  explicit RecipeBuilder(int layers = 3, int mtp_layers = 0);

  // Sets a dotted key ("train.iterations"), creating its tables.
  RecipeBuilder& Set(const std::string& key, int64_t value);
  RecipeBuilder& Set(const std::string& key, int value) { return Set(key, int64_t{value}); }
  RecipeBuilder& Set(const std::string& key, double value);
  RecipeBuilder& Set(const std::string& key, bool value);
  RecipeBuilder& Set(const std::string& key, const std::string& value);
  RecipeBuilder& Set(const std::string& key, const char* value) {
    return Set(key, std::string(value));
  }
  // [model] hidden, moe_ffn, ffn, vocab and seq_len at once (a model other than the small one).
  RecipeBuilder& ModelShape(int64_t hidden, int64_t moe_ffn, int64_t ffn, int64_t vocab,
                            int64_t seq_len);
  // An integer list ("trace.dump_grads_at").
  RecipeBuilder& SetList(const std::string& key, const std::vector<int64_t>& values);
  // Appends a table, given as TOML lines, to the array of tables `key` ("compare.overlap").
  RecipeBuilder& AddTable(const std::string& key, const std::string& table);
  // The recipe's [recompute]: granularity "full", `method`, `num_layers`.
  RecipeBuilder& FullRecomputeAll(const std::string& method, int num_layers);
  // [train] global_batch and iterations.
  RecipeBuilder& Batches(int64_t global_batch, int64_t iterations);
  // pp pipeline ranks with two model chunks each, and 16 samples per iteration (enough
  // microbatches for the interleaved schedule).
  RecipeBuilder& TwoChunkPipeline(int64_t pp);

  // Adds [arms.NAME] with `engine` and `overrides`, TOML lines of the arm's table (e.g.
  // "recompute = { granularity = \"full\", method = \"uniform\", num_layers = 1 }").
  RecipeBuilder& Arm(const std::string& name, const std::string& engine,
                     const std::string& overrides = "");

  // The three arms of a parity test: "reference" and "overlap" with `recompute` (an arm
  // override line, e.g. FullRecompute("uniform", 1)), and "reference_none" without recompute.
  RecipeBuilder& ParityArms(const std::string& recompute);

  std::string Text() const;
  // ParseRecipe of Text(), with `path` in its messages.
  Recipe Build(const std::string& path = "test.toml") const;

 private:
  toml::table& TableOf(const std::string& key, std::string* leaf);
  toml::table root_;
};

}  // namespace bitparity::testing

#endif  // BITPARITY_TESTS_SUPPORT_RECIPE_BUILDER_H_
