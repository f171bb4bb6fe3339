#include "core/recipe.h"

#include <toml++/toml.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>
#include <utility>

#include "core/enum_names.h"
#include "core/errors.h"
#include "core/toml_reader.h"

namespace bitparity {

namespace {

constexpr EnumName<EngineKind> kEngineNames[] = {{EngineKind::kReference, "reference"},
                                                 {EngineKind::kOverlap, "overlap"}};
constexpr EnumName<Dispatcher> kDispatcherNames[] = {{Dispatcher::kAllToAll, "alltoall"},
                                                     {Dispatcher::kFlex, "flex"}};
constexpr EnumName<PrecisionRecipe> kPrecisionNames[] = {{PrecisionRecipe::kFp32, "fp32"},
                                                         {PrecisionRecipe::kBf16, "bf16"},
                                                         {PrecisionRecipe::kBlockwise, "blockwise"},
                                                         {PrecisionRecipe::kMxfp8, "mxfp8"}};
constexpr EnumName<Fp8Scaling> kFp8ScalingNames[] = {{Fp8Scaling::kCurrent, "current"},
                                                     {Fp8Scaling::kDelayed, "delayed"}};
constexpr EnumName<Fp8Backend> kFp8BackendNames[] = {{Fp8Backend::kEmulated, "emulated"},
                                                     {Fp8Backend::kNative, "native"}};
constexpr EnumName<DeviceKind> kDeviceNames[] = {{DeviceKind::kCpu, "cpu"},
                                                 {DeviceKind::kCuda, "cuda"}};
constexpr EnumName<RecomputeGranularity> kGranularityNames[] = {
    {RecomputeGranularity::kNone, "none"}, {RecomputeGranularity::kFull, "full"}};
constexpr EnumName<RecomputeMethod> kMethodNames[] = {{RecomputeMethod::kUniform, "uniform"},
                                                      {RecomputeMethod::kBlock, "block"}};
constexpr EnumName<RecomputeUnit> kUnitNames[] = {{RecomputeUnit::kSegment, "segment"},
                                                  {RecomputeUnit::kChunk, "chunk"}};
constexpr EnumName<LrSchedule> kLrScheduleNames[] = {{LrSchedule::kConstant, "constant"},
                                                     {LrSchedule::kCosine, "cosine"}};
// The only optimizer; the key exists so that a recipe can say so.
constexpr EnumName<int> kOptimizerNames[] = {{0, "adam"}};

}  // namespace

const char* ToString(EngineKind engine) { return NameIn(kEngineNames, engine); }
const char* ToString(Dispatcher dispatcher) { return NameIn(kDispatcherNames, dispatcher); }
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

constexpr int64_t kMaxInt = std::numeric_limits<int64_t>::max();
constexpr double kMaxDouble = std::numeric_limits<double>::max();

void ReadPrecision(TableReader& r, PrecisionConfig* precision) {
  precision->recipe = r.Enum("recipe", precision->recipe, kPrecisionNames);
  precision->fp8_scaling = r.Enum("fp8_scaling", precision->fp8_scaling, kFp8ScalingNames);
  precision->fp8_backend = r.Enum("fp8_backend", precision->fp8_backend, kFp8BackendNames);
  r.RejectUnknown();
}

void ReadRecompute(TableReader& r, RecomputeConfig* recompute) {
  recompute->granularity = r.Enum("granularity", recompute->granularity, kGranularityNames);
  recompute->method = r.Enum("method", recompute->method, kMethodNames, &recompute->method_set);
  recompute->num_layers = r.Int("num_layers", recompute->num_layers, 1, 1 << 20);
  recompute->unit = r.Enum("unit", recompute->unit, kUnitNames);
  r.RejectUnknown();
}

void ReadModel(TableReader& r, ModelConfig* m) {
  m->hidden = r.Int("hidden", m->hidden, 2, 1 << 16);
  m->heads = r.Int("heads", m->heads, 1, 1 << 10);
  m->layers = r.Int("layers", m->layers, 1, 1024);
  m->first_k_dense = r.Int("first_k_dense", m->first_k_dense, 0, 1024);
  m->experts = r.Int("experts", m->experts, 1, 4096);
  m->topk = r.Int("topk", m->topk, 1, 4096);
  m->moe_ffn = r.Int("moe_ffn", m->moe_ffn, 1, 1 << 18);
  m->ffn = r.Int("ffn", m->ffn, 1, 1 << 18);
  m->vocab = r.Int("vocab", m->vocab, 2, 1 << 22);
  m->seq_len = r.Int("seq_len", m->seq_len, 2, 1 << 20);
  m->mtp_layers = r.Int("mtp_layers", m->mtp_layers, 0, 16);
  m->mtp_loss_scale = r.Float("mtp_loss_scale", m->mtp_loss_scale, 0.0, kMaxDouble);
  m->aux_loss_coeff = r.Float("aux_loss_coeff", m->aux_loss_coeff, 0.0, kMaxDouble);
  m->norm_eps = r.Float("norm_eps", m->norm_eps, 0.0, 1.0, /*min_exclusive=*/true);
  m->rope_theta = r.Float("rope_theta", m->rope_theta, 1.0, kMaxDouble);
  m->init_std = r.Float("init_std", m->init_std, 0.0, 10.0, /*min_exclusive=*/true);
  m->dropout = r.Float("dropout", m->dropout, 0.0, 0.99);
  m->dispatcher = r.Enum("dispatcher", m->dispatcher, kDispatcherNames);
  r.RejectUnknown();
}

void ReadParallel(TableReader& r, ParallelConfig* p) {
  p->device = r.Enum("device", p->device, kDeviceNames);
  p->ep = r.Int("ep", p->ep, 1, 256);
  p->threads = r.Int("threads", p->threads, 1, 256);
  p->timeout_seconds = r.Float("timeout_s", p->timeout_seconds, 1.0, 7 * 24 * 3600.0);
  r.RejectUnknown();
}

void ReadTrain(TableReader& r, TrainConfig* t) {
  t->micro_batch = r.Int("micro_batch", t->micro_batch, 1, 1 << 20);
  t->global_batch = r.Int("global_batch", t->global_batch, 1, 1 << 24);
  t->iterations = r.Int("iterations", t->iterations, 1, 10000000);
  t->seed = static_cast<uint64_t>(r.Int("seed", static_cast<int64_t>(t->seed), 0, kMaxInt));
  r.Enum("optimizer", 0, kOptimizerNames);
  t->lr = r.Float("lr", t->lr, 0.0, 1e3, /*min_exclusive=*/true);
  t->min_lr = r.Float("min_lr", t->min_lr, 0.0, 1e3);
  t->warmup_iterations = r.Int("warmup_iterations", t->warmup_iterations, 0, kMaxInt);
  t->lr_schedule = r.Enum("lr_schedule", t->lr_schedule, kLrScheduleNames);
  t->adam_beta1 = r.Float("adam_beta1", t->adam_beta1, 0.0, 0.999999);
  t->adam_beta2 = r.Float("adam_beta2", t->adam_beta2, 0.0, 0.999999);
  t->adam_eps = r.Float("adam_eps", t->adam_eps, 0.0, 1.0, /*min_exclusive=*/true);
  t->weight_decay = r.Float("weight_decay", t->weight_decay, 0.0, 10.0);
  t->clip_grad = r.Float("clip_grad", t->clip_grad, 0.0, kMaxDouble);
  r.RejectUnknown();
}

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
  for (int64_t it : recipe.trace.dump_grads_at) {
    if (it > t.iterations) {
      diag->Add("[trace]", "dump_grads_at entries must be <= [train] iterations (" +
                               std::to_string(t.iterations) + "), got " + std::to_string(it));
    }
  }
}

void ValidateArm(const Recipe& recipe, const ArmConfig& arm, Diagnostics* diag) {
  const std::string where = "[arms." + arm.name + "]";
  const std::string& rc_where = arm.recompute_table;
  const std::string& precision_where = arm.precision_table;
  const RecomputeConfig& rc = arm.recompute;
  const ModelConfig& m = recipe.model;
  if (rc.full() && rc.unit == RecomputeUnit::kSegment) {
    if (!rc.method_set) {
      diag->Add(rc_where,
                "method must be set (\"uniform\" or \"block\") when granularity is \"full\"");
    }
    if (rc.num_layers < 1) {
      diag->Add(rc_where, "num_layers must be set (>= 1) when granularity is \"full\"");
    }
    if (rc.method == RecomputeMethod::kUniform && m.mtp_layers > 0 && rc.num_layers > 1) {
      diag->Add(rc_where,
                "num_layers must be 1 when method is \"uniform\" and [model] mtp_layers > 0, "
                "got " +
                    std::to_string(rc.num_layers));
    }
  }
  if (rc.full() && m.dropout != 0.0) {
    diag->Add("[model]", "dropout must be 0 when recomputing (" + rc_where +
                             " granularity \"full\"), got " + std::to_string(m.dropout));
  }
  const bool delayed = arm.precision.fp8() && arm.precision.fp8_scaling == Fp8Scaling::kDelayed;
  if (arm.precision.native_fp8()) {
    if (recipe.parallel.device != DeviceKind::kCuda) {
      diag->Add(precision_where,
                "fp8_backend \"native\" runs FP8 tensor-core GEMMs and needs [parallel] device = "
                "\"cuda\"; on the CPU FP8 is emulated: use fp8_backend = \"emulated\"");
    }
    if (arm.precision.recipe == PrecisionRecipe::kBlockwise) {
      // Native blockwise GEMMs take 128x128 weight blocks whole: every dimension of an FP8
      // weight must be a multiple of 128 (the token dimension is padded instead; the output
      // head stays in bf16).
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
  }
  if (arm.engine == EngineKind::kOverlap) {
    // Megatron's rules for --overlap-moe-expert-parallel-comm.
    if (m.mtp_layers > 1) {
      diag->Add(where, "the overlap engine supports [model] mtp_layers 0 or 1, got " +
                           std::to_string(m.mtp_layers));
    }
    if (rc.full() && recipe.parallel.ep < 2) {
      diag->Add(where,
                "the overlap engine with full recompute needs [parallel] ep > 1 (the "
                "all-to-all it overlaps), got ep = " +
                    std::to_string(recipe.parallel.ep));
    }
    if (delayed && rc.full()) {
      diag->Add(precision_where,
                "fp8_scaling \"delayed\" cannot be used by the overlap engine with full "
                "recompute: the segment replay would update the amax history a second time; "
                "use fp8_scaling = \"current\"");
      return;
    }
  }
  if (delayed) {
    diag->Add(precision_where,
              "fp8_scaling \"delayed\" is rejected: bitparity's FP8 recipes use current "
              "scaling (scales from the tensor at hand), which a recompute replay reproduces bit "
              "for bit; use fp8_scaling = \"current\"");
  }
}

// "bitwise", or a table { atol = ..., rtol = ... } or { ulps = N }.
Tolerance ReadTolerance(TableReader& r, const std::string& key, Diagnostics* diag) {
  Tolerance t;
  if (!r.Has(key)) return t;
  const std::string where = r.where().substr(0, r.where().size() - 1) + "." + key + "]";
  if (const toml::table* table = r.SubTableOrNull(key)) {
    TableReader sub(table, where, diag);
    const bool has_ulps = sub.Has("ulps");
    if (has_ulps && (sub.Has("atol") || sub.Has("rtol"))) {
      sub.Error("ulps", "cannot be combined with atol / rtol");
    }
    if (has_ulps) {
      t.kind = Tolerance::Kind::kUlps;
      t.ulps = sub.Int("ulps", 0, 0, int64_t{1} << 40);
    } else {
      t.kind = Tolerance::Kind::kAbsRel;
      t.atol = sub.Float("atol", 0.0, 0.0, kMaxDouble);
      t.rtol = sub.Float("rtol", 0.0, 0.0, kMaxDouble);
    }
    sub.RejectUnknown();
    return t;
  }
  std::string word = r.String(key, "bitwise");
  if (word != "bitwise") {
    r.Error(key, "must be \"bitwise\" or a table { atol = A, rtol = R } or { ulps = N }, got \"" +
                     word + "\"");
  }
  return t;
}

void ReadCompare(TableReader& r, Recipe* recipe, Diagnostics* diag) {
  ComparePolicy& c = recipe->compare;
  c.baseline = r.String("baseline", "");
  c.loss = ReadTolerance(r, "loss", diag);
  c.gradients = ReadTolerance(r, "gradients", diag);
  c.params = ReadTolerance(r, "params", diag);
  c.memory_model = r.Float("memory_model", 0.0, 0.0, 10.0);
  if (r.Has("memory")) {
    const toml::node* node = r.Node("memory");
    const toml::array* bounds = node ? node->as_array() : nullptr;
    if (!bounds) {
      r.Error("memory", "must be an array of tables ([[compare.memory]])");
    } else {
      for (size_t i = 0; i < bounds->size(); ++i) {
        const toml::table* table = (*bounds)[i].as_table();
        const std::string where = "[[compare.memory]] #" + std::to_string(i + 1);
        if (!table) {
          diag->Add(where, "must be a table");
          continue;
        }
        TableReader b(table, where, diag);
        MemoryBound bound;
        if (!b.Has("arm")) b.Error("arm", "must be set");
        bound.arm = b.String("arm", "");
        bound.of = b.String("of", "");
        if (!b.Has("at_most")) b.Error("at_most", "must be set (a ratio, e.g. 1.02)");
        bound.at_most = b.Float("at_most", 1.0, 0.0, kMaxDouble, /*min_exclusive=*/true);
        b.RejectUnknown();
        c.memory.push_back(bound);
      }
    }
  }
  r.RejectUnknown();
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
  const std::string where = "[arms." + name + "]";
  TableReader r(table, where, diag);
  if (!r.Has("engine")) r.Error("engine", "must be set (\"reference\" or \"overlap\")");
  arm.engine = r.Enum("engine", EngineKind::kReference, kEngineNames);
  arm.dispatcher = r.Enum("dispatcher", arm.dispatcher, kDispatcherNames);
  if (const toml::table* t = r.SubTable("recompute")) {
    arm.recompute_table = where.substr(0, where.size() - 1) + ".recompute]";
    TableReader sub(t, arm.recompute_table, diag);
    ReadRecompute(sub, &arm.recompute);
  }
  if (const toml::table* t = r.SubTable("precision")) {
    arm.precision_table = where.substr(0, where.size() - 1) + ".precision]";
    TableReader sub(t, arm.precision_table, diag);
    ReadPrecision(sub, &arm.precision);
  }
  r.RejectUnknown();
  return arm;
}

bool ValidArmName(const std::string& name) {
  if (name.empty() || name.size() > 64) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-';
  });
}

}  // namespace

Recipe ParseRecipe(const std::string& text, const std::string& path) {
  Diagnostics diag(path);
  toml::table root;
  try {
    root = toml::parse(text, path);
  } catch (const toml::parse_error& e) {
    std::ostringstream msg;
    msg << path << ":" << e.source().begin.line << ":" << e.source().begin.column
        << ": not valid TOML: " << e.description();
    throw InputError(msg.str());
  }

  Recipe recipe;
  recipe.path = path;
  recipe.text = text;
  TableReader top(&root, "", &diag);
  recipe.name = top.String("name", std::filesystem::path(path).stem().string());
  top.String("description", "");
  {
    TableReader r(top.SubTable("model"), "[model]", &diag);
    ReadModel(r, &recipe.model);
  }
  {
    TableReader r(top.SubTable("parallel"), "[parallel]", &diag);
    ReadParallel(r, &recipe.parallel);
  }
  {
    TableReader r(top.SubTable("data"), "[data]", &diag);
    recipe.data.branching = r.Int("branching", recipe.data.branching, 1, 1 << 16);
    r.RejectUnknown();
  }
  {
    TableReader r(top.SubTable("train"), "[train]", &diag);
    ReadTrain(r, &recipe.train);
  }
  {
    TableReader r(top.SubTable("precision"), "[precision]", &diag);
    ReadPrecision(r, &recipe.precision);
  }
  {
    TableReader r(top.SubTable("recompute"), "[recompute]", &diag);
    ReadRecompute(r, &recipe.recompute);
  }
  {
    TableReader r(top.SubTable("trace"), "[trace]", &diag);
    recipe.trace.dump_grads_at = r.IntList("dump_grads_at", 1, kMaxInt);
    std::sort(recipe.trace.dump_grads_at.begin(), recipe.trace.dump_grads_at.end());
    recipe.trace.dump_grads_at.erase(
        std::unique(recipe.trace.dump_grads_at.begin(), recipe.trace.dump_grads_at.end()),
        recipe.trace.dump_grads_at.end());
    r.RejectUnknown();
  }
  if (const toml::table* arms = top.SubTable("arms")) {
    for (const auto& [key, node] : *arms) {
      std::string name(key.str());
      if (!ValidArmName(name)) {
        diag.Add("[arms]",
                 "arm name '" + name + "' must be 1-64 characters of letters, digits, '_' or '-'");
        continue;
      }
      if (!node.is_table()) {
        diag.Add("[arms]", name + " must be a table, got " + DescribeNode(node) + LineSuffix(node));
        continue;
      }
      recipe.arms.push_back(ReadArm(name, node.as_table(), recipe, &diag));
    }
  }
  {
    TableReader r(top.SubTable("compare"), "[compare]", &diag);
    ReadCompare(r, &recipe, &diag);
  }
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
  }

  // Cross-key rules only make sense once every key parsed.
  if (diag.empty()) {
    ValidateShapes(recipe, &diag);
    for (const ArmConfig& arm : recipe.arms) ValidateArm(recipe, arm, &diag);
  }
  diag.ThrowIfAny();
  return recipe;
}

Recipe LoadRecipe(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) throw InputError(path + ": recipe file not found");
  if (std::filesystem::is_directory(path, ec)) {
    throw InputError(path + ": is a directory, expected a recipe file (.toml)");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(path + ": cannot open recipe file for reading");
  std::ostringstream buffer;
  buffer << in.rdbuf();
  return ParseRecipe(buffer.str(), path);
}

}  // namespace bitparity
