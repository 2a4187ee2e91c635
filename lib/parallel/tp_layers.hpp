#pragma once
// The communicating sides of Megatron's tensor- and sequence-parallel layers, for a model (docs/parallelism.md):
//   - a column-parallel GEMM (its output columns split over the TP group): its input enters whole, through
//     copy_to_tp_region (identity forward, allreduce of dX backward), or under sequence parallelism all-gathered from
//     the rows' shards (reduce-scattered back);
//   - a row-parallel GEMM (its input columns split): its partial output leaves summed, through reduce_from_tp_region
//     (allreduce forward, identity backward), or under sequence parallelism reduce-scattered to the rows' shards
//     (all-gathered back);
//   - the replicated LayerNorms under sequence parallelism: their weight gradients are partial sums over this rank's
//     rows, summed over the group;
//   - a vocabulary-parallel cross-entropy's row statistics (max, sums), allreduced (statistics, not a conjugate pair).
// The GEMMs, LayerNorms and losses themselves stay the model's kernel calls; this holds the collectives between them,
// over parallel/tp_collectives.hpp. At tp = 1 every call is the identity and communicates nothing. comm_ms() sums the
// time the collectives took.
#include <cstdint>

#include "comm/communicator.hpp"
#include "parallel/tp_collectives.hpp"

namespace hpct::parallel {

class TensorParallelLayers {
 public:
  TensorParallelLayers() = default;  // tp = 1
  // tp_comm: the TP group (null at tp = 1), of which this rank is tp_rank; sp: sequence parallelism (tp > 1 only).
  TensorParallelLayers(comm::Communicator* tp_comm, int tp, int tp_rank, bool sp)
      : comm_(tp_comm), tp_(tp), tp_rank_(tp_rank), sp_(sp && tp > 1) {}

  bool sp() const { return sp_; }
  double comm_ms() const { return ms_; }
  void reset_comm_ms() { ms_ = 0.0; }

  // A column-parallel GEMM's input: under SP, this rank's rows (n elements) all-gathered into `whole` (which is
  // returned); else `rows` itself, the whole input.
  template <typename A>
  const A* column_input(const A* rows, A* whole, int64_t n, const char* what) {
    if (!sp_) return rows;
    ms_ += gather_from_sequence_parallel_region_forward(*comm_, rows, whole, n, what);
    return whole;
  }
  // Its input's gradient: `dwhole` (whole_numel elements, this rank's partial sum) made complete: under SP this rank's
  // rows, reduce-scattered into `dshard` (n elements, returned); else allreduced in place under TP.
  template <typename A>
  const A* column_input_grad(A* dwhole, A* dshard, int64_t n, int64_t whole_numel, const char* what) {
    if (sp_) {
      ms_ += gather_from_sequence_parallel_region_backward(*comm_, dwhole, dshard, n, what);
      return dshard;
    }
    if (tp_ > 1) ms_ += copy_to_tp_region_backward(*comm_, dwhole, whole_numel, what);
    return dwhole;
  }
  // A row-parallel GEMM's output: `partial` (whole_numel elements) summed over the group: in place, or under SP this
  // rank's rows of the sum, reduce-scattered into its block of `partial` (n elements each); returns where they are.
  template <typename A>
  A* row_output(A* partial, int64_t n, int64_t whole_numel, const char* what) {
    if (sp_) {
      A* mine = partial + tp_rank_ * n;
      ms_ += reduce_scatter_to_sequence_parallel_region_forward(*comm_, partial, mine, n, what);
      return mine;
    }
    if (tp_ > 1) ms_ += reduce_from_tp_region_forward(*comm_, partial, whole_numel, what);
    return partial;
  }
  // Its output's gradient, the dY of the GEMM: under SP this rank's rows (n elements) all-gathered into `dwhole`
  // (returned); else `drows` itself (the identity backward of reduce_from_tp_region).
  template <typename A>
  const A* row_output_grad(const A* drows, A* dwhole, int64_t n, const char* what) {
    if (!sp_) return drows;
    ms_ += reduce_scatter_to_sequence_parallel_region_backward(*comm_, drows, dwhole, n, what);
    return dwhole;
  }
  // Under SP: the replicated parameters' partial gradients (n floats, over this rank's rows) summed over the group.
  void sum_sequence_parallel_grads(float* grads, int64_t n, const char* what) {
    ms_ += allreduce_sequence_parallel_grads(*comm_, grads, n, what);
  }
  // A vocabulary-parallel loss's row statistics (n floats) reduced over the group with `op`.
  void allreduce_stats(float* stats, int64_t n, comm::ReduceOp op, const char* what) {
    ms_ += allreduce_tp_stats(*comm_, stats, n, op, what);
  }

 private:
  comm::Communicator* comm_ = nullptr;
  int tp_ = 1, tp_rank_ = 0;
  bool sp_ = false;
  double ms_ = 0.0;
};

}  // namespace hpct::parallel
