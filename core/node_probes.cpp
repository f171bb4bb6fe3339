#include "core/node_probes.h"

#include <c10/util/Exception.h>

#include <utility>

#include "core/digest.h"

namespace bitparity {
namespace {

thread_local bool probes_on = false;
thread_local int64_t probe_iteration = 0;
thread_local std::vector<ProbeRecord> probe_records;

}  // namespace

void NodeProbes::Enable(bool on) {
  probes_on = on;
  probe_records.clear();
}

bool NodeProbes::enabled() { return probes_on; }

void NodeProbes::SetIteration(int64_t iteration) { probe_iteration = iteration; }

void NodeProbes::Record(const ProbeSite& site, const std::vector<at::Tensor>& tensors) {
  if (!probes_on) return;
  for (size_t slot = 0; slot < tensors.size(); ++slot) {
    const at::Tensor& t = tensors[slot];
    if (!t.defined()) continue;
    const at::Tensor bytes = t.detach().cpu().contiguous();
    ProbeRecord record;
    record.iteration = probe_iteration;
    record.microbatch = site.microbatch;
    record.chunk = site.chunk;
    record.layer = site.layer;
    record.node = site.node;
    record.phase = site.phase;
    record.slot = static_cast<int64_t>(slot);
    record.digest = Digest(bytes.data_ptr(), bytes.numel() * bytes.element_size());
    record.dtype = std::string(c10::toString(t.scalar_type()));
    record.shape = t.sizes().vec();
    probe_records.push_back(std::move(record));
  }
}

std::vector<ProbeRecord> NodeProbes::Take() {
  std::vector<ProbeRecord> out;
  out.swap(probe_records);
  return out;
}

}  // namespace bitparity
