#include "config/recipe.h"

#include <toml++/toml.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>
#include <utility>

#include "config/names.h"
#include "config/recipe_schema.h"
#include "config/toml_reader.h"
#include "core/enum_names.h"
#include "core/errors.h"
#include "schedule/pipeline_schedule.h"
#include "trace/digest.h"

namespace bitparity {

const char* ToString(EngineKind engine) { return NameIn(kEngineNames, engine); }
const char* ToString(Dispatcher dispatcher) { return NameIn(kDispatcherNames, dispatcher); }

int64_t ParameterCount(const ModelConfig& m) {
  const int64_t h = m.hidden, n = m.mhc_streams, mhc_rows = n * n + 2 * n;
  // Per sublayer under mHC: the mapping, three gates, the bias (the block exit's mean has none).
  const int64_t mhc_sublayer = m.mhc() ? mhc_rows * n * h + 3 + mhc_rows : 0;
  auto layer = [&](bool moe) {
    const int64_t attention = h + 3 * h * h + h * h;
    const int64_t mlp = moe ? h + m.experts * h + m.experts * 3 * m.moe_ffn * h : h + 3 * m.ffn * h;
    return attention + mlp + 2 * mhc_sublayer;
  };
  int64_t count = 2 * m.vocab * h + h;  // embedding, head, final norm
  for (int64_t l = 0; l < m.layers; ++l) count += layer(m.layer_is_moe(l));
  // MTP depth: enorm, hnorm, eh_proj (or e_proj and h_proj), its layer, final norm.
  count += m.mtp_layers * (3 * h + 2 * h * h + layer(m.mtp_is_moe()));
  return count;
}
const char* ToString(PrecisionRecipe recipe) { return NameIn(kPrecisionNames, recipe); }
const char* ToString(Fp8Scaling scaling) { return NameIn(kFp8ScalingNames, scaling); }
const char* ToString(Fp8Backend backend) { return NameIn(kFp8BackendNames, backend); }
const char* ToString(DeviceKind device) { return NameIn(kDeviceNames, device); }
const char* ToString(RecomputeGranularity granularity) {
  return NameIn(kGranularityNames, granularity);
}
const char* ToString(RecomputeMethod method) { return NameIn(kMethodNames, method); }
const char* ToString(RecomputeUnit unit) { return NameIn(kUnitNames, unit); }
const char* ToString(LrSchedule schedule) { return NameIn(kLrScheduleNames, schedule); }

ModelConfig Recipe::model_of(const ArmConfig& arm) const {
  ModelConfig resolved = model;
  resolved.dispatcher = arm.dispatcher;
  return resolved;
}

PipelineLayout Recipe::pipeline() const {
  PipelineLayout layout =
      model.pipeline_layout.empty()
          ? EvenPipelineLayout(parallel.pp, parallel.vpp, model.layers, model.mtp_layers)
          : ParsePipelineLayout(model.pipeline_layout, parallel.pp, model.layers, model.mtp_layers);
  layout.microbatch_group = parallel.microbatch_group_size;
  return model.mhc() ? WithFinalNormOnTheMtpStage(std::move(layout)) : layout;
}

std::string Tolerance::Describe() const {
  std::ostringstream out;
  switch (kind) {
    case Kind::kBitwise:
      return "bitwise";
    case Kind::kAbsRel:
      out << "atol " << atol << ", rtol " << rtol;
      return out.str();
    case Kind::kUlps:
      out << "at most " << ulps << " ulp";
      return out.str();
  }
  return "?";
}

const ArmConfig& Recipe::arm(const std::string& arm_name) const {
  for (const ArmConfig& a : arms) {
    if (a.name == arm_name) return a;
  }
  std::ostringstream known;
  for (size_t i = 0; i < arms.size(); ++i) known << (i ? ", " : "") << arms[i].name;
  throw InputError(path + ": no arm named '" + arm_name + "' (the recipe has: " + known.str() +
                   ")");
}

std::vector<std::string> Recipe::arm_names() const {
  std::vector<std::string> names;
  for (const ArmConfig& a : arms) names.push_back(a.name);
  return names;
}

namespace {

// Rules that depend on several keys, checked on every arm's resolved settings.
void ValidateShapes(const Recipe& recipe, Diagnostics* diag) {
  const ModelConfig& m = recipe.model;
  if (m.hidden % m.heads != 0) {
    diag->Add("[model]", "hidden must be divisible by heads (" + std::to_string(m.heads) +
                             "), got " + std::to_string(m.hidden));
  } else if (m.head_dim() % 2 != 0) {
    diag->Add("[model]", "hidden / heads must be even for rotary embeddings, got " +
                             std::to_string(m.head_dim()));
  }
  if (m.topk > m.experts) {
    diag->Add("[model]", "topk must be <= experts (" + std::to_string(m.experts) + "), got " +
                             std::to_string(m.topk));
  }
  if (m.first_k_dense > m.layers) {
    diag->Add("[model]", "first_k_dense must be <= layers (" + std::to_string(m.layers) +
                             "), got " + std::to_string(m.first_k_dense));
  }
  if (recipe.data.min_length > m.seq_len) {
    diag->Add("[data]", "min_length must be <= [model] seq_len (" + std::to_string(m.seq_len) +
                            "), got " + std::to_string(recipe.data.min_length));
  }
  if (recipe.data.padded(m.seq_len) && recipe.data.min_length <= m.mtp_layers) {
    diag->Add("[data]",
              "min_length must be > [model] mtp_layers (" + std::to_string(m.mtp_layers) +
                  ": a sample must keep a token after its MTP depths roll it left), got " +
                  std::to_string(recipe.data.min_length));
  }
  if (m.mhc() && m.mtp_layers > 1) {
    diag->Add("[model]",
              "mhc_streams > 0 supports mtp_layers 0 or 1 (one MTP depth reads the "
              "decoder's streams), got " +
                  std::to_string(m.mtp_layers));
  }
  if (m.mtp_layers >= m.seq_len) {
    diag->Add("[model]", "mtp_layers must be < seq_len (" + std::to_string(m.seq_len) + "), got " +
                             std::to_string(m.mtp_layers));
  }
  if (m.experts % recipe.parallel.ep != 0) {
    diag->Add("[parallel]", "ep must divide [model] experts (" + std::to_string(m.experts) +
                                "), got ep = " + std::to_string(recipe.parallel.ep));
  }
  const TrainConfig& t = recipe.train;
  int64_t unit = t.micro_batch * recipe.data_parallel_size();
  if (t.global_batch % unit != 0) {
    diag->Add("[train]", "global_batch must be a multiple of micro_batch x data-parallel size (" +
                             std::to_string(t.micro_batch) + " x " +
                             std::to_string(recipe.data_parallel_size()) + " = " +
                             std::to_string(unit) + "), got " + std::to_string(t.global_batch));
  }
  if (t.min_lr > t.lr) {
    diag->Add("[train]", "min_lr must be <= lr (" + std::to_string(t.lr) + "), got " +
                             std::to_string(t.min_lr));
  }
  for (int64_t it : t.checkpoint_at) {
    if (it >= t.iterations) {
      diag->Add("[train]", "checkpoint_at entries must be < iterations (" +
                               std::to_string(t.iterations) +
                               ": a resume needs an iteration "
                               "left to train), got " +
                               std::to_string(it));
    }
  }
  if (t.resume_across_arms && t.checkpoint_at.empty()) {
    diag->Add("[train]", "resume_across_arms needs checkpoint_at");
  }
  for (int64_t it : recipe.trace.dump_grads_at) {
    if (it > t.iterations) {
      diag->Add("[trace]", "dump_grads_at entries must be <= [train] iterations (" +
                               std::to_string(t.iterations) + "), got " + std::to_string(it));
    }
  }
}

// The pipeline: the layout (or the even split) against pp, vpp and the model; vpp taken from the
// layout when the recipe does not set it. Returns whether vpp is known: false when a layout,
// which would give it, cannot be read.
bool ValidatePipeline(Recipe* recipe, Diagnostics* diag) {
  ParallelConfig& p = recipe->parallel;
  if (p.pp == 1 && p.vpp == 1 && recipe->model.pipeline_layout.empty()) return true;
  try {
    const PipelineLayout layout = recipe->pipeline();
    if (!recipe->model.pipeline_layout.empty() && layout.vpp != p.vpp) {
      if (p.vpp_set) {
        diag->Add("[parallel]", "vpp = " + std::to_string(p.vpp) +
                                    " conflicts with [model] pipeline_layout, whose " +
                                    std::to_string(layout.stages.size()) +
                                    " stages over pp = " + std::to_string(p.pp) + " make vpp " +
                                    std::to_string(layout.vpp) + "; drop vpp or make it " +
                                    std::to_string(layout.vpp));
        return true;
      }
      p.vpp = layout.vpp;
    }
  } catch (const InputError& e) {
    // The even split's message names its key itself ("[model] layers = ...").
    std::string message = e.what();
    if (message.rfind("[model] ", 0) == 0) message = message.substr(8);
    diag->Add("[model]",
              (recipe->model.pipeline_layout.empty() ? "" : "pipeline_layout ") + message);
    return recipe->model.pipeline_layout.empty();
  }
  return true;
}

// [recompute] full with segment units: a method and a layer count, Megatron's MTP rule.
void ValidateSegmentRecompute(const Recipe& recipe, const ArmConfig& arm, Diagnostics* diag) {
  const std::string& rc_where = arm.recompute_table;
  const RecomputeConfig& rc = arm.recompute;
  if (!rc.full() || rc.unit != RecomputeUnit::kSegment) return;
  if (!rc.method_set) {
    diag->Add(rc_where,
              "method must be set (\"uniform\" or \"block\") when granularity is \"full\"");
  }
  if (rc.num_layers < 1) {
    diag->Add(rc_where, "num_layers must be set (>= 1) when granularity is \"full\"");
  }
  if (rc.method == RecomputeMethod::kUniform && recipe.model.mtp_layers > 0 && rc.num_layers > 1) {
    diag->Add(rc_where,
              "num_layers must be 1 when method is \"uniform\" and [model] mtp_layers > 0, "
              "got " +
                  std::to_string(rc.num_layers));
  }
}

// fp8_backend "native": a CUDA device, and for blockwise whole 128x128 weight blocks.
void ValidateNativeFp8(const Recipe& recipe, const ArmConfig& arm, Diagnostics* diag) {
  const std::string& precision_where = arm.precision_table;
  const ModelConfig& m = recipe.model;
  if (!arm.precision.native_fp8()) return;
  if (recipe.parallel.device != DeviceKind::kCuda) {
    diag->Add(precision_where,
              "fp8_backend \"native\" runs FP8 tensor-core GEMMs and needs [parallel] device = "
              "\"cuda\"; on the CPU FP8 is emulated: use fp8_backend = \"emulated\"");
  }
  if (arm.precision.recipe != PrecisionRecipe::kBlockwise) return;
  // Native blockwise GEMMs take 128x128 weight blocks whole: every dimension of an FP8 weight
  // must be a multiple of 128 (the token dimension is padded instead; the output head stays in
  // bf16).
  std::string uneven;
  for (const auto& [key, value] : std::vector<std::pair<const char*, int64_t>>{
           {"hidden", m.hidden}, {"ffn", m.ffn}, {"moe_ffn", m.moe_ffn}}) {
    if (value % 128 != 0) {
      uneven += std::string(uneven.empty() ? "" : ", ") + key + " = " + std::to_string(value);
    }
  }
  if (!uneven.empty()) {
    diag->Add(precision_where,
              "fp8_backend \"native\" with recipe \"blockwise\" needs [model] hidden, ffn "
              "and moe_ffn to be multiples of 128 (the 128x128 weight blocks of the "
              "tensor-core GEMM), got " +
                  uneven + "; use fp8_backend = \"emulated\" for other shapes");
  }
}

// With a pipeline: the schedule must exist for this arm's engine (not asked when a layout that
// cannot be read leaves vpp unknown).
void ValidatePipelineArm(const Recipe& recipe, const ArmConfig& arm, bool vpp_known,
                         Diagnostics* diag) {
  if (recipe.parallel.pp <= 1 && recipe.parallel.vpp <= 1) return;
  if (!vpp_known) return;
  PipelineScheduleConfig schedule;
  schedule.pp = recipe.parallel.pp;
  schedule.vpp = recipe.parallel.vpp;
  schedule.microbatches = recipe.microbatches_per_rank();
  schedule.microbatch_group = recipe.parallel.microbatch_group_size;
  schedule.ep_overlap = arm.engine == EngineKind::kOverlap;
  const std::string problem = PipelineScheduleProblem(schedule);
  if (!problem.empty()) diag->Add("[arms." + arm.name + "]", "[parallel] " + problem);
  const RecomputeConfig& rc = arm.recompute;
  if (rc.full() && rc.unit == RecomputeUnit::kChunk && arm.engine == EngineKind::kReference) {
    diag->Add(arm.recompute_table,
              "unit \"chunk\" (the overlap engine's whole-chunk replay) is not available to "
              "the reference engine with [parallel] pp > 1; use method \"uniform\" or "
              "\"block\"");
  }
}

// Megatron's rules for --overlap-moe-expert-parallel-comm, and delayed weight gradients.
// Returns whether it reported delayed FP8 scaling.
bool ValidateEngineRules(const Recipe& recipe, const ArmConfig& arm, bool delayed_scaling,
                         Diagnostics* diag) {
  const std::string where = "[arms." + arm.name + "]";
  if (arm.delay_wgrad && arm.engine != EngineKind::kOverlap) {
    diag->Add(where,
              "delay_wgrad needs engine \"overlap\" (delayed weight gradients run under "
              "the overlap's all-to-alls), got engine \"" +
                  std::string(ToString(arm.engine)) + "\"");
  }
  if (arm.engine != EngineKind::kOverlap) return false;
  if (recipe.model.mtp_layers > 1) {
    diag->Add(where, "the overlap engine supports [model] mtp_layers 0 or 1, got " +
                         std::to_string(recipe.model.mtp_layers));
  }
  const bool full = arm.recompute.full();
  if (full && recipe.parallel.ep < 2) {
    diag->Add(where,
              "the overlap engine with full recompute needs [parallel] ep > 1 (the "
              "all-to-all it overlaps), got ep = " +
                  std::to_string(recipe.parallel.ep));
  }
  if (delayed_scaling && full) {
    diag->Add(arm.precision_table,
              "fp8_scaling \"delayed\" cannot be used by the overlap engine with full "
              "recompute: the segment replay would update the amax history a second time; "
              "use fp8_scaling = \"current\"");
    return true;
  }
  return false;
}

void ValidateArm(const Recipe& recipe, const ArmConfig& arm, bool vpp_known, Diagnostics* diag) {
  if (arm.engine == EngineKind::kExternal) return;  // its command's own business
  ValidateSegmentRecompute(recipe, arm, diag);
  ValidateNativeFp8(recipe, arm, diag);
  ValidatePipelineArm(recipe, arm, vpp_known, diag);
  const bool delayed = arm.precision.fp8() && arm.precision.fp8_scaling == Fp8Scaling::kDelayed;
  if (ValidateEngineRules(recipe, arm, delayed, diag)) return;
  if (delayed) {
    diag->Add(arm.precision_table,
              "fp8_scaling \"delayed\" is rejected: bitparity's FP8 recipes use current "
              "scaling (scales from the tensor at hand), which a recompute replay reproduces bit "
              "for bit; use fp8_scaling = \"current\"");
  }
}

// An external arm is its command and nothing else; a built-in engine has no command.
void CheckExternalArm(const ArmConfig& arm, const toml::table& table, Diagnostics* diag) {
  const std::string where = "[arms." + arm.name + "]";
  if (arm.engine != EngineKind::kExternal) {
    if (!arm.command.empty()) {
      diag->Add(where, "command is for external arms (engine \"external\"); engine \"" +
                           std::string(ToString(arm.engine)) + "\" is bitparity's own");
    }
    return;
  }
  if (!table.contains("command")) {
    diag->Add(where, "engine \"external\" needs command = [\"program\", \"argument\", ...]");
  }
  for (const char* key : {"dispatcher", "delay_wgrad", "recompute", "precision"}) {
    if (table.contains(key)) {
      diag->Add(where, std::string(key) +
                           " does not apply to an external arm (its command trains it; pass "
                           "settings as arguments)");
    }
  }
}

ArmConfig ReadArm(const std::string& name, const toml::table* table, const Recipe& base,
                  Diagnostics* diag) {
  ArmConfig arm;
  arm.name = name;
  arm.recompute = base.recompute;
  arm.precision = base.precision;
  arm.dispatcher = base.model.dispatcher;
  arm.recompute_table = "[recompute] (arm '" + name + "')";
  arm.precision_table = "[precision] (arm '" + name + "')";
  TableReader r(table, "[arms." + name + "]", diag);
  ArmKeys().ReadAll(r, &arm);
  CheckExternalArm(arm, *table, diag);
  return arm;
}

}  // namespace

toml::table ParseTomlText(const std::string& text, const std::string& path) {
  try {
    return toml::parse(text, path);
  } catch (const toml::parse_error& e) {
    std::ostringstream msg;
    msg << path << ":" << e.source().begin.line << ":" << e.source().begin.column
        << ": not valid TOML: " << e.description();
    throw InputError(msg.str());
  }
}

Recipe ParseRecipe(const std::string& text, const std::string& path) {
  Diagnostics diag(path);
  toml::table root = ParseTomlText(text, path);

  Recipe recipe;
  recipe.path = path;
  recipe.text = text;
  TableReader top(&root, "", &diag);
  TopLevelKeys().ReadKeys(top, &recipe);
  // The name becomes folders (out/<name>/, golden/<name>/): an identifier, never a path.
  if (std::string problem = IdentifierProblem("name", recipe.name); !problem.empty()) {
    if (!root.contains("name")) {
      problem += " (it is the file's stem: set name = \"...\" in the recipe)";
    }
    diag.Add("", problem);
  }
  // Reads the table `key` of the file (absent: every default) with the keys of `keys`.
  auto read_table = [&](const char* key, const auto& keys, auto* config) {
    TableReader r(top.SubTable(key), keys.table(), &diag);
    keys.ReadAll(r, config);
  };
  read_table("model", ModelKeys(), &recipe.model);
  read_table("parallel", ParallelKeys(), &recipe.parallel);
  read_table("data", DataKeys(), &recipe.data);
  read_table("train", TrainKeys(), &recipe.train);
  read_table("precision", PrecisionKeys(), &recipe.precision);
  read_table("recompute", RecomputeKeys(), &recipe.recompute);
  read_table("trace", TraceKeys(), &recipe.trace);
  if (const toml::table* arms = top.SubTable("arms")) {
    for (const auto& [key, node] : *arms) {
      std::string name(key.str());
      if (const std::string problem = IdentifierProblem("arm name", name); !problem.empty()) {
        diag.Add("[arms]", problem);
        continue;
      }
      if (!node.is_table()) {
        diag.Add("[arms]", name + " must be a table, got " + DescribeNode(node) + LineSuffix(node));
        continue;
      }
      recipe.arms.push_back(ReadArm(name, node.as_table(), recipe, &diag));
    }
  }
  read_table("compare", CompareKeys(), &recipe.compare);
  top.RejectUnknown();
  if (recipe.arms.empty()) {
    diag.Add("[arms]",
             "must define at least one arm, e.g. [arms.reference] engine = \"reference\"");
  }

  // The comparison baseline: named, or "reference" when there is such an arm, or the first arm.
  if (!recipe.arms.empty()) {
    auto names = recipe.arm_names();
    auto known = [&](const std::string& n) {
      return std::find(names.begin(), names.end(), n) != names.end();
    };
    ComparePolicy& c = recipe.compare;
    if (c.baseline.empty()) c.baseline = known("reference") ? "reference" : names.front();
    if (!known(c.baseline)) {
      diag.Add("[compare]", "baseline names no arm: '" + c.baseline + "'");
    }
    for (MemoryBound& b : c.memory) {
      if (b.of.empty()) b.of = c.baseline;
      if (!known(b.arm)) diag.Add("[[compare.memory]]", "arm names no arm: '" + b.arm + "'");
      if (!known(b.of)) diag.Add("[[compare.memory]]", "of names no arm: '" + b.of + "'");
    }
    for (const OverlapBound& b : c.overlap) {
      if (!known(b.arm)) diag.Add("[[compare.overlap]]", "arm names no arm: '" + b.arm + "'");
    }
  }

  // Cross-key rules only make sense once every key parsed.
  if (diag.empty()) {
    ValidateShapes(recipe, &diag);
    const bool vpp_known = ValidatePipeline(&recipe, &diag);
    for (const ArmConfig& arm : recipe.arms) ValidateArm(recipe, arm, vpp_known, &diag);
  }
  diag.ThrowIfAny();
  return recipe;
}

std::string ReadTomlFile(const std::string& path, const std::string& kind) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) throw InputError(path + ": " + kind + " file not found");
  if (std::filesystem::is_directory(path, ec)) {
    throw InputError(path + ": is a directory, expected a " + kind + " file (.toml)");
  }
  // A FIFO, socket or device could block the read forever (a FIFO without a writer) or never end.
  if (!std::filesystem::is_regular_file(path, ec)) {
    throw InputError(path + ": is not a regular file (a FIFO, socket or device), expected a " +
                     kind + " file (.toml)");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(path + ": cannot open " + kind + " file for reading");
  std::string text(kMaxTomlFileBytes + 1, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  if (in.bad()) throw InputError(path + ": cannot read " + kind + " file");
  text.resize(static_cast<size_t>(in.gcount()));
  if (text.size() > kMaxTomlFileBytes) {
    throw InputError(path + ": larger than " + std::to_string(kMaxTomlFileBytes >> 20) +
                     " MiB, not a " + kind + " file (a " + kind + " is a few KiB)");
  }
  return text;
}

Recipe LoadRecipe(const std::string& path) {
  return ParseRecipe(ReadTomlFile(path, "recipe"), path);
}

std::string RecipeDigest(const std::string& text) {
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016llx",
                static_cast<unsigned long long>(Digest(text.data(), text.size())));
  return hex;
}

}  // namespace bitparity
