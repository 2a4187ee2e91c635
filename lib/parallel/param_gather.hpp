#pragma once
// ZeRO stage 3 (parallel.zero = 3, at DP > 1): the parameters are sharded too (docs/parallelism.md). A rank keeps the
// fp32 masters of its shares only, in the layout of the gradient sync's ZeRO shard (BucketPlan: the same buckets and
// the same shares, so the optimizer updates masters and gradients at the same offsets); the model's tensors hold no
// memory of their own. The tensors the kernels read (the fp32 parameters, or the 16-bit compute copy under bf16 /
// fp16) are bound (Slab::bind) to places in gather buffers, and each bucket is allgathered into its place when the
// model is about to read it:
//
//   - Buckets are the model's layers (under ZeRO-3 plan_buckets makes one bucket per write group, less its pinned
//     tensors). The ring buckets, in launch order u_0 .. u_{U-1} (the backward's order: head, last block, ..., first
//     block, embedding), alternate between two slots: u_k lives in slot k % 2, each slot as large as its largest
//     bucket. The forward reads u_{U-1} down to u_0 and the backward u_0 up, so consecutive reads always use different
//     slots: while one layer computes, the next one's gather fills the other slot (prefetch), and a gather only ever
//     overwrites a layer the model has finished with (double buffering). A bucket stays resident until another gather
//     takes its slot: the last layer of the forward is not gathered again for the first of the backward.
//   - Pinned buckets (the GPT's tied wte, read by the embedding and by the head) have places of their own and are
//     gathered once per step, at their first read, and kept for the step.
//   - The model calls reading(first, end, next_first, next_end) before it reads tensors [first, end): their buckets
//     are gathered if not resident (and waited for), then the buckets of [next_first, next_end), which it reads next,
//     are launched without waiting (prefetch; off with parallel.prefetch = false: then every gather is waited for at
//     its read).
//   - Under 16-bit storage the gathers move the storage type: after each optimizer step refresh() casts the fp32
//     shard into a 16-bit shard once, and the buckets gather that (FSDP's mixed precision); in fp32 they gather the
//     masters. refresh() also marks every bucket stale (the masters changed): nothing carries over a step.
// Every rank runs the same reads in the same order (the collectives' contract): the model's forward and backward, and
// the evaluation, which runs the same number of forwards on every DP rank under ZeRO-3.
//
// Memory: the masters and the 16-bit shard are kind `params`; the two slots and the pinned places, kind `comm`.
// Communication: every micro-batch gathers each ring bucket twice (forward and backward), the pinned ones once per
// step, against ZeRO-1's one parameter allgather per step: with one micro-batch ZeRO-3 moves 1.5x ZeRO-1's bytes
// (reduce-scatter + two allgathers vs reduce-scatter + one).
#include <cstdint>
#include <string>
#include <vector>

#include "comm/communicator.hpp"
#include "kernels/exec_context.hpp"
#include "parallel/grad_sync.hpp"
#include "tensor/tensor.hpp"

namespace hpct::parallel {

// Where every bucket's gathered parameters live, from the bucket plan alone (the memory plan counts it for any rank).
struct GatherPlan {
  std::vector<int> ring;                 // the ring buckets, in launch order (u_0 .. u_{U-1})
  std::vector<int64_t> place;            // per bucket: element offset in its buffer (the slots, or the pinned places)
  std::vector<int> slot;                 // per bucket: 0 or 1 (ring), -1 (pinned)
  int64_t slot_numel[2] = {0, 0};        // each slot's elements (its largest bucket, aligned)
  int64_t ring_numel = 0;                // both slots
  int64_t pinned_numel = 0;              // the pinned places
  size_t shard_bytes(DType act) const;   // kind `params`: the fp32 masters (and the act shard under 16-bit storage)
  size_t gather_bytes(DType act) const;  // kind `comm`: the slots and the pinned places, of the storage type
  int64_t shard_numel = 0;
};
GatherPlan plan_gather(const BucketPlan& buckets);

class ParamGather {
 public:
  // dp: the ZeRO shard group (the gradient sync's); buckets: its plan (ZeRO-3 at DP > 1); read: the tensors the
  // kernels read (params, or the 16-bit compute copy; their one type is what the gathers move), planned but not
  // allocated by the model: bound here. prefetch: parallel.prefetch.
  ParamGather(comm::Communicator& dp, const BucketPlan& buckets, Slab& read, const ExecContext& ctx, bool prefetch);
  ParamGather(const ParamGather&) = delete;
  ParamGather& operator=(const ParamGather&) = delete;

  // The fp32 master of the owned range `at` of the shard (BucketPlan::Owned::at): the optimizer's segments.
  float* master(int64_t at) { return master_base_ + at; }
  // Initialisation: the whole fp32 values of parameter tensor `tensor` on the host; the rank keeps its shares.
  void store_whole(int tensor, const float* host);
  // The model's read hook (above).
  void reading(int first, int end, int next_first, int next_end);
  // After the masters changed (initialisation, a resume's load, an optimizer step): the 16-bit shard cast from them (in
  // fp32 the gathers send the masters themselves), and every bucket stale.
  void refresh();
  // The time reading() blocked since reset_wait_ms() (the exposed part of the gathers; on CUDA the host's issue time)
  double last_wait_ms() const { return wait_ms_; }
  void reset_wait_ms() { wait_ms_ = 0.0; }
  size_t shard_bytes() const { return shard_.bytes(); }
  size_t gather_bytes() const { return gather_.bytes(); }
  const GatherPlan& plan() const { return plan_; }
  std::string describe() const;

 private:
  void launch(size_t b);
  void ensure(size_t b);  // resident, waited for
  comm::Communicator& dp_;
  const BucketPlan& buckets_;
  GatherPlan plan_;
  Slab& read_;
  DType act_;
  ExecContext ctx_;
  bool prefetch_;
  Slab shard_;   // "master" (fp32), then "compute" (act) under 16-bit storage
  Slab gather_;  // "slots", "pinned" (act)
  float* master_base_ = nullptr;
  void* compute_base_ = nullptr;  // the shard the gathers send: the masters in fp32
  char *slots_ = nullptr, *pinned_ = nullptr;
  std::vector<int> holder_;  // per slot: the bucket whose gather is there (-1: none)
  std::vector<bool> resident_;
  std::vector<comm::WorkPtr> work_;
  std::vector<int> bucket_of_tensor_;
  double wait_ms_ = 0.0;
};

}  // namespace hpct::parallel
