#pragma once
// A ZeRO-2 step as the models drive GradSync (parallel/grad_sync.hpp), shared by the gradient-sync tests: per
// micro-batch, the head writes half of the pinned tensor 0's gradient first, then every write group in order is
// readied (writing), accumulated and reported ready. Gradient values are small integers of (rank, tensor, element,
// micro-batch), exact in fp32 and not all exact in bf16.
#include <cstdint>

#include "parallel/grad_sync.hpp"
#include "tensor/tensor.hpp"

namespace hpct::test {

inline float zero2_grad_value(int rank, int tensor, int64_t i, int micro_batch) {
  return static_cast<float>((rank + 1) * 100 + tensor * 7 + i % 13 + micro_batch * 3);
}

// begin_step, the micro-batches' backwards, finish. Tensor 0 receives its value twice per micro-batch (the head and
// the embedding), every other tensor once.
inline void run_zero2_step(parallel::GradSync& gs, Slab& grads, const parallel::GradWriteOrder& order, int rank,
                           int micro_batches) {
  auto add = [&](int t, int mb) {
    Tensor& g = grads.tensors()[static_cast<size_t>(t)];
    for (int64_t i = 0; i < g.numel(); ++i) g.f32()[i] += zero2_grad_value(rank, t, i, mb);
  };
  gs.begin_step();
  for (int mb = 0; mb < micro_batches; ++mb) {
    gs.begin_micro_batch();
    add(0, mb);  // the head writes wte first (half of its gradient here, half in the embedding group)
    for (const auto& [first, end] : order.groups) {
      gs.writing(first, end);
      for (int t = end - 1; t >= first; --t) add(t, mb);
      gs.on_ready(first, end);
      gs.on_ready(0, 0);
    }
  }
  gs.finish();
}

}  // namespace hpct::test
