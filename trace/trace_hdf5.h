#ifndef BITPARITY_TRACE_TRACE_HDF5_H_
#define BITPARITY_TRACE_TRACE_HDF5_H_

// The HDF5 side of the trace format (docs/trace-format.md) that its writer (trace_writer.cpp) and
// reader (trace_reader.cpp) share: handle ownership, group names, and the columns of the
// per-iteration records and of the table sections. Internal to trace/; torch-free.

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
    {"optimizer_steps", &IterationRecord::optimizer_steps, true},
    {"lr_steps", &IterationRecord::lr_steps, true},
    {"data_batches", &IterationRecord::data_batches, true},
};

// One column of a table section (a group with one dataset per column, a row per element): its
// dataset name, the row member it holds, and whether a trace may lack it (a column recorded
// later: older traces read it as the member's default). A table's optional columns came into the
// format together, so a trace holds all of them or none. The writer and the reader walk the same
// list, so a new column is one line here (and one in docs/trace-format.md).
template <typename Row>
struct TableColumn {
  const char* name;
  std::variant<int64_t Row::*, uint64_t Row::*, std::string Row::*> member;
  bool optional;
};

// rank_<r>/memory_timeline/.
inline const TableColumn<MemorySample> kMemoryTimelineColumns[] = {
    {"iteration", &MemorySample::iteration, false},
    {"time_ns", &MemorySample::time_ns, false},
    {"current_bytes", &MemorySample::current_bytes, false},
    {"peak_bytes", &MemorySample::peak_bytes, false},
    {"label", &MemorySample::label, false},
};

// rank_<r>/schedule_timeline/; phase and wait_ns are absent from traces written before they
// were recorded.
inline const TableColumn<ScheduleInterval> kScheduleTimelineColumns[] = {
    {"microbatch", &ScheduleInterval::microbatch, false},
    {"comm", &ScheduleInterval::comm, false},
    {"begin_ns", &ScheduleInterval::begin_ns, false},
    {"end_ns", &ScheduleInterval::end_ns, false},
    {"wait_ns", &ScheduleInterval::wait_ns, true},
    {"node", &ScheduleInterval::node, false},
    {"phase", &ScheduleInterval::phase, true},
};

// rank_<r>/replay_census/.
inline const TableColumn<ReplayCensusSample> kReplayCensusColumns[] = {
    {"iteration", &ReplayCensusSample::iteration, false},
    {"chunk", &ReplayCensusSample::chunk, false},
    {"microbatch", &ReplayCensusSample::microbatch, false},
    {"segment", &ReplayCensusSample::segment, false},
    {"live_bytes", &ReplayCensusSample::live_bytes, false},
    {"model_bytes", &ReplayCensusSample::model_bytes, false},
    {"segment_bytes", &ReplayCensusSample::segment_bytes, false},
};

// rank_<r>/probes/, less the shape column ("2,8,64"), which the writer joins and the reader
// parses.
inline const TableColumn<ProbeRecord> kProbeColumns[] = {
    {"iteration", &ProbeRecord::iteration, false}, {"microbatch", &ProbeRecord::microbatch, false},
    {"chunk", &ProbeRecord::chunk, false},         {"slot", &ProbeRecord::slot, false},
    {"digest", &ProbeRecord::digest, false},       {"layer", &ProbeRecord::layer, false},
    {"node", &ProbeRecord::node, false},           {"phase", &ProbeRecord::phase, false},
    {"dtype", &ProbeRecord::dtype, false},
};

}  // namespace trace_hdf5
}  // namespace bitparity

#endif  // BITPARITY_TRACE_TRACE_HDF5_H_
