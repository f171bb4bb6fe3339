// The recipe's key tables against what they drive: the reader, the unknown-key hint, the key
// reference in docs/recipe-keys.md and the README's summary table.

#include "config/recipe_schema.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

#include "config/recipe.h"
#include "core/errors.h"
#include "tests/support/test_support.h"

namespace bitparity {
namespace {

constexpr char kArm[] = "\n[arms.reference]\nengine = \"reference\"\n";

// The text between `begin` and `end` in `text`, or "" when either marker is missing.
std::string Between(const std::string& text, const std::string& begin, const std::string& end) {
  const size_t from = text.find(begin);
  const size_t to = text.find(end);
  if (from == std::string::npos || to == std::string::npos || to < from) return "";
  return text.substr(from + begin.size(), to - from - begin.size());
}

constexpr char kRegenerate[] =
    " is out of date with the recipe's key tables (config/recipe_schema.cpp); regenerate it from "
    "`build/bitparity validate --keys` (see docs/recipe-keys.md)";

TEST(RecipeSchema, KeyReferenceInDocsIsTheGeneratedOne) {
  const std::string doc = testing::ReadFile(testing::SourceDir() + "/docs/recipe-keys.md");
  EXPECT_EQ(Between(doc, "<!-- recipe-keys:begin -->\n", "<!-- recipe-keys:end -->"),
            RecipeKeysMarkdown())
      << "docs/recipe-keys.md" << kRegenerate;
}

TEST(RecipeSchema, ReadmeSummaryIsTheGeneratedOne) {
  const std::string readme = testing::ReadFile(testing::SourceDir() + "/README.md");
  EXPECT_EQ(
      Between(readme, "<!-- recipe-keys-summary:begin -->\n", "<!-- recipe-keys-summary:end -->"),
      RecipeKeysSummaryMarkdown())
      << "README.md's key table" << kRegenerate;
}

// Every key of a fixed table, written with the default the reference shows, is read without a
// message: the reference's keys are the reader's keys and its defaults are within range.
TEST(RecipeSchema, EveryDocumentedDefaultIsAcceptedByTheReader) {
  const std::set<std::string> fixed = {"[model]",     "[parallel]",  "[data]", "[train]",
                                       "[precision]", "[recompute]", "[trace]"};
  int checked = 0;
  for (const RecipeKeyDoc& d : RecipeKeyDocs()) {
    if (!fixed.count(d.table) || d.default_value == "unset") continue;
    const std::string text = d.table + "\n" + d.key + " = " + d.default_value + "\n" + kArm;
    try {
      ParseRecipe(text, "keys.toml");
    } catch (const InputError& e) {
      ADD_FAILURE() << d.table << " " << d.key << " = " << d.default_value << ": " << e.what();
    }
    ++checked;
  }
  EXPECT_GT(checked, 40);
}

// The unknown-key message names the closest key when it is a slip away, and lists exactly the
// table's keys, in the table's order.
TEST(RecipeSchema, UnknownKeyMessageListsTheTablesKeys) {
  std::string known;
  for (const RecipeKeyDoc& d : RecipeKeyDocs()) {
    if (d.table == "[parallel]") known += (known.empty() ? "" : ", ") + d.key;
  }
  try {
    ParseRecipe(std::string("[parallel]\nepp = 2\n") + kArm, "keys.toml");
    FAIL() << "an unknown key was accepted";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()),
              "keys.toml: [parallel] has unknown key 'epp' (line 2); did you mean 'ep'?; known "
              "keys: " +
                  known);
  }
}

// A name no slip away from any key gets no suggestion.
TEST(RecipeSchema, AFarNameGetsNoSuggestion) {
  try {
    ParseRecipe(std::string("[parallel]\nthroughput = 2\n") + kArm, "keys.toml");
    FAIL() << "an unknown key was accepted";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()).find("did you mean"), std::string::npos) << e.what();
  }
}

// A key that is in the reference but that the reader does not take would be reported unknown;
// one the reader takes but the reference lacks would be missing here. Both directions, on [arms].
TEST(RecipeSchema, ArmKeysAreTheArmTablesKeys) {
  std::string known;
  for (const RecipeKeyDoc& d : RecipeKeyDocs()) {
    if (d.table == "[arms.NAME]") known += (known.empty() ? "" : ", ") + d.key;
  }
  EXPECT_EQ(known, "engine, command, dispatcher, delay_wgrad, recompute, precision");
  try {
    ParseRecipe("[arms.reference]\nengine = \"reference\"\nrecomput = {}\n", "keys.toml");
    FAIL() << "an unknown key was accepted";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()),
              "keys.toml: [arms.reference] has unknown key 'recomput' (line 3); did you mean "
              "'recompute'?; known keys: " +
                  known);
  }
}

}  // namespace
}  // namespace bitparity
