#include "harness/trace_merge.h"

#include <filesystem>
#include <set>

#include "comm/rank_protocol.h"
#include "config/recipe.h"
#include "core/errors.h"
#include "trace/trace_keys.h"

namespace bitparity {
namespace {

namespace fs = std::filesystem;

int64_t WorldSizeOf(const Trace& part, const std::string& path) {
  const std::string& text = part.attribute(trace_keys::kWorldSize);
  try {
    size_t used = 0;
    const int64_t world = std::stoll(text, &used);
    if (used == text.size() && world > 0) return world;
  } catch (const std::exception&) {
  }
  throw InputError(path + ": attribute world_size is '" + text + "'");
}

// A file named like a part of a rank outside the world: a stray of another run.
void RefuseStrayParts(const std::string& parts_dir, int64_t world) {
  std::set<std::string> expected;
  for (int64_t r = 0; r < world; ++r) expected.insert(RankPartFileName(r));
  std::error_code ec;
  for (fs::directory_iterator it(parts_dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    const bool part_like = name.rfind("rank_", 0) == 0 && name.size() > 8 &&
                           name.compare(name.size() - 3, 3, ".h5") == 0;
    if (part_like && expected.count(name) == 0) {
      throw InputError(
          it->path().string() + ": a rank part outside this world of " + std::to_string(world) +
          " rank(s) (rank 0's part says world_size " + std::to_string(world) +
          "): a part of another run; merge each run's parts from a folder of their own");
    }
  }
}

// What every part must share with rank 0's: one run of one recipe, arm and world, under the same
// developer switches (an absent attribute reads as empty: a part without switches differs from
// one with).
void RequireSameRun(const Trace& part, const Trace& first, const std::string& path) {
  for (const char* key :
       {trace_keys::kWorldSize, trace_keys::kArm, trace_keys::kRecipe, trace_keys::kRecipeDigest,
        trace_keys::kRunIdentity, trace_keys::kDeveloperSwitches}) {
    if (part.attribute(key) != first.attribute(key)) {
      throw InputError(path + ": its " + key + " ('" + part.attribute(key).substr(0, 80) +
                       "') differs from rank 0's part ('" + first.attribute(key).substr(0, 80) +
                       "'): parts of different runs");
    }
  }
  const std::string& text = part.attribute(trace_keys::kRecipe);
  if (RecipeDigest(text) != part.attribute(trace_keys::kRecipeDigest)) {
    throw InputError(path + ": its recipe_digest " + part.attribute(trace_keys::kRecipeDigest) +
                     " is not its recipe text's (" + RecipeDigest(text) +
                     "): the part was changed after its rank wrote it");
  }
}

}  // namespace

Trace ReadOwnTracePart(const std::string& path) {
  return ReadTrace(path, /*require_complete=*/false);
}

std::vector<std::string> TracePartPaths(const std::string& parts_dir, int64_t world_size) {
  std::vector<std::string> paths;
  for (int64_t r = 0; r < world_size; ++r) {
    paths.push_back((fs::path(parts_dir) / RankPartFileName(r)).string());
  }
  return paths;
}

Trace MergeTraceParts(const std::string& parts_dir, const TracePartReader& read) {
  if (!fs::is_directory(parts_dir)) throw InputError(parts_dir + ": not a directory");
  const std::string first_path = (fs::path(parts_dir) / RankPartFileName(0)).string();
  Trace first = read(first_path);
  const int64_t world = WorldSizeOf(first, first_path);
  RefuseStrayParts(parts_dir, world);
  Trace merged;
  merged.attributes = first.attributes;
  const std::vector<std::string> paths = TracePartPaths(parts_dir, world);
  for (int64_t r = 0; r < world; ++r) {
    const std::string& path = paths[static_cast<size_t>(r)];
    Trace part = r == 0 ? first : read(path);
    if (part.ranks.size() != 1 || part.ranks[0].rank != r) {
      throw InputError(path + ": is not the part of rank " + std::to_string(r));
    }
    RequireSameRun(part, first, path);
    merged.ranks.push_back(std::move(part.ranks[0]));
  }
  return merged;
}

}  // namespace bitparity
