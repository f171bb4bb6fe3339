#include "tests/support/trace_builder.h"

#include <string>

#include "trace/digest.h"

namespace bitparity::testing {

Trace MakeTrace(int64_t ranks, int64_t iterations) {
  Trace trace;
  trace.attributes["recipe"] = "[model]\nhidden = 4\n";
  trace.attributes["arm"] = "reference";
  trace.attributes["world_size"] = std::to_string(ranks);
  for (int64_t r = 0; r < ranks; ++r) {
    RankTrace rank;
    rank.rank = r;
    rank.param_names = {"w", "b"};
    rank.param_shapes = {{3, 4}, {4}};
    rank.attributes["provenance.host"] = "test";
    for (int64_t it = 1; it <= iterations; ++it) {
      IterationRecord rec;
      rec.iteration = it;
      rec.loss = 5.0f / static_cast<float>(it);
      rec.lm_loss = rec.loss;
      rec.mtp_loss = 0.25f;
      rec.aux_loss = 0.01f;
      rec.grad_norm = 1.0 / static_cast<double>(it);
      rec.learning_rate = 1e-3;
      rec.peak_bytes = 1000 + it;
      rec.end_bytes = 100;
      rec.step_seconds = 0.5;
      rec.optimizer_steps = rec.lr_steps = rec.data_batches = it;
      std::vector<TensorDump> dumps;
      for (size_t p = 0; p < 2; ++p) {
        TensorDump d;
        d.name = rank.param_names[p];
        d.shape = rank.param_shapes[p];
        size_t n = p == 0 ? 12 : 4;
        for (size_t i = 0; i < n; ++i) {
          d.values.push_back(0.001f * static_cast<float>(i + 1) * static_cast<float>(it + r + p));
        }
        rec.grad_digests.push_back(Digest(d.values.data(), d.values.size() * sizeof(float)));
        rec.param_digests.push_back(rec.grad_digests.back() ^ 0x1234);
        dumps.push_back(d);
      }
      if (it == 2) rank.grad_dumps[it] = dumps;
      rank.iterations.push_back(rec);
    }
    trace.ranks.push_back(rank);
  }
  return trace;
}

}  // namespace bitparity::testing
