#pragma once
// The data-parallel layer of training (docs/parallelism.md): DataParallelModel is what a model declares once for it (its
// parameter and gradient slabs, the order its backward writes gradients, the hooks through which backward reports
// progress and forward and backward read the parameters, its initialisation); DataParallel owns the gradient sync
// (buckets, overlap, ZeRO-1/2, hybrid sharding: parallel/grad_sync.hpp) and, under ZeRO-3, the parameter gather
// (parallel/param_gather.hpp), and connects them to the model. The training loop builds one and asks nothing of the
// model's hooks itself.
#include <cstdint>
#include <functional>
#include <memory>

#include "comm/communicator.hpp"
#include "kernels/exec_context.hpp"
#include "parallel/grad_sync.hpp"
#include "parallel/param_gather.hpp"
#include "tensor/tensor.hpp"

namespace hpct::parallel {

class DataParallelModel {
 public:
  virtual ~DataParallelModel() = default;
  // The fp32 parameters (the optimizer's masters; planned only under ZeRO-3, whose gather keeps the rank's shares) and
  // the gradient slab (planned only under ZeRO-2 at DP > 1, whose buckets the gradient sync binds it to).
  virtual Slab& params() = 0;
  virtual Slab& grads() = 0;
  // What the kernels read: the parameters or their 16-bit compute copy; bound to the gather's buffers under ZeRO-3.
  virtual Slab& read_params() = 0;
  // The groups of tensors backward writes, in its order, and the tensors whose gradients stay whole (ZeRO-2).
  virtual GradWriteOrder grad_write_order() const = 0;
  // Backward calls hook(first, end) when tensors [first, end) hold final gradients (first == end: a progress point).
  virtual void set_grad_ready_hook(std::function<void(int, int)> hook) = 0;
  // Backward calls hook(first, end) right before it writes tensors [first, end), once per grad_write_order() group.
  virtual void set_grad_write_hook(std::function<void(int, int)> hook) = 0;
  // Forward and backward call hook(first, end, next_first, next_end) before they read the parameters of tensors
  // [first, end); [next_first, next_end) is what they read next (empty: nothing).
  virtual void set_param_read_hook(std::function<void(int, int, int, int)> hook) = 0;
  // The counter-based initialisation keyed by (seed, name, element); with `store`, each tensor's whole initial values
  // go through it (ZeRO-3: the gather keeps the rank's shares) instead of into params().
  virtual void init_parameters(const ExecContext& ctx, uint64_t seed,
                               const std::function<void(int tensor, const float* host)>& store) = 0;
};

class DataParallel {
 public:
  // sync_group: the group the gradients are reduced (and ZeRO-sharded) over: the DP group, or under hybrid sharding
  // its zero shard group, with replica_group the replicas across shard groups (null otherwise). shard_params (ZeRO-3):
  // the gather over sync_group binds the model's read_params() and initialises the parameters from `seed`.
  DataParallel(DataParallelModel& model, comm::Communicator& sync_group, comm::Communicator* replica_group,
               const GradSyncOptions& opts, const ExecContext& ctx, bool shard_params, uint64_t seed);
  DataParallel(const DataParallel&) = delete;
  DataParallel& operator=(const DataParallel&) = delete;

  GradSync& sync() { return sync_; }
  const GradSync& sync() const { return sync_; }
  ParamGather* gather() { return gather_.get(); }  // null unless ZeRO-3

 private:
  const GradWriteOrder order_;
  GradSync sync_;
  std::unique_ptr<ParamGather> gather_;
};

}  // namespace hpct::parallel
