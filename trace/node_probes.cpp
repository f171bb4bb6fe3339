#include "trace/node_probes.h"

#include <c10/util/Exception.h>

#include <utility>

#include "trace/digest.h"

namespace bitparity {
namespace {

// One training thread's recorder.
struct ProbeState {
  bool on = false;
  bool replaying = false;
  int64_t iteration = 0;
  int64_t chunk = 0;
  std::vector<ProbeRecord> records;
};

thread_local ProbeState probe_state;

ProbeRecord MakeRecord(const ProbeState& state, const ProbeSite& site, size_t slot,
                       const at::Tensor& t) {
  const at::Tensor bytes = t.detach().cpu().contiguous();
  ProbeRecord record;
  record.iteration = state.iteration;
  record.microbatch = site.microbatch;
  record.chunk = site.chunk;
  record.layer = site.layer;
  record.node = ToString(site.node);
  record.phase = ToString(site.phase);
  record.slot = static_cast<int64_t>(slot);
  record.digest = Digest(bytes.data_ptr(), bytes.numel() * bytes.element_size());
  record.dtype = std::string(c10::toString(t.scalar_type()));
  record.shape = t.sizes().vec();
  return record;
}

}  // namespace

std::string ProbeLayerName(int64_t model_layer, int64_t decoder_layers) {
  return model_layer < decoder_layers ? "decoder " + std::to_string(model_layer)
                                      : "mtp " + std::to_string(model_layer - decoder_layers);
}

ProbeSite ReferenceProbeSite(int64_t microbatch, int64_t model_layer, int64_t decoder_layers,
                             NodeKind node) {
  ProbeSite site;
  site.microbatch = microbatch;
  site.chunk = probe_state.chunk;
  site.layer = ProbeLayerName(model_layer, decoder_layers);
  site.node = node;
  return site;
}

void NodeProbes::Enable(bool on) {
  probe_state.on = on;
  probe_state.replaying = false;
  probe_state.chunk = 0;
  probe_state.records.clear();
}

bool NodeProbes::enabled() { return probe_state.on; }

void NodeProbes::SetIteration(int64_t iteration) { probe_state.iteration = iteration; }

void NodeProbes::Record(const ProbeSite& site, const std::vector<at::Tensor>& tensors) {
  if (!probe_state.on) return;
  for (size_t slot = 0; slot < tensors.size(); ++slot) {
    if (tensors[slot].defined()) {
      probe_state.records.push_back(MakeRecord(probe_state, site, slot, tensors[slot]));
    }
  }
}

std::vector<ProbeRecord> NodeProbes::Take() {
  std::vector<ProbeRecord> out;
  out.swap(probe_state.records);
  return out;
}

void NodeProbes::SetReplaying(bool replaying) { probe_state.replaying = replaying; }

void NodeProbes::SetChunk(int64_t chunk) { probe_state.chunk = chunk; }

bool NodeProbes::replaying() { return probe_state.replaying; }

void NodeProbes::RecordOutputs(const ProbeSite& site, const std::vector<at::Tensor>& tensors) {
  if (!probe_state.on) return;
  ProbeSite at = site;
  at.phase = probe_state.replaying ? Phase::kReplay : Phase::kForward;
  Record(at, tensors);
}

void NodeProbes::RecordInputGradients(const ProbeSite& site,
                                      const std::vector<at::Tensor>& tensors) {
  if (!probe_state.on) return;
  ProbeState* state = &probe_state;  // the hook may run on the autograd engine's thread
  ProbeSite at = site;
  at.phase = Phase::kBackward;
  for (size_t slot = 0; slot < tensors.size(); ++slot) {
    const at::Tensor& t = tensors[slot];
    if (!t.defined() || !t.requires_grad()) continue;
    at::Tensor target = t;
    target.register_hook([state, at, slot](const at::Tensor& grad) {
      if (grad.defined()) state->records.push_back(MakeRecord(*state, at, slot, grad));
    });
  }
}

}  // namespace bitparity
