#pragma once
// The memory record (docs/contracts.md "metrics.jsonl"): what a rank allocated, by kind, in bytes. Every slab the run
// plans belongs to one kind: `params` (the fp32 masters, the 16-bit compute copy, BatchNorm's running statistics),
// `grads` (the gradient slab and a ZeRO shard of reduced gradients), `optimizer`, `comm` (the bf16 gradient-reduction
// buffer, the pipeline's activation buffers), `activations` (forward activations and backward scratch), `workspace`
// (convolution workspace) and `ckpt_staging` (host copies checkpoints read on CUDA). What libraries allocate behind
// the slabs (cuBLASLt's and cuDNN's workspaces, NCCL's buffers, oneDNN's scratchpads, the CUDA context) is in no kind;
// `rss` shows it: the peak resident set of the process on the CPU, the device memory in use on CUDA.
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "comm/communicator.hpp"
#include "tensor/tensor.hpp"

namespace hpct::train {

struct MemoryKinds {
  double params = 0, grads = 0, optimizer = 0, comm = 0, activations = 0, workspace = 0, ckpt_staging = 0;
  double total() const { return params + grads + optimizer + comm + activations + workspace + ckpt_staging; }
};

struct MemoryRecord {
  MemoryKinds kinds;  // each kind's maximum over ranks
  double peak = 0;    // the maximum over ranks of a rank's total (every slab lives for the whole run)
  double rss = 0;     // the maximum over ranks of resident_bytes()
};

// This process now: on the CPU the peak resident set (getrusage ru_maxrss), on CUDA the device memory in use.
double resident_bytes(Device device);

// Collective over `world`: the kinds and peak of `mine` and every rank's resident_bytes(), maximum over ranks.
MemoryRecord gather_memory_record(comm::Communicator& world, const MemoryKinds& mine, Device device);
// Collective: rss again, for the last record.
double gather_rss(comm::Communicator& world, Device device);

// The record's JSON fields in the contract's order (params .. ckpt_staging, peak, rss).
std::vector<std::pair<std::string, std::optional<double>>> memory_fields(const MemoryRecord& r);
// One log line: "memory record (max over N ranks): params .. | peak .. | rss ..".
std::string describe_memory_record(const MemoryRecord& r, int world);

}  // namespace hpct::train
