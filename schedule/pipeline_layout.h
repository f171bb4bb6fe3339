#ifndef BITPARITY_SCHEDULE_PIPELINE_LAYOUT_H_
#define BITPARITY_SCHEDULE_PIPELINE_LAYOUT_H_

// Where the model's pieces sit in a pipeline of `pp` ranks with `vpp` model chunks each: the
// pipeline stages in virtual order, read from Megatron's --pipeline-model-parallel-layout syntax
// or split evenly. Stage s of the virtual order is chunk s / pp of pipeline rank s % pp (chunk 0
// of every rank first, then chunk 1, ...), as Megatron's PipelineParallelLayerLayout places them;
// activations flow from stage s to stage s + 1, gradients back.
//
//   ParsePipelineLayout("Et|(t|)*6tmL", /*pp=*/4, /*layers=*/8, /*mtp_layers=*/1)
//     8 stages, vpp 2: rank 0 holds [E, layer 0] and [layer 4]; rank 3 holds [layer 3] and
//     [layer 7, MTP 0, loss].

#include <cstdint>
#include <string>
#include <vector>

namespace bitparity {

// One pipeline stage (one model chunk of one pipeline rank).
struct PipelineStage {
  int64_t index = 0;    // in virtual order: chunk * pp + pp_rank
  int64_t pp_rank = 0;  // the pipeline rank holding it
  int64_t chunk = 0;    // its model chunk on that rank (0 .. vpp - 1)
  bool embedding = false;
  int64_t first_layer = 0;  // decoder layers [first_layer, first_layer + layers)
  int64_t layers = 0;
  int64_t first_mtp = 0;  // MTP depths [first_mtp, first_mtp + mtp_layers)
  int64_t mtp_layers = 0;
  bool loss = false;  // the output head and the losses
  // The final norm of the decoder: on the stage of the last decoder layer when the model has MTP
  // (the MTP input is its output; under mHC on MTP depth 0's stage, see
  // WithFinalNormOnTheMtpStage), otherwise on the loss stage.
  bool final_norm = false;

  bool first() const { return index == 0; }
  // Layer `layer` of the stage (its decoder layers first, then its MTP depths) in the whole
  // model's numbering: decoder layers 0 .. model_layers - 1, then MTP depth d as model_layers + d.
  int64_t ModelLayer(int64_t layer, int64_t model_layers) const {
    return layer >= layers ? model_layers + first_mtp + layer - layers : first_layer + layer;
  }
  // What it holds: "E t0 t1", "t7 m0 L", or "empty".
  std::string Contents() const;
};

struct PipelineLayout {
  int64_t pp = 1;
  int64_t vpp = 1;
  std::vector<PipelineStage> stages;  // virtual order; pp x vpp of them
  // Interleaved schedule: microbatches per group (Megatron's microbatch_group_size_per_vp_stage);
  // 0: pp. A property of the schedule, carried here so that every engine reads the same value.
  int64_t microbatch_group = 0;

  const PipelineStage& stage(int64_t pp_rank, int64_t chunk) const {
    return stages[static_cast<size_t>(chunk * pp + pp_rank)];
  }
  // The stage that feeds stage `index` in forward (-1 for the first) and the one it feeds (-1 for
  // the last).
  int64_t previous(int64_t index) const { return index - 1; }
  int64_t next(int64_t index) const {
    return index + 1 < static_cast<int64_t>(stages.size()) ? index + 1 : -1;
  }
  // Rows of the activation entering stage `index`, in microbatches: 1 + the MTP depths of the
  // stages before it (an MTP stage sends its depths' hidden states stacked under the main ones
  // along dim 0, as Megatron does).
  int64_t ActivationParts(int64_t index) const;
  // The last dimension of the activation entering stage `index`: the residual stream's width
  // (`residual_width`: n x hidden under mHC, whose streams cross stages as Megatron's do) until
  // the stage that applies the decoder's final norm, `hidden` after it.
  int64_t ActivationWidth(int64_t index, int64_t hidden, int64_t residual_width) const;
  // The layout in Megatron's syntax, one stage per `|`, repetitions written out ("Et|t|t|tmL").
  std::string Text() const;
  // One line per pipeline rank: "rank 0: [E t0] [t4]", for `bitparity validate`.
  std::vector<std::string> Describe() const;
};

// Megatron's layout syntax with its repetitions written out: commas removed, each "(X)*n" (not
// nested) and then each "c*n" repeated. Throws InputError on a malformed repetition.
std::string ExpandPipelineLayout(const std::string& text);

// Reads a layout: stages separated by '|' (empty stages allowed), each a sequence of 'E'
// (embedding), 't' (decoder layer), 'm' (MTP layer) and 'L' (loss), with Megatron's repetitions.
// The rules, each an InputError whose message names the rule (without a file or key: the caller
// adds them): the stage count is a multiple of `pp` (vpp = stages / pp); 'E' once, in the first
// stage, first; 'L' once, in the last stage, last; `layers` 't' and `mtp_layers` 'm'; no 't'
// after an 'm'; every 'm' in one stage, the last chunk of a pipeline rank (rank 0's included, as
// Megatron's validate_layer_layout allows: the depth reads that rank's own embedding). Stricter
// than Megatron: 'E' in the first and 'L' in the last stage, where Megatron only requires them
// first and last once empty stages are dropped (an empty first or last stage).
PipelineLayout ParsePipelineLayout(const std::string& text, int64_t pp, int64_t layers,
                                   int64_t mtp_layers);

// The layout without a layout string: `layers` split evenly over pp x vpp stages (Megatron's
// default), the embedding on the first, MTP and the loss on the last. InputError when the split
// is uneven, saying how to fix it.
PipelineLayout EvenPipelineLayout(int64_t pp, int64_t vpp, int64_t layers, int64_t mtp_layers);

// Under mHC the MTP depth reads the decoder's streams before their mean and the final norm, so the
// final norm moves to the stage of MTP depth 0 (the same stage as before when that stage also
// holds the last decoder layer; a later, MTP-only stage otherwise, and the streams cross the
// boundaries up to it). A layout without MTP is returned as it is.
PipelineLayout WithFinalNormOnTheMtpStage(PipelineLayout layout);

}  // namespace bitparity

#endif  // BITPARITY_SCHEDULE_PIPELINE_LAYOUT_H_
