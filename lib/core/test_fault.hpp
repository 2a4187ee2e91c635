#pragma once
// Planted defects for the sensitivity check of the equivalence campaign (validation/equivalence.py --plant,
// --sensitivity): a test seam, read once from the environment, inert unless set (every real run).
// HPCT_TEST_FAULT=<name>[:rank=R] plants one realistic parallel-layout bug at the place such a bug would live, so that
// the campaign can prove it reports FAILED for it (docs/invariants.md, "Sensitivity"):
//   dp_bucket_twice    DP gradient sync: this rank's contribution to gradient bucket 0 counted twice (lib/parallel)
//   dp_bucket_dropped  DP gradient sync: this rank's contribution to gradient bucket 0 dropped (zeroed)
//   tp_grad_scale      TP: the rank's shard of every attention qkv weight gradient scaled by 1 + 1e-3 (models/gpt)
//   syncbn_naive       SyncBN: each rank's raw moments sum x, sum x^2 accumulated in fp32 and merged with the naive
//                      fp32 E[x^2] - mean^2 instead of two-pass moments and Chan's formula (kernels/cpu)
//   pp_loss_twice      pipeline: the last stage counts micro-batch 0's loss twice, reported and backpropagated
//   zero_shard_offset  ZeRO: the optimizer's gradient shard read one element early (every owned range at offset > 0)
// rank=R restricts a fault to the rank whose group rank is R (DP rank for dp_* and zero_*, TP rank for tp_*, ignored
// by the others); without it every rank plants it. An unknown name is a UsageError. Every process that reads a set
// variable prints one WARNING line to stderr, so a production log shows a planted defect.
//
// HPCT_TEST_RESUME_NOISE=REL[:seed=S] (the restart control of validation/gpu_layouts.py): a resume multiplies every
// parameter value it reads from a checkpoint by (1 + REL x u), u uniform in [-1, 1) and a pure function of (S, the
// tensor's name, the value's flat index in the whole tensor), so every layout resumes the same perturbed state.
// HPCT_TEST_RESUME_NOISE=@PATH[:seed=S]: REL per tensor, from PATH's lines "<name> <REL>" (the model's names, "wte";
// a tensor not listed is not perturbed, a name the model lacks perturbs nothing), to match a measured difference
// tensor by tensor. A
// checkpoint written on another device differs from the CPU's by that device's rounding; resuming the CPU's own
// checkpoint perturbed by noise of the measured size shows how far rounding alone moves the rest of the curve. Not a
// defect, but the numbers are not the checkpoint's: announced by a WARNING line like a planted fault.

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace hpct {

enum class FaultKind { DpBucketTwice, DpBucketDropped, TpGradScale, SyncBnNaive, PpLossTwice, ZeroShardOffset };

// Whether HPCT_TEST_FAULT plants `kind` here; group_rank: this rank's rank in the group the fault concerns (-1: any).
bool fault_active(FaultKind kind, int group_rank = -1);
// Reads both variables now (start-up): a malformed value fails before any work, and the warning comes first.
void announce_test_fault();

struct ResumeNoise {
  double rel = 0;  // every tensor's, unless per_tensor holds any
  std::map<std::string, double> per_tensor;
  uint64_t seed = 0;
  bool active() const { return rel > 0 || !per_tensor.empty(); }
  double rel_of(const std::string& name) const;
};
// HPCT_TEST_RESUME_NOISE, parsed once (a malformed value is a UsageError naming it).
const ResumeNoise& resume_noise();
// The noise applied to the box [offset, offset + count) of tensor `name` of global shape `shape`, held row-major in
// data (numel(count) values); no-op while inert.
void perturb_resumed_box(const ResumeNoise& noise, const std::string& name, const std::vector<int64_t>& shape,
                         const std::vector<int64_t>& offset, const std::vector<int64_t>& count, float* data);

}  // namespace hpct
