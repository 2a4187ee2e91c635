#include "parallel/data_parallel.hpp"

namespace hpct::parallel {

DataParallel::DataParallel(DataParallelModel& model, comm::Communicator& sync_group, comm::Communicator* replica_group,
                           const GradSyncOptions& opts, const ExecContext& ctx, bool shard_params, uint64_t seed)
    : order_(model.grad_write_order()),
      sync_(sync_group, model.params(), model.grads(), opts, ctx, &order_, replica_group) {
  GradSync* sync = &sync_;
  model.set_grad_ready_hook([sync](int first, int end) { sync->on_ready(first, end); });
  model.set_grad_write_hook([sync](int first, int end) { sync->writing(first, end); });
  if (!shard_params) return;
  gather_ = std::make_unique<ParamGather>(sync_group, sync_.plan(), model.read_params(), ctx, opts.prefetch);
  ParamGather* g = gather_.get();
  model.set_param_read_hook(
      [g](int first, int end, int next_first, int next_end) { g->reading(first, end, next_first, next_end); });
  model.init_parameters(ctx, seed, [g](int tensor, const float* host) { g->store_whole(tensor, host); });
}

}  // namespace hpct::parallel
