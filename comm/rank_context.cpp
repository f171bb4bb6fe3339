#include "comm/rank_context.h"

#include <cstdlib>
#include <string>

#include "core/errors.h"

extern char** environ;

namespace bitparity {
namespace {

int64_t ParseInt(const std::map<std::string, std::string>& env, const std::string& name,
                 int64_t min, int64_t max) {
  const std::string& text = env.at(name);
  try {
    size_t used = 0;
    long long value = std::stoll(text, &used);
    if (used != text.size()) throw std::invalid_argument(text);
    if (value < min || value > max) {
      throw InputError("environment variable " + name + " must be in [" + std::to_string(min) +
                       ", " + std::to_string(max) + "], got " + text);
    }
    return value;
  } catch (const InputError&) {
    throw;
  } catch (const std::exception&) {
    throw InputError("environment variable " + name + " must be an integer, got '" + text + "'");
  }
}

}  // namespace

RankContext RankContextFromEnvironment(const std::map<std::string, std::string>& env) {
  RankContext ctx;
  auto has = [&](const char* name) { return env.count(name) > 0 && !env.at(name).empty(); };
  if (has("RANK") || has("WORLD_SIZE")) {
    if (!has("RANK") || !has("WORLD_SIZE")) {
      throw InputError("environment: RANK and WORLD_SIZE must be set together");
    }
    ctx.source = "torchrun";
    ctx.world_size = ParseInt(env, "WORLD_SIZE", 1, 1 << 20);
    ctx.rank = ParseInt(env, "RANK", 0, ctx.world_size - 1);
    ctx.local_rank = has("LOCAL_RANK") ? ParseInt(env, "LOCAL_RANK", 0, 1 << 20) : ctx.rank;
  } else if (has("SLURM_PROCID") && has("SLURM_NTASKS")) {
    ctx.source = "slurm";
    ctx.world_size = ParseInt(env, "SLURM_NTASKS", 1, 1 << 20);
    ctx.rank = ParseInt(env, "SLURM_PROCID", 0, ctx.world_size - 1);
    ctx.local_rank = has("SLURM_LOCALID") ? ParseInt(env, "SLURM_LOCALID", 0, 1 << 20) : 0;
  }
  ctx.agent_store =
      has("TORCHELASTIC_USE_AGENT_STORE") && env.at("TORCHELASTIC_USE_AGENT_STORE") == "True";
  if (has("MASTER_ADDR")) ctx.master_addr = env.at("MASTER_ADDR");
  if (has("MASTER_PORT"))
    ctx.master_port = static_cast<int>(ParseInt(env, "MASTER_PORT", 1, 65535));
  if (ctx.world_size > 1 && ctx.master_port == 0) {
    throw InputError("environment: MASTER_PORT must be set when the world has " +
                     std::to_string(ctx.world_size) + " ranks");
  }
  return ctx;
}

RankContext RankContextFromEnvironment() {
  std::map<std::string, std::string> env;
  for (char** e = environ; e && *e; ++e) {
    std::string entry(*e);
    size_t eq = entry.find('=');
    if (eq != std::string::npos) env[entry.substr(0, eq)] = entry.substr(eq + 1);
  }
  return RankContextFromEnvironment(env);
}

ParallelLayout ParallelLayout::Make(int64_t rank, int64_t world_size, int64_t ep_size,
                                    int64_t experts, int64_t pp_size) {
  if (world_size != ep_size * pp_size) {
    throw InputError("the world has " + std::to_string(world_size) +
                     " ranks but the recipe's [parallel] pp x ep is " + std::to_string(pp_size) +
                     " x " + std::to_string(ep_size) + " = " + std::to_string(pp_size * ep_size) +
                     " (world = pp x ep)");
  }
  ParallelLayout layout;
  layout.rank = rank;
  layout.world_size = world_size;
  layout.ep_size = ep_size;
  layout.ep_rank = rank % ep_size;
  layout.pp_size = pp_size;
  layout.pp_rank = rank / ep_size;
  layout.dp_size = ep_size;
  layout.dp_rank = layout.ep_rank;
  layout.experts = experts;
  layout.experts_per_rank = experts / ep_size;
  return layout;
}

std::vector<int64_t> ParallelLayout::EpGroup() const {
  std::vector<int64_t> ranks;
  for (int64_t e = 0; e < ep_size; ++e) ranks.push_back(pp_rank * ep_size + e);
  return ranks;
}

std::vector<int64_t> ParallelLayout::PipelineGroup() const {
  std::vector<int64_t> ranks;
  for (int64_t p = 0; p < pp_size; ++p) ranks.push_back(p * ep_size + ep_rank);
  return ranks;
}

}  // namespace bitparity
