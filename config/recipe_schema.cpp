#include "config/recipe_schema.h"

#include <algorithm>
#include <cctype>
#include <filesystem>

namespace bitparity {
namespace {

constexpr int64_t kMaxInt = std::numeric_limits<int64_t>::max();
constexpr double kMaxDouble = std::numeric_limits<double>::max();

// The only optimizer; the key exists so that a recipe can say so.
constexpr EnumName<int> kOptimizerNames[] = {{0, "adam"}};

}  // namespace

const KeyTable<ModelConfig>& ModelKeys() {
  using M = ModelConfig;
  static const KeyTable<M> keys =
      KeyTable<M>("[model]")
          .Int("hidden", &M::hidden, 2, 1 << 16, "hidden size")
          .Int("heads", &M::heads, 1, 1 << 10, "attention heads; hidden / heads must be even")
          .Int("layers", &M::layers, 1, 1024, "decoder layers")
          .Int("first_k_dense", &M::first_k_dense, 0, 1024,
               "the first k decoder layers use a dense MLP, the others MoE")
          .Int("experts", &M::experts, 1, 4096, "routed experts per MoE layer")
          .Int("topk", &M::topk, 1, 4096, "experts each token is routed to")
          .Int("moe_ffn", &M::moe_ffn, 1, 1 << 18, "hidden size of each expert's SwiGLU")
          .Int("ffn", &M::ffn, 1, 1 << 18, "hidden size of the dense layers' SwiGLU")
          .Int("vocab", &M::vocab, 2, 1 << 22, "vocabulary size")
          .Int("seq_len", &M::seq_len, 2, 1 << 20, "tokens per sample")
          .Int("mtp_layers", &M::mtp_layers, 0, 16,
               "multi-token-prediction depths after the decoder")
          .Float("mtp_loss_scale", &M::mtp_loss_scale, 0.0, kMaxDouble,
                 "weight of the MTP loss in the objective")
          .Float("aux_loss_coeff", &M::aux_loss_coeff, 0.0, kMaxDouble,
                 "weight of the router's load-balancing loss")
          .Float("norm_eps", &M::norm_eps, 0.0, 1.0, "RMSNorm epsilon", /*min_exclusive=*/true)
          .Float("rope_theta", &M::rope_theta, 1.0, kMaxDouble, "rotary embedding base")
          .Float("init_std", &M::init_std, 0.0, 10.0,
                 "standard deviation of the initial weights (output projections: "
                 "std / sqrt(2 layers))",
                 /*min_exclusive=*/true)
          .Float("dropout", &M::dropout, 0.0, 0.99,
                 "hidden dropout on the attention and MLP outputs; each mask depends only on "
                 "(seed, iteration, microbatch, layer, site), so recompute replays it")
          .Float("attention_dropout", &M::attention_dropout, 0.0, 0.99,
                 "dropout on the attention probabilities, keyed as dropout")
          .Enum("dispatcher", &M::dispatcher, kDispatcherNames,
                "how tokens reach their experts: one all-to-all row per (token, expert), or "
                "one per (token, rank) expanded on arrival")
          .String(
              "pipeline_layout", &M::pipeline_layout,
              "the stages in Megatron's --pipeline-model-parallel-layout syntax (E embedding, t "
              "decoder layer, m MTP layer, L loss, | between stages, (..)*n and t*n "
              "repetitions), chunk 0 of every pipeline rank first; \"\": layers split evenly "
              "over pp x vpp")
          .Int("mhc_streams", &M::mhc_streams, 0, 64,
               "mHC: residual streams (Megatron's default when on is 4); per sublayer a learned "
               "fp32 mapping aggregates them, expands the output back and mixes them through a "
               "doubly stochastic matrix; 0 turns mHC off")
          .Int("mhc_sinkhorn_iterations", &M::mhc_sinkhorn_iterations, 1, 1000,
               "mHC: Sinkhorn-Knopp iterations that make the residual mixing matrix doubly "
               "stochastic")
          .Float("mhc_init_gating_factor", &M::mhc_init_gating_factor, 0.0, 10.0,
                 "mHC: initial value of the gates that scale the mapping logits");
  return keys;
}

const KeyTable<ParallelConfig>& ParallelKeys() {
  using P = ParallelConfig;
  static const KeyTable<P> keys =
      KeyTable<P>("[parallel]")
          .Enum("device", &P::device, kDeviceNames,
                "where each rank computes; \"cuda\": the GPU of the rank's LOCAL_RANK")
          .Int("ep", &P::ep, 1, 256, "expert-parallel size: the ranks of each pipeline stage")
          .Int("pp", &P::pp, 1, 64,
               "pipeline stages; the world is pp x ep rank processes, rank = pp_rank x ep + "
               "ep_rank")
          .Custom("vpp", "integer in [1, 64]", "1",
                  "model chunks per pipeline rank (interleaved 1F1B); with pipeline_layout it "
                  "follows from the layout's stage count",
                  [](TableReader& r, P* p) {
                    p->vpp_set = r.Has("vpp");
                    p->vpp = r.Int("vpp", p->vpp, 1, 64);
                  })
          .Custom("microbatch_group_size", "integer in [1, 4096]", "unset",
                  "interleaved 1F1B (vpp > 1): the microbatches that go through one model chunk "
                  "before the next chunk starts (Megatron's "
                  "microbatch_group_size_per_vp_stage); at least pp, at most the microbatches "
                  "per pipeline rank; unset: pp, Megatron's default",
                  [](TableReader& r, P* p) {
                    p->microbatch_group_size =
                        r.Int("microbatch_group_size", p->microbatch_group_size, 1, 4096);
                  })
          .Int("threads", &P::threads, 1, 256, "intra-op threads per rank")
          .Enum("cpu_isa", &P::cpu_isa, kCpuIsaNames,
                "the CPU instruction-set level pinned for ATen's kernels, oneDNN and MKL, and "
                "with it how bf16 GEMMs run: a pinned level gives the same bits on every host "
                "that has it (goldens are shared by its fingerprint); \"native\": the host's "
                "best, bits of this CPU only")
          .Float("timeout_s", &P::timeout_seconds, 1.0, 7 * 24 * 3600.0,
                 "a rank group running longer is ended (exit 3)");
  return keys;
}

const KeyTable<DataConfig>& DataKeys() {
  static const KeyTable<DataConfig> keys =
      KeyTable<DataConfig>("[data]")
          .Int("branching", &DataConfig::branching, 1, 1 << 16,
               "successors per token of the synthetic Markov chain")
          .Int("min_length", &DataConfig::min_length, 0, kMaxInt,
               "shortest sample: each sample's length is drawn uniformly from [min_length, "
               "seq_len] and padded to seq_len (attention skips padded keys, losses skip padded "
               "tokens); 0: no padding");
  return keys;
}

const KeyTable<TrainConfig>& TrainKeys() {
  using T = TrainConfig;
  static const KeyTable<T> keys =
      KeyTable<T>("[train]")
          .Int("micro_batch", &T::micro_batch, 1, 1 << 20, "samples per microbatch")
          .Int("global_batch", &T::global_batch, 1, 1 << 24,
               "samples per iteration over all ranks; a multiple of micro_batch x ep")
          .Int("iterations", &T::iterations, 1, 10000000, "optimizer steps")
          .Custom("seed", "integer >= 0", std::to_string(TrainConfig().seed),
                  "seed of the weights and of the data",
                  [](TableReader& r, T* t) {
                    t->seed = static_cast<uint64_t>(
                        r.Int("seed", static_cast<int64_t>(t->seed), 0, kMaxInt));
                  })
          .Custom("optimizer", "\"adam\"", "\"adam\"", "the optimizer (Adam, the only one)",
                  [](TableReader& r, T*) { r.Enum("optimizer", 0, kOptimizerNames); })
          .Float("lr", &T::lr, 0.0, 1e3, "peak learning rate", /*min_exclusive=*/true)
          .Float("min_lr", &T::min_lr, 0.0, 1e3, "learning rate at the end of the cosine decay")
          .Int("warmup_iterations", &T::warmup_iterations, 0, kMaxInt,
               "iterations of linear warm-up")
          .Enum("lr_schedule", &T::lr_schedule, kLrScheduleNames, "learning rate after warm-up")
          .Float("adam_beta1", &T::adam_beta1, 0.0, 0.999999, "Adam's first-moment decay")
          .Float("adam_beta2", &T::adam_beta2, 0.0, 0.999999, "Adam's second-moment decay")
          .Float("adam_eps", &T::adam_eps, 0.0, 1.0, "Adam's epsilon", /*min_exclusive=*/true)
          .Float("weight_decay", &T::weight_decay, 0.0, 10.0, "decoupled weight decay")
          .Float("clip_grad", &T::clip_grad, 0.0, kMaxDouble,
                 "global gradient-norm clipping; 0 turns it off")
          .Custom("checkpoint_at", "array of integers >= 1", "[]",
                  "restart replay: run 1 of each arm saves a checkpoint after these iterations "
                  "(< iterations), and a run resumed from each must equal it from there on",
                  [](TableReader& r, T* t) {
                    t->checkpoint_at = r.IntList("checkpoint_at", 1, kMaxInt);
                    std::sort(t->checkpoint_at.begin(), t->checkpoint_at.end());
                    t->checkpoint_at.erase(
                        std::unique(t->checkpoint_at.begin(), t->checkpoint_at.end()),
                        t->checkpoint_at.end());
                  })
          .Bool("resume_across_arms", &T::resume_across_arms,
                "with checkpoint_at: every other arm of the baseline's precision also resumes from "
                "the baseline's checkpoint and must equal its own run 1");
  return keys;
}

const KeyTable<PrecisionConfig>& PrecisionKeys() {
  using P = PrecisionConfig;
  static const KeyTable<P> keys =
      KeyTable<P>("[precision]")
          .Enum("recipe", &P::recipe, kPrecisionNames,
                "compute precision: fp32; bf16 with fp32 masters; FP8 with 1x128 / 128x128 "
                "blocks (blockwise) or 1x32 blocks and power-of-two scales (mxfp8)")
          .Enum("fp8_scaling", &P::fp8_scaling, kFp8ScalingNames,
                "FP8 scales from the tensor at hand; \"delayed\" is rejected (a recompute replay "
                "would not reproduce it)")
          .Enum("fp8_backend", &P::fp8_backend, kFp8BackendNames,
                "FP8 GEMMs quantized and dequantized in software, or on FP8 tensor cores "
                "(device \"cuda\"; blockwise needs sm_90)");
  return keys;
}

const KeyTable<RecomputeConfig>& RecomputeKeys() {
  using R = RecomputeConfig;
  static const KeyTable<R> keys =
      KeyTable<R>("[recompute]")
          .Enum("granularity", &R::granularity, kGranularityNames,
                "activation recompute: none, or full layers")
          .Enum("method", &R::method, kMethodNames,
                "with full recompute: segments of num_layers layers (uniform), or the first "
                "num_layers layers (block); required then",
                &R::method_set)
          .Int("num_layers", &R::num_layers, 1, 1 << 20,
               "layers per segment (uniform) or recomputed layers (block); required with full "
               "recompute")
          .ShownDefault("unset")
          .Enum("unit", &R::unit, kUnitNames,
                "what the overlap arm replays at once: a layer segment, or the whole chunk (a "
                "comparison mode for memory)");
  return keys;
}

const KeyTable<TraceConfig>& TraceKeys() {
  static const KeyTable<TraceConfig> keys =
      KeyTable<TraceConfig>("[trace]")
          .Custom("dump_grads_at", "array of integers >= 1", "[]",
                  "iterations whose full main grads the trace stores (<= iterations)",
                  [](TableReader& r, TraceConfig* t) {
                    t->dump_grads_at = r.IntList("dump_grads_at", 1, kMaxInt);
                    std::sort(t->dump_grads_at.begin(), t->dump_grads_at.end());
                    t->dump_grads_at.erase(
                        std::unique(t->dump_grads_at.begin(), t->dump_grads_at.end()),
                        t->dump_grads_at.end());
                  })
          .Custom("probes", "\"off\" | \"nodes\"", "\"off\"",
                  "nodes: every rank records the digest, dtype and shape of each output and input "
                  "gradient of every schedule operation (first divergence by operation, replay "
                  "checks; also --probes)",
                  [](TableReader& r, TraceConfig* t) {
                    const std::string value = r.String("probes", "off");
                    if (value != "off" && value != "nodes") {
                      r.Error("probes", "must be \"off\" or \"nodes\", got \"" + value + "\"");
                    }
                    t->node_probes = value == "nodes";
                  });
  return keys;
}

const KeyTable<Recipe>& TopLevelKeys() {
  static const KeyTable<Recipe> keys =
      KeyTable<Recipe>("top level")
          .Custom("name", "string", "the file's stem", "the recipe's name in reports and goldens",
                  [](TableReader& r, Recipe* recipe) {
                    recipe->name =
                        r.String("name", std::filesystem::path(recipe->path).stem().string());
                  })
          .Custom("description", "string", "\"\"", "free text",
                  [](TableReader& r, Recipe*) { r.String("description", ""); });
  return keys;
}

const KeyTable<ArmConfig>& ArmKeys() {
  // The arm's own [recompute] / [precision]: messages then name [arms.NAME.recompute].
  auto sub_table = [](const char* key, auto read) {
    return [key, read](TableReader& r, ArmConfig* arm) {
      const toml::table* table = r.SubTable(key);
      if (!table) return;
      const std::string where = "[arms." + arm->name + "." + key + "]";
      TableReader sub(table, where, r.diagnostics());
      read(sub, arm, where);
    };
  };
  static const KeyTable<ArmConfig> keys =
      KeyTable<ArmConfig>("[arms.NAME]")
          .Custom("engine", "\"reference\" | \"overlap\" | \"external\"",
                  "\"external\" with command",
                  "the arm's engine; NAME is 1-64 letters, digits, '_' or '-'",
                  [](TableReader& r, ArmConfig* arm) {
                    if (!r.Has("engine") && r.Has("command")) arm->engine = EngineKind::kExternal;
                    if (!r.Has("engine") && !r.Has("command")) {
                      r.Error("engine",
                              "must be set (\"reference\" or \"overlap\"), or the arm given a "
                              "command");
                    }
                    arm->engine = r.Enum("engine", arm->engine, kEngineNames);
                  })
          .Custom("command", "array of strings", "engine \"external\": required",
                  "an external arm: the program that trains it and its arguments (no shell), run "
                  "once per rank from the recipe's folder; \"{python}\" names the Python "
                  "environment bitparity was built with (docs/external-arms.md)",
                  [](TableReader& r, ArmConfig* arm) { arm->command = r.StringList("command"); })
          .Custom("dispatcher", "\"alltoall\" | \"flex\"", "[model] dispatcher",
                  "the arm's own dispatcher",
                  [](TableReader& r, ArmConfig* arm) {
                    arm->dispatcher = r.Enum("dispatcher", arm->dispatcher, kDispatcherNames);
                  })
          .Custom("delay_wgrad", "boolean", "false",
                  "overlap engine: the attn and mlp backward compute input gradients only, and "
                  "their weight gradients run later, under the other microbatch's all-to-all "
                  "(Megatron's --delay-wgrad-compute); the same bits either way",
                  [](TableReader& r, ArmConfig* arm) {
                    arm->delay_wgrad = r.Bool("delay_wgrad", arm->delay_wgrad);
                  })
          .Custom("recompute", "table", "[recompute]",
                  "[arms.NAME.recompute]: the arm's own [recompute] keys",
                  sub_table("recompute",
                            [](TableReader& sub, ArmConfig* arm, const std::string& where) {
                              arm->recompute_table = where;
                              RecomputeKeys().ReadAll(sub, &arm->recompute);
                            }))
          .Custom("precision", "table", "[precision]",
                  "[arms.NAME.precision]: the arm's own [precision] keys",
                  sub_table("precision",
                            [](TableReader& sub, ArmConfig* arm, const std::string& where) {
                              arm->precision_table = where;
                              PrecisionKeys().ReadAll(sub, &arm->precision);
                            }));
  return keys;
}

namespace {

// "bitwise", or a table { atol = ..., rtol = ... } or { ulps = N }.
Tolerance ReadTolerance(TableReader& r, const std::string& key) {
  Tolerance t;
  if (!r.Has(key)) return t;
  const std::string where = r.where().substr(0, r.where().size() - 1) + "." + key + "]";
  if (const toml::table* table = r.SubTableOrNull(key)) {
    TableReader sub(table, where, r.diagnostics());
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

KeyTable<ComparePolicy>::Read ToleranceKey(const char* key, Tolerance ComparePolicy::*member) {
  return [key, member](TableReader& r, ComparePolicy* c) { c->*member = ReadTolerance(r, key); };
}

constexpr const char* kToleranceType = "\"bitwise\" | { atol, rtol } | { ulps }";

}  // namespace

// The reader of [[compare.<key>]]: every entry of the array read by `entry_keys` into
// (policy.*member).
template <typename Entry>
std::function<void(TableReader&, ComparePolicy*)> ArrayOfTablesKey(
    const std::string& key, const KeyTable<Entry>& entry_keys,
    std::vector<Entry> ComparePolicy::*member) {
  return [key, &entry_keys, member](TableReader& r, ComparePolicy* c) {
    if (!r.Has(key)) return;
    const toml::node* node = r.Node(key);
    const toml::array* entries = node ? node->as_array() : nullptr;
    const std::string table = "[[compare." + key + "]]";
    if (!entries) {
      r.Error(key, "must be an array of tables (" + table + ")");
      return;
    }
    for (size_t i = 0; i < entries->size(); ++i) {
      const toml::table* entry = (*entries)[i].as_table();
      const std::string where = table + " #" + std::to_string(i + 1);
      if (!entry) {
        r.diagnostics()->Add(where, "must be a table");
        continue;
      }
      TableReader reader(entry, where, r.diagnostics());
      Entry value;
      entry_keys.ReadAll(reader, &value);
      (c->*member).push_back(value);
    }
  };
}

const KeyTable<ComparePolicy>& CompareKeys() {
  using C = ComparePolicy;
  static const KeyTable<C> keys =
      KeyTable<C>("[compare]")
          .Custom("baseline", "string", "\"reference\" or the first arm",
                  "the arm every other arm is compared with; its traces are the goldens",
                  [](TableReader& r, C* c) { c->baseline = r.String("baseline", ""); })
          .Custom("loss", kToleranceType, "\"bitwise\"",
                  "how loss, lm_loss, mtp_loss and aux_loss must agree across arms",
                  ToleranceKey("loss", &C::loss))
          .Custom("gradients", kToleranceType, "\"bitwise\"",
                  "how the grad norm and every main grad must agree (tolerances use the dumped "
                  "tensors)",
                  ToleranceKey("gradients", &C::gradients))
          .Custom("params", "\"bitwise\"", "\"bitwise\"",
                  "the parameters after each step agree bit for bit (they are stored as "
                  "digests, which no tolerance can compare)",
                  [](TableReader& r, C* c) {
                    c->params = ReadTolerance(r, "params");
                    if (!c->params.bitwise()) {
                      r.Error("params",
                              "must be \"bitwise\": parameters are stored as digests, which a "
                              "tolerance cannot compare (loss and gradients take tolerances)");
                    }
                  })
          .Float("memory_model", &C::memory_model, 0.0, 10.0,
                 "> 0: every arm's peak within this relative error of the memory model")
          .Float("golden_memory", &C::golden_memory, 0.0, 10.0,
                 "the baseline's peak tensor bytes of every rank and iteration within this "
                 "relative distance of its golden's (0: equal; Megatron's functional tests "
                 "allow 5%)")
          .Custom("memory", "array of tables", "[]",
                  "[[compare.memory]]: bounds on peak memory, keys below",
                  ArrayOfTablesKey("memory", MemoryBoundKeys(), &C::memory))
          .Custom("overlap", "array of tables", "[]",
                  "[[compare.overlap]]: bounds on the share of all-to-all time hidden under "
                  "compute, keys below",
                  ArrayOfTablesKey("overlap", OverlapBoundKeys(), &C::overlap));
  return keys;
}

const KeyTable<MemoryBound>& MemoryBoundKeys() {
  using B = MemoryBound;
  static const KeyTable<B> keys =
      KeyTable<B>("[[compare.memory]]")
          .Custom("arm", "string", "", "the bounded arm",
                  [](TableReader& r, B* b) {
                    if (!r.Has("arm")) r.Error("arm", "must be set");
                    b->arm = r.String("arm", "");
                  })
          .Custom("of", "string", "the baseline", "the arm it is bounded by",
                  [](TableReader& r, B* b) { b->of = r.String("of", ""); })
          .Custom("at_most", "number > 0", "", "peak(arm) <= at_most x peak(of)",
                  [](TableReader& r, B* b) {
                    if (!r.Has("at_most")) r.Error("at_most", "must be set (a ratio, e.g. 1.02)");
                    b->at_most = r.Float("at_most", 1.0, 0.0, kMaxDouble, /*min_exclusive=*/true);
                  });
  return keys;
}

const KeyTable<OverlapBound>& OverlapBoundKeys() {
  using B = OverlapBound;
  static const KeyTable<B> keys =
      KeyTable<B>("[[compare.overlap]]")
          .Custom("arm", "string", "", "the gated arm",
                  [](TableReader& r, B* b) {
                    if (!r.Has("arm")) r.Error("arm", "must be set");
                    b->arm = r.String("arm", "");
                  })
          .Float("hidden_at_least", &B::hidden_at_least, 0.0, 1.0,
                 "the least share of the arm's all-to-all time (start to completion) that ran "
                 "while the rank computed, in its worst run");
  return keys;
}

std::vector<RecipeKeyDoc> RecipeKeyDocs() {
  std::vector<RecipeKeyDoc> docs;
  TopLevelKeys().Describe(Recipe(), &docs);
  ModelKeys().Describe(ModelConfig(), &docs);
  ParallelKeys().Describe(ParallelConfig(), &docs);
  DataKeys().Describe(DataConfig(), &docs);
  TrainKeys().Describe(TrainConfig(), &docs);
  PrecisionKeys().Describe(PrecisionConfig(), &docs);
  RecomputeKeys().Describe(RecomputeConfig(), &docs);
  TraceKeys().Describe(TraceConfig(), &docs);
  ArmKeys().Describe(ArmConfig(), &docs);
  CompareKeys().Describe(ComparePolicy(), &docs);
  MemoryBoundKeys().Describe(MemoryBound(), &docs);
  OverlapBoundKeys().Describe(OverlapBound(), &docs);
  return docs;
}

namespace {

// A default a recipe could write (a number, a string, a list) is code; a description is not.
bool IsTomlValue(const std::string& text) {
  if (text.empty()) return false;
  const char c = text[0];
  return c == '"' || c == '-' || std::isdigit(static_cast<unsigned char>(c)) || text == "[]";
}

std::string Cell(const std::string& text) {
  std::string out;
  for (char c : text) out += c == '|' ? std::string("\\|") : std::string(1, c);
  return out;
}

}  // namespace

std::string RecipeKeysMarkdown() {
  std::ostringstream out;
  out << "| table | key | type | default | meaning |\n| --- | --- | --- | --- | --- |\n";
  for (const RecipeKeyDoc& d : RecipeKeyDocs()) {
    const std::string table = d.table == "top level" ? d.table : "`" + d.table + "`";
    out << "| " << table << " | `" << d.key << "` | " << Cell(d.type) << " | "
        << (d.default_value.empty()        ? "required"
            : IsTomlValue(d.default_value) ? "`" + Cell(d.default_value) + "`"
                                           : Cell(d.default_value))
        << " | " << Cell(d.doc) << " |\n";
  }
  return out.str();
}

std::string RecipeKeysSummaryMarkdown() {
  std::vector<std::pair<std::string, std::string>> rows;
  for (const RecipeKeyDoc& d : RecipeKeyDocs()) {
    if (rows.empty() || rows.back().first != d.table) rows.push_back({d.table, ""});
    std::string& keys = rows.back().second;
    keys += (keys.empty() ? "`" : ", `") + d.key + "`";
    if (d.type.find('"') == 0 && d.type.find('{') == std::string::npos) {
      std::string choices = d.type;
      std::string words;
      for (size_t i = 0; i < choices.size(); ++i) {
        if (choices[i] == '"') {
          const size_t end = choices.find('"', i + 1);
          words += (words.empty() ? "`" : ", `") + choices.substr(i + 1, end - i - 1) + "`";
          i = end;
        }
      }
      keys += " (" + words + ")";
    }
  }
  std::ostringstream out;
  out << "| table | keys |\n| --- | --- |\n";
  for (const auto& [table, keys] : rows) {
    out << "| " << (table == "top level" ? table : "`" + table + "`") << " | " << keys << " |\n";
  }
  return out.str();
}

}  // namespace bitparity
