#pragma once
// A machine as the layout planner sees it (train/plan/auto_plan.hpp, docs/parallelism.md "Choosing a layout"): the
// devices of a node and their memory, what compute costs (a GEMM rate, a fixed cost per kernel call, a rate for the
// memory-bound kernels, a slowdown when a node's ranks share cores), and the two links (inside a node, across nodes) as
// alpha-beta rings. Read from a TOML file validated by a schema (inputs/machines/*.toml: h100_dgx, a100_dgx and
// this_cpu, which validation/calibrate_machine.py writes from measurements).
#include <string>
#include <vector>

#include "core/config.hpp"
#include "tensor/tensor.hpp"

namespace hpct::train {

enum class Collective { AllReduce, ReduceScatter, AllGather, SendRecv };

// One link class: a ring's bus bandwidth per rank and its latency per ring step, optionally by ring size (a CPU whose
// ranks share cores reaches a different rate at every rank count: measured per count, the nearest count applies), and
// optionally per operation: an MPI library's reduce-scatter and allgather need not follow the ring's relation to its
// allreduce (half its time), so a machine file may give them fits of their own at the same counts.
struct Link {
  double bandwidth_gbs = 0;                                  // bus bandwidth per rank (GB/s, 1e9 B/s)
  double latency_us = 0;                                     // per ring step
  std::vector<int> ranks;                                    // optional: ring sizes with a fit of their own
  std::vector<double> bandwidth_by_ranks, latency_by_ranks;  // the allreduce's (and every operation's without its own)
  std::vector<double> reduce_scatter_bandwidth_by_ranks, reduce_scatter_latency_by_ranks;
  std::vector<double> allgather_bandwidth_by_ranks, allgather_latency_by_ranks;
  // The fit for `op` on a ring of p ranks: the per-count one whose count is nearest to p (the larger on a tie), the
  // operation's own where the file gives it, else the plain one.
  std::pair<double, double> at(int p, Collective op = Collective::AllReduce) const;  // (bytes/s, seconds per step)
};

// The work of one rank's step the compute model prices (the slowest rank's; the planner's "work" output).
struct Work {
  double gemm_flops = 0;       // matrix products (GEMMs, attention's products, convolutions)
  double gemm_calls = 0;       // their kernel calls: each pays kernel_overhead
  double memory_bytes = 0;     // bytes the memory-bound kernels (elementwise, normalisation, losses) move
  double optimizer_bytes = 0;  // bytes the optimizer's update moves (one streaming pass over its state)
  Work& operator+=(const Work& o);
  Work scaled(double f) const;
  // `count` products of (m x k) by (k x n): 2 m n k FLOPs each, one call each.
  void gemm(double m, double n, double k, double count = 1);
};

struct Machine {
  std::string name, source;  // source: the file it was read from
  Device device = Device::CPU;
  std::string device_name;   // as the driver (or lscpu) names it
  int devices_per_node = 1;  // ranks one node holds
  double memory_gb = 0;      // GiB per device, or per node (memory_per_node)
  bool memory_per_node = false;
  double peak_tflops = 0;  // 0: the peak table's figure for device_name at the run's precision
  double gemm_efficiency = 1;
  double kernel_overhead_us = 0;
  double memory_gbs = 0;
  double optimizer_gbs = 0;  // the optimizer's streaming rate; 0: memory_gbs
  // The fraction of an overlapped collective's time that compute can hide: 1 where a DMA engine or NIC moves the
  // bytes (NCCL on GPUs), 0 where the ranks' own cores copy them (MPI through shared memory on a CPU: the copy is core
  // time, and a non-blocking collective progresses only inside the rank's MPI calls).
  double comm_overlap = 1;
  std::vector<double> shared_ranks{1.0}, shared_slowdown{1.0};
  double shared_sync_us = 0;  // a synchronisation's wait for partners that share cores (see collective_seconds)
  // The fraction of a core a rank waiting for a message still takes where ranks share cores (an MPI receive polls,
  // yielding between polls; the scheduler gives the poller its turns): the pipeline's idle ranks do not give their
  // cores wholly to the computing ones (train/plan/shared_pipeline.hpp).
  double shared_wait_share = 0;
  Link intra, inter;

  // The peak the compute model divides by, at a train.precision name (TFLOP/s): peak_tflops, else the peak table's
  // (a UsageError naming the machine file when neither is known).
  double peak_at(const std::string& precision) const;
  // The slowdown of compute when `ranks_on_node` ranks share a node: shared_slowdown interpolated over shared_ranks,
  // the last one's beyond it (a GPU node's ranks have a device each: 1).
  double slowdown(double ranks_on_node) const;  // fractional: ranks that take part of a core
  // Seconds for `work` on one rank at `precision` when ranks_on_node ranks share the node.
  double compute_seconds(const Work& work, const std::string& precision, int ranks_on_node) const;
  // Seconds for one collective of `bytes` (the full buffer: the allreduced one, the whole of what is scattered or
  // gathered; SendRecv: the message) over a group of p ranks spread over `nodes` nodes (p / nodes on each): a ring
  // inside a node; across nodes, hierarchical: the in-node part on `intra`, then the nodes' ring on `inter` with every
  // device on its own rail. Where ranks_on_node ranks share a node's cores (slowdown > 1), a partner is descheduled
  // with probability 1 - 1 / slowdown and the collective waits shared_sync_us for it (a scheduler slice).
  double collective_seconds(Collective op, double bytes, int p, int nodes, int ranks_on_node = 1) const;
  // Device memory a rank may use (bytes): memory_gb, divided among the node's ranks when memory_per_node.
  double rank_memory_bytes(int ranks_on_node) const;
};

// The machine file's keys (inputs/machines/*.toml; --help of nothing: docs/parallelism.md lists them).
const ConfigSchema& machine_schema();
// `name_or_file`: a preset name (inputs/machines/NAME.toml of the source tree, or of $HPCT_MACHINES_DIR) or a path (it
// contains '/' or ends in .toml). A UsageError naming the presets when neither exists; the schema's errors name the key.
Machine load_machine(const std::string& name_or_file);
// The presets: the stems of the machine directory's *.toml, sorted.
std::vector<std::string> machine_presets();

}  // namespace hpct::train
