#pragma once
// Data-parallel gradient synchronisation (docs/architecture.md): gradients are summed over the DP group in
// buckets that start as soon as backward has produced them, overlapped with the rest of backward.
//
// Buckets: the parameter tensors, walked in reverse layout order (the order backward finishes them),
// grouped until a bucket holds >= bucket_bytes; a bucket is one contiguous range of the gradient slab
// (tensors are adjacent there, in layout order). Every rank builds the same buckets and launches them in
// the same order (the communicator's contract).
//
// Overlap: the model's backward calls on_ready(first, end) when the gradients of parameter tensors
// [first, end) are final (and with an empty range as a progress point). During the last micro-batch
// (arm()), a bucket whose tensors are all ready is launched at once (MPI_Iallreduce); every hook call
// drives progress (MPI_Test), because non-blocking MPI collectives progress only inside MPI calls here
// (docs/platform.md). finish() launches what is left and waits; the time it blocks is the exposed
// communication of the step. With overlap off, every bucket is launched in finish().
//
// On CUDA (NCCL device groups) a bucket's allreduce / reduce-scatter is queued on the dp communicator's stream after
// the backward kernels queued so far on the compute stream (an event; no host synchronisation), and finish()'s waits
// are stream-ordered (docs/cuda.md): the compute stream waits on each bucket's completion event, the host does not
// block. The optimizer's kernels queued afterwards see the reduced gradients; the host reads them (the gradient norm)
// only after a synchronize of the compute stream, bounded by the ParallelContext's sync guard. last_exposed_ms() and
// last_gather_ms() are then the host time spent issuing the remaining buckets and their stream waits (about 0), not
// the communication the GPU waits for: measuring that needs timing events on the two streams, which this class does
// not record. On the CPU (MPI) they are unchanged: the time the host blocks in finish() / gather_params().
//
// ZeRO stage 1 (zero = 1): bucket b of length n is split into DP contiguous shares (counts n/DP, the
// first n%DP ranks one more); gradients are reduce-scattered into this rank's shard buffer, the
// optimizer updates only the owned share (owned()), and gather_params() allgathers the updated
// parameters bucket by bucket. Optimizer state is then 1/DP of the unsharded figure.
//
// ZeRO stage 2 (zero = 2, at DP > 1): the gradients are sharded too and no full-size gradient buffer exists. The
// model plans its gradient slab without allocating it; the constructor binds every gradient tensor to a place in its
// buckets (Slab::bind). Every micro-batch (begin_micro_batch()), the model's write hook (writing()) readies the buckets
// a range of gradients lives in before backward writes it (their places free: the buckets there landed; zeroed), and
// a bucket is reduce-scattered in place as soon as it is complete; land() adds this rank's reduced share to the shard
// (zeroed by begin_step()). The buckets share a ring (BucketPlan::place, sized by plan_buckets from the model's write
// order so that a bucket opens only over complete ones); the tensors GradWriteOrder pins (the GPT's tied wte) keep a
// place of their own, accumulate over the micro-batches and are reduce-scattered once, in finish(). The optimizer's
// ranges, the norm and gather_params() are ZeRO-1's. ZeRO-2 requires overlap (the deck's UsageError). With bf16
// reduction (below) each bucket's image sits at the bucket's place in a bf16 copy of the ring and the pinned buffer:
// every micro-batch's gradients are rounded to bf16 and reduced in bf16, then summed in fp32 into the shard (a
// pinned bucket once per step), so a step's gradient carries up to m such reductions for m micro-batches where ZeRO-1
// carries one (DeepSpeed's ZeRO-2 reduces each micro-batch likewise).
//
// ZeRO stage 3 (zero = 3, at DP > 1): the gradients as ZeRO-2's, with one bucket per write group (a layer), which is
// also the unit ZeRO-3's parameter gathers work in (parallel/param_gather.hpp, over plan()); gather_params() does
// nothing (the model's reads gather).
//
// Reduction type (parallel.grad_dtype, docs/invariants.md "How the scale features compose"): fp32 (the default: the
// gradient slab itself is reduced, bit for bit as before) or bf16, which halves the bytes on the wire. With bf16 each
// bucket's fp32 gradients are cast (kernels::cast on the ExecContext, rounded to nearest even) into the bucket's range
// of one bf16 buffer planned at construction (half the gradient slab; the memory record's kind `comm`), the bf16
// buffer is allreduced (ZeRO-1: reduce-scattered in place, this rank's share staying at its place in the buffer), and
// finish() casts the reduced sum back into the fp32 gradient (ZeRO-1: into this rank's fp32 shard), exactly. The
// gradient norm, the clipping and the update then read fp32 as ever; the parameter allgather of ZeRO-1 stays fp32.
// The result is the sum of the bf16-rounded local gradients, rounded to bf16 again at each of the DP - 1 pairwise
// combinations the communicator makes (comm/mpi_communicator.hpp: reproducible for a fixed DP size, identical on every
// rank): at most 2 DP - 1 roundings of 2^-8 (bf16's unit roundoff) times the sum of magnitudes away from the fp32
// reduction. Buckets are the same as with fp32 (bucket_bytes counts fp32 gradient bytes), so only the reduction type
// changes between the two. At DP 1 nothing is reduced and the gradients stay fp32, untouched, for either type. The
// casts run in launch() and finish() on the ExecContext's stream (CUDA: the compute stream, which the dp
// communicator's operations are ordered after): nothing allocates in the step.
#include <cstdint>
#include <string>
#include <vector>

#include "comm/communicator.hpp"
#include "kernels/exec_context.hpp"
#include "tensor/tensor.hpp"

namespace hpct::parallel {

// Deck key parallel.grad_dtype: "fp32" -> DType::F32, "bf16" -> DType::BF16; anything else is a UsageError naming the
// accepted values.
DType parse_grad_dtype(const std::string& s);
// The inverse: "fp32" | "bf16" (logs, describe()).
const char* grad_dtype_name(DType t);

struct GradSyncOptions {
  size_t bucket_bytes = 1u << 20;   // parallel.bucket_mb
  bool overlap = true;              // parallel.overlap
  int zero = 0;                     // parallel.zero
  DType reduce_dtype = DType::F32;  // parallel.grad_dtype (parse_grad_dtype): F32 or BF16
  int zero_group = 0;               // parallel.zero_group: 0 = shard over the whole DP group (hybrid sharding below)
  bool prefetch = true;             // parallel.prefetch (ZeRO-3's parameter gathers: parallel/param_gather.hpp)
};

// Hybrid sharding (parallel.zero_group): the size of the groups ZeRO shards over, for a DP group of dp ranks: dp for
// zero_group 0 (or dp), else zero_group, which must divide dp into groups of at least 2 ranks (a UsageError naming the
// key and `where`, the deck, otherwise).
int zero_shard_size(int zero_group, int dp, const std::string& where);

// A flat range [begin, end) of parameter tensor `tensor` owned by this rank, with its reduced gradient.
struct OwnedRange {
  int tensor = 0;
  int64_t begin = 0, end = 0;
  float* grad = nullptr;
};

struct Bucket {
  int first_tensor = 0, end_tensor = 0;  // layout indices [first, end)
  int64_t elem_begin = 0, elem_end = 0;  // element range in the slab (float offsets from base)
  std::vector<int64_t> counts;           // ZeRO: share of each DP rank
  int64_t shard_offset = 0;              // ZeRO: where this rank's share lives in the shard buffer
  int64_t own_offset = 0;                // ZeRO: where this rank's share starts in the bucket (sum of counts before it)
};

// What ZeRO-2 needs to know of the model's backward (models: grad_write_groups): the ranges of layout indices it writes,
// in its order (one write-hook call each), and the tensors written out of that order or summed after the schedule,
// which are kept whole (pinned: the GPT's tied wte).
struct GradWriteOrder {
  std::vector<std::pair<int, int>> groups;
  std::vector<bool> pinned;  // by layout index; empty: none
};

// The buckets of a gradient slab and one DP rank's share of them, from the slab's plan alone (allocated or not):
// what GradSync runs with, and what the memory plan (`--plan`) counts for any rank without building a GradSync.
struct BucketPlan {
  // A range of parameter tensor `tensor` this rank's optimizer updates; `at`: its first element's offset in the ZeRO
  // shard buffer (ZeRO at DP > 1) or in the gradient slab.
  struct Owned {
    int tensor = 0;
    int64_t begin = 0, end = 0, at = 0;
  };
  std::vector<Bucket> buckets;        // in launch order (reverse layout order)
  std::vector<int> bucket_of_tensor;  // layout index -> bucket
  std::vector<int64_t> tensor_elem;   // layout index -> its first element's offset in the slab
  int64_t slab_numel = 0;             // elements the buckets tile: [0, slab_numel) of the slab
  bool sharded = false;               // ZeRO at DP > 1: reduced shares live in a shard buffer of their own
  int64_t shard_numel = 0;            // its elements (this rank's shares, back to back); 0 unless sharded
  bool bf16_image = false;            // parallel.grad_dtype = bf16 at DP > 1: a bf16 image of the buckets
  std::vector<Owned> owned;           // in layout order
  // ZeRO-2 at DP > 1 (`ring`): the gradients live in the buckets, not in a full-size slab. A pinned bucket (a pinned
  // tensor, alone) has a place of its own in `pinned_numel` elements, accumulated over the step's micro-batches; every
  // other bucket has a place in a ring of `ring_numel` elements that later buckets reuse once it has been
  // reduce-scattered. The ring is the smallest (in steps of a quarter of the largest bucket) for which no bucket, when
  // backward starts writing it, overlaps a bucket not yet complete (GradWriteOrder's groups decide when each opens and
  // completes).
  bool ring = false;
  std::vector<bool> bucket_pinned;         // per bucket
  std::vector<int64_t> place;              // per bucket: element offset in the ring, or in the pinned buffer
  std::vector<std::vector<int>> overlaps;  // per ring bucket: the ring buckets (itself included) whose places overlap
  int64_t ring_numel = 0, pinned_numel = 0;

  int64_t owned_numel() const;  // the elements the optimizer updates: its state's elements per buffer
  size_t shard_bytes() const;   // the ZeRO shard buffer (kind `grads`), as its slab allocates it
  int64_t image_numel() const;  // the bf16 image's elements: the gradient slab's, or ZeRO-2's ring and pinned buffer
  size_t comm_bytes() const;    // the bf16 image (kind `comm`), as its slab allocates it
  size_t bucket_bytes() const;  // ZeRO-2: the ring and the pinned buffer (kind `grads`), as their slab allocates them
};
// grads: fp32 tensors in layout order (HPCT_CHECK otherwise); opts.zero 0 to 3; order: the model's, needed by
// ZeRO-2 and ZeRO-3 at DP > 1 (every tensor in exactly one group; ZeRO-3: one bucket per group, less its pinned
// tensors, which are buckets of their own).
BucketPlan plan_buckets(const Slab& grads, const GradSyncOptions& opts, int dp_size, int dp_rank,
                        const GradWriteOrder* order = nullptr);

class GradSync {
 public:
  // ctx: where the bf16 casts run (ctx.device == grads.device(); CUDA: the compute stream, which dp's operations are
  // ordered after). Read only when opts.reduce_dtype is BF16 at DP > 1; the fp32 path calls no kernel.
  // order: the model's write order, needed by ZeRO-2 (which then binds `grads`, planned but not allocated by the
  // model, to its buckets: Slab::bind). replicas (hybrid sharding): dp is then the zero shard group, and finish()
  // allreduces the reduced shard over the replicas of this rank's share in the other shard groups.
  GradSync(comm::Communicator& dp, Slab& params, Slab& grads, const GradSyncOptions& opts,
           const ExecContext& ctx = ExecContext{}, const GradWriteOrder* order = nullptr,
           comm::Communicator* replicas = nullptr);
  GradSync(const GradSync&) = delete;
  GradSync& operator=(const GradSync&) = delete;

  // ZeRO-2 reduces every micro-batch (per_micro_batch()): begin_step() before the step's first backward zeroes the
  // shard and the pinned buffer; begin_micro_batch() before each backward; writing() is the model's write hook.
  bool per_micro_batch() const { return plan_.ring; }
  void begin_step();
  void begin_micro_batch();
  void writing(int first, int end);
  // The next backward is the last micro-batch of the step: buckets launch as they become ready (ZeRO 0 and 1).
  void arm();
  // Hook of the model's backward: the gradients of tensors [first, end) are final (first == end: only
  // a progress point).
  void on_ready(int first, int end);
  // Launches the buckets not yet launched, waits for all. Afterwards the gradients (unsharded) or this
  // rank's shard (ZeRO) hold the sum over the DP group.
  void finish();
  // ZeRO: allgathers the updated parameter shares so every rank holds the whole parameters again.
  void gather_params();

  const std::vector<Bucket>& buckets() const { return buckets_; }
  const BucketPlan& plan() const { return plan_; }
  // The ranges this rank's optimizer updates: whole tensors without ZeRO, its shares with ZeRO.
  const std::vector<OwnedRange>& owned() const { return owned_; }
  int64_t shard_numel() const { return plan_.shard_numel; }
  int zero() const { return opts_.zero; }
  DType reduce_dtype() const { return opts_.reduce_dtype; }
  // Bytes of the bf16 bucket buffer (kind `comm` in the memory record): half the gradient slab with bf16 at DP > 1,
  // else 0.
  size_t comm_bytes() const { return reduced_.bytes(); }
  // Bytes of the ZeRO shard of reduced gradients and of ZeRO-2's buckets (kind `grads`): 0 without ZeRO.
  size_t shard_bytes() const { return shard_.bytes() + buckets_mem_.bytes(); }
  double last_exposed_ms() const { return exposed_ms_; }  // in finish() (CUDA: host issue time only, see above)
  double last_gather_ms() const { return gather_ms_; }    // in gather_params() (likewise)
  std::string describe() const;

 private:
  void launch(size_t b);
  void land(size_t b);  // after bucket b's reduction completed: bf16 -> its fp32 gradients (or this rank's shard)
  void open(int b);     // ZeRO-2: bucket b's place is free (the buckets there landed) and zeroed
  void wait_and_land(size_t b);
  void sum_over_replicas();      // hybrid sharding: the shard summed over the replica group (finish())
  float* bucket_data(size_t b);  // ZeRO-2: where bucket b's gradients live
  bf16* bucket_image(size_t b);  // bf16 reduction: bucket b's image
  comm::Communicator& dp_;
  comm::Communicator* replicas_ = nullptr;
  Slab& params_;
  Slab& grads_;
  GradSyncOptions opts_;
  ExecContext ctx_;
  BucketPlan plan_;
  const std::vector<Bucket>& buckets_ = plan_.buckets;
  std::vector<int> pending_;  // per bucket: tensors not yet ready
  std::vector<comm::WorkPtr> work_;
  size_t next_launch_ = 0;  // buckets launch strictly in order (same order on every rank)
  bool armed_ = false;
  Slab shard_;        // ZeRO: reduced gradient shares (plan_.shard_numel floats)
  Slab reduced_;      // bf16 reduction: (elements of the gradient slab) bf16, bucket b at [elem_begin, elem_end)
  Slab buckets_mem_;  // ZeRO-2: the ring and the pinned buffer
  float *ring_ = nullptr, *pinned_ = nullptr;
  std::vector<int> ring_order_;  // ZeRO-2: the ring buckets in launch order
  std::vector<bool> opened_;     // ZeRO-2: per bucket, opened in this micro-batch
  bf16* reduced_base_ = nullptr;
  std::vector<OwnedRange> owned_;
  double exposed_ms_ = 0.0, gather_ms_ = 0.0;
};

}  // namespace hpct::parallel
