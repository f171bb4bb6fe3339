#ifndef BITPARITY_MODEL_CHUNK_STATE_FIELD_H_
#define BITPARITY_MODEL_CHUNK_STATE_FIELD_H_

// The fields of a microbatch's chunk state (ChunkState, model/gpt.h) that its forward mutates:
// what every recompute snapshot captures and restores, named for plans, faults and reports.
// Torch-free.

#include <array>
#include <cstddef>

namespace bitparity {

enum class ChunkStateField {
  kInputIds,
  kPositionIds,
  kPaddingMask,
  kMtpHiddenStates,
  kMhcMultistream
};

inline constexpr std::array<ChunkStateField, 5> kChunkStateFields = {
    ChunkStateField::kInputIds, ChunkStateField::kPositionIds, ChunkStateField::kPaddingMask,
    ChunkStateField::kMtpHiddenStates, ChunkStateField::kMhcMultistream};

// A flag per field, indexed by the field's value.
using ChunkStateFieldFlags = std::array<bool, kChunkStateFields.size()>;

inline const char* ToString(ChunkStateField field) {
  switch (field) {
    case ChunkStateField::kInputIds:
      return "input_ids";
    case ChunkStateField::kPositionIds:
      return "position_ids";
    case ChunkStateField::kPaddingMask:
      return "padding_mask";
    case ChunkStateField::kMtpHiddenStates:
      return "mtp_hidden_states";
    case ChunkStateField::kMhcMultistream:
      return "mhc_multistream";
  }
  return "?";
}

inline size_t Index(ChunkStateField field) { return static_cast<size_t>(field); }

}  // namespace bitparity

#endif  // BITPARITY_MODEL_CHUNK_STATE_FIELD_H_
