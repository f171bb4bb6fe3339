#ifndef BITPARITY_TRACE_TRACE_HDF5_H_
#define BITPARITY_TRACE_TRACE_HDF5_H_

// The HDF5 side of the trace format (docs/trace-format.md) that its writer (trace_writer.cpp) and
// reader (trace_reader.cpp) share: handle ownership, group names, and the columns of the
// per-iteration records and the replay census. Internal to core/; torch-free.

#include <hdf5.h>

#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "trace/trace.h"

namespace bitparity {
namespace trace_hdf5 {

// Silences HDF5's own error printing once per process; we report errors ourselves.
inline void QuietHdf5() {
  static bool done = [] {
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
    return true;
  }();
  (void)done;
}

// Owns one HDF5 identifier and closes it with the matching function.
class Hid {
 public:
  Hid() = default;
  Hid(hid_t id, herr_t (*closer)(hid_t)) : id_(id), closer_(closer) {}
  Hid(const Hid&) = delete;
  Hid& operator=(const Hid&) = delete;
  Hid(Hid&& other) noexcept { *this = std::move(other); }
  Hid& operator=(Hid&& other) noexcept {
    Reset();
    id_ = other.id_;
    closer_ = other.closer_;
    other.id_ = -1;
    return *this;
  }
  ~Hid() { Reset(); }
  hid_t get() const { return id_; }
  bool valid() const { return id_ >= 0; }
  void Reset() {
    if (id_ >= 0 && closer_) closer_(id_);
    id_ = -1;
  }

 private:
  hid_t id_ = -1;
  herr_t (*closer_)(hid_t) = nullptr;
};

inline std::string GroupNameForRank(int64_t rank) {
  char name[32];
  std::snprintf(name, sizeof(name), "rank_%05lld", static_cast<long long>(rank));
  return name;
}

inline std::string GroupNameForIteration(int64_t iteration) {
  char name[32];
  std::snprintf(name, sizeof(name), "iter_%06lld", static_cast<long long>(iteration));
  return name;
}

inline std::string JoinShape(const std::vector<int64_t>& shape) {
  std::string out;
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? "," : "") + std::to_string(shape[i]);
  return out;
}

// HDF5 file and memory types of one column's element type.
template <typename T>
struct ColumnType;
template <>
struct ColumnType<float> {
  static hid_t File() { return H5T_IEEE_F32LE; }
  static hid_t Memory() { return H5T_NATIVE_FLOAT; }
  static constexpr H5T_class_t kClass = H5T_FLOAT;
};
template <>
struct ColumnType<double> {
  static hid_t File() { return H5T_IEEE_F64LE; }
  static hid_t Memory() { return H5T_NATIVE_DOUBLE; }
  static constexpr H5T_class_t kClass = H5T_FLOAT;
};
template <>
struct ColumnType<int64_t> {
  static hid_t File() { return H5T_STD_I64LE; }
  static hid_t Memory() { return H5T_NATIVE_INT64; }
  static constexpr H5T_class_t kClass = H5T_INTEGER;
};

// One scalar per-iteration column: its dataset under rank_<r>/, the IterationRecord member it
// holds, and whether a trace may lack it (a reported-only record that older traces lack reads as
// zeros). A new column is one line here (and one in docs/trace-format.md).
struct IterationColumn {
  const char* name;
  std::variant<float IterationRecord::*, double IterationRecord::*, int64_t IterationRecord::*>
      member;
  bool optional;
};

constexpr IterationColumn kIterationColumns[] = {
    {"iteration", &IterationRecord::iteration, false},
    {"loss", &IterationRecord::loss, false},
    {"lm_loss", &IterationRecord::lm_loss, false},
    {"mtp_loss", &IterationRecord::mtp_loss, false},
    {"aux_loss", &IterationRecord::aux_loss, false},
    {"grad_norm", &IterationRecord::grad_norm, false},
    {"learning_rate", &IterationRecord::learning_rate, false},
    {"peak_bytes", &IterationRecord::peak_bytes, false},
    {"end_bytes", &IterationRecord::end_bytes, false},
    {"step_seconds", &IterationRecord::step_seconds, false},
    {"comm_seconds", &IterationRecord::comm_seconds, true},
    {"comm_exposed_seconds", &IterationRecord::comm_exposed_seconds, true},
    {"comm_count_exchange_seconds", &IterationRecord::comm_count_exchange_seconds, true},
    {"record_seconds", &IterationRecord::record_seconds, true},
    {"comm_count", &IterationRecord::comm_count, true},
    {"p2p_count", &IterationRecord::p2p_count, true},
    {"p2p_bytes", &IterationRecord::p2p_bytes, true},
    {"p2p_exposed_seconds", &IterationRecord::p2p_exposed_seconds, true},
    {"gemm_flops_forward", &IterationRecord::gemm_flops_forward, true},
    {"gemm_flops_replay", &IterationRecord::gemm_flops_replay, true},
    {"gemm_flops_backward", &IterationRecord::gemm_flops_backward, true},
    {"gemm_flops_attention", &IterationRecord::gemm_flops_attention, true},
    {"gemm_flops_dense", &IterationRecord::gemm_flops_dense, true},
    {"gemm_flops_expert", &IterationRecord::gemm_flops_expert, true},
    {"gemm_flops_head", &IterationRecord::gemm_flops_head, true},
    {"gemm_flops_other", &IterationRecord::gemm_flops_other, true},
};

// The replay census's datasets under rank_<r>/replay_census/, one per ReplayCensusSample member.
struct CensusColumn {
  const char* name;
  int64_t ReplayCensusSample::*member;
};

constexpr CensusColumn kCensusColumns[] = {
    {"iteration", &ReplayCensusSample::iteration},
    {"chunk", &ReplayCensusSample::chunk},
    {"microbatch", &ReplayCensusSample::microbatch},
    {"segment", &ReplayCensusSample::segment},
    {"live_bytes", &ReplayCensusSample::live_bytes},
    {"model_bytes", &ReplayCensusSample::model_bytes},
    {"segment_bytes", &ReplayCensusSample::segment_bytes},
};

}  // namespace trace_hdf5
}  // namespace bitparity

#endif  // BITPARITY_TRACE_TRACE_HDF5_H_
