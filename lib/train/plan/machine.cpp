#include "train/plan/machine.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <tuple>

#include "core/device_peaks.hpp"
#include "core/error.hpp"
#include "core/format.hpp"

#ifndef HPCT_SOURCE_DIR
#define HPCT_SOURCE_DIR "."
#endif

namespace hpct::train {
namespace fs = std::filesystem;

std::pair<double, double> Link::at(int p, Collective op) const {
  size_t best = ranks.size();
  for (size_t i = 0; i < ranks.size(); ++i)
    if (best == ranks.size() || std::abs(ranks[i] - p) < std::abs(ranks[best] - p) ||
        (std::abs(ranks[i] - p) == std::abs(ranks[best] - p) && ranks[i] > ranks[best]))
      best = i;
  if (best == ranks.size()) return {bandwidth_gbs * 1e9, latency_us * 1e-6};
  const std::vector<double>* bw = &bandwidth_by_ranks;
  const std::vector<double>* lat = &latency_by_ranks;
  if (op == Collective::ReduceScatter && !reduce_scatter_bandwidth_by_ranks.empty()) {
    bw = &reduce_scatter_bandwidth_by_ranks;
    lat = &reduce_scatter_latency_by_ranks;
  } else if (op == Collective::AllGather && !allgather_bandwidth_by_ranks.empty()) {
    bw = &allgather_bandwidth_by_ranks;
    lat = &allgather_latency_by_ranks;
  }
  return {(*bw)[best] * 1e9, (*lat)[best] * 1e-6};
}

Work& Work::operator+=(const Work& o) {
  gemm_flops += o.gemm_flops;
  gemm_calls += o.gemm_calls;
  memory_bytes += o.memory_bytes;
  optimizer_bytes += o.optimizer_bytes;
  return *this;
}

Work Work::scaled(double f) const { return {gemm_flops * f, gemm_calls * f, memory_bytes * f, optimizer_bytes * f}; }

void Work::gemm(double m, double n, double k, double count) {
  gemm_flops += 2.0 * m * n * k * count;
  gemm_calls += count;
}

double Machine::peak_at(const std::string& precision) const {
  if (peak_tflops > 0) return peak_tflops;
  const std::optional<double> p = hpct::peak_tflops(device_name, precision);
  HPCT_USAGE_CHECK(p.has_value() && *p > 0,
                   "machine {}: compute.peak_tflops = 0 and the peak table has no {} figure for machine.device_name = "
                   "\"{}\"; set compute.peak_tflops (the device's dense peak, or a CPU's measured GEMM rate)",
                   source, precision, device_name);
  return *p;
}

double Machine::slowdown(double ranks_on_node) const {
  const double r = ranks_on_node;
  if (r <= shared_ranks.front()) return shared_slowdown.front();
  for (size_t i = 1; i < shared_ranks.size(); ++i)
    if (r <= shared_ranks[i]) {
      const double f = (r - shared_ranks[i - 1]) / (shared_ranks[i] - shared_ranks[i - 1]);
      return shared_slowdown[i - 1] + f * (shared_slowdown[i] - shared_slowdown[i - 1]);
    }
  return shared_slowdown.back();
}

double Machine::compute_seconds(const Work& w, const std::string& precision, int ranks_on_node) const {
  const double rate = peak_at(precision) * 1e12 * gemm_efficiency;
  const double optimizer_rate = (optimizer_gbs > 0 ? optimizer_gbs : memory_gbs) * 1e9;
  return slowdown(ranks_on_node) * (w.gemm_flops / rate + w.gemm_calls * kernel_overhead_us * 1e-6 +
                                    w.memory_bytes / (memory_gbs * 1e9) + w.optimizer_bytes / optimizer_rate);
}

namespace {
// A ring of p ranks on one link: the bandwidth term of each collective and its number of latency steps.
double ring_seconds(Collective op, double bytes, int p, const Link& link) {
  if (p <= 1) return 0.0;
  const auto [bw, alpha] = link.at(p, op);
  const double share = static_cast<double>(p - 1) / p;
  switch (op) {
    case Collective::AllReduce: return 2.0 * share * bytes / bw + 2.0 * (p - 1) * alpha;
    case Collective::ReduceScatter:
    case Collective::AllGather: return share * bytes / bw + (p - 1) * alpha;
    case Collective::SendRecv: return bytes / bw + alpha;
  }
  return 0.0;
}
}  // namespace

double Machine::collective_seconds(Collective op, double bytes, int p, int nodes, int ranks_on_node) const {
  if (p <= 1 || bytes <= 0) return 0.0;
  const double wait = shared_sync_us * 1e-6 * (1.0 - 1.0 / slowdown(ranks_on_node));
  // An in-node ring of q ranks was measured with q ranks on the node; where more share its cores, the copies its
  // ranks make (CPU shared memory) get the smaller share of a core the others leave: slowdown(node) / slowdown(q).
  auto in_node_ring = [&](Collective o, double n, int q) {
    return ring_seconds(o, n, q, intra) * slowdown(ranks_on_node) / slowdown(std::min(q, ranks_on_node));
  };
  if (op == Collective::SendRecv)
    return wait + (nodes > 1 ? ring_seconds(op, bytes, 2, inter) : in_node_ring(op, bytes, 2));
  nodes = std::max(1, std::min(nodes, p));
  if (nodes == 1) return wait + in_node_ring(op, bytes, p);
  const int in_node = p / nodes;
  // in-node reduce-scatter / allgather phases, then the nodes' ring over each device's 1/in_node share in parallel
  double t = 0.0;
  if (in_node > 1) {
    const Collective phase = op == Collective::AllGather ? Collective::AllGather : Collective::ReduceScatter;
    t += in_node_ring(phase, bytes, in_node) * (op == Collective::AllReduce ? 2.0 : 1.0);
  }
  return wait + t + ring_seconds(op, bytes / in_node, nodes, inter);
}

double Machine::rank_memory_bytes(int ranks_on_node) const {
  const double bytes = memory_gb * 1024.0 * 1024.0 * 1024.0;
  return memory_per_node ? bytes / std::max(1, ranks_on_node) : bytes;
}

const ConfigSchema& machine_schema() {
  static const ConfigSchema schema = [] {
    ConfigSchema s;
    s.section("machine", true, "the node: its devices and their memory");
    s.string_key("machine.name", std::nullopt, "the machine's name (the planner's output names it)");
    s.string_key("machine.device", std::nullopt, "cpu | cuda: the device the ranks train on", {"cpu", "cuda"});
    s.string_key("machine.device_name", std::nullopt,
                 "the device as the driver (nvidia-smi) or lscpu names it; the peak table's key");
    s.int_key("machine.devices_per_node", std::nullopt, "ranks one node holds (a GPU each on GPU machines)", 1);
    s.float_key("machine.memory_gb", std::nullopt, "memory in GiB per device, or per node (memory_per)", 0.001);
    s.string_key("machine.memory_per", "device", "device | node: node means the node's ranks share memory_gb",
                 {"device", "node"});
    s.section("compute", true,
              "what compute costs: t = slowdown x (GEMM FLOPs / rate + calls x overhead + bytes / "
              "memory rate)");
    s.float_key("compute.peak_tflops", 0.0,
                "dense peak TFLOP/s; 0: the peak table's figure for machine.device_name at the run's precision", 0.0);
    s.float_key("compute.gemm_efficiency", std::nullopt, "fraction of the peak a large GEMM reaches", 1e-4, 1.0);
    s.float_key("compute.kernel_overhead_us", std::nullopt, "fixed time per GEMM kernel call (launch, tails)", 0.0);
    s.float_key("compute.memory_gbs", std::nullopt, "rate of the memory-bound kernels (GB/s)", 1e-3);
    s.float_list_key("compute.shared_ranks", std::vector<double>{1.0},
                     "ranks per node at which shared_slowdown was measured, increasing", 1.0);
    s.float_list_key("compute.shared_slowdown", std::vector<double>{1.0},
                     "compute-time factor at those ranks per node (cores shared), interpolated; the last beyond", 1e-3);
    s.float_key("compute.optimizer_gbs", 0.0,
                "rate of the optimizer's update, one streaming pass over its state (GB/s); 0: memory_gbs", 0.0);
    s.float_key("compute.comm_overlap", 1.0,
                "fraction of an overlapped collective's time compute hides: 1 where a DMA engine or NIC moves the "
                "bytes (NCCL), 0 where the ranks' own cores copy them (MPI shared memory on a CPU)",
                0.0, 1.0);
    s.float_key("compute.shared_wait_share", 0.0,
                "where ranks share cores: the fraction of a core a rank waiting for a message (polling MPI) still "
                "takes from the ones computing",
                0.0, 1.0);
    s.float_key("compute.shared_sync_us", 0.0,
                "where ranks share cores: a collective's wait for a descheduled partner (us), x (1 - 1 / slowdown)",
                0.0);
    for (const char* link : {"intra", "inter"}) {
      const std::string l = link;
      s.section(l, true, l == "intra" ? "the link inside a node (ring)" : "the link across nodes, per device (ring)");
      s.float_key(l + ".bandwidth_gbs", std::nullopt, "bus bandwidth per rank (GB/s)", 1e-6);
      s.float_key(l + ".latency_us", std::nullopt, "latency per ring step (us)", 0.0);
      s.float_list_key(l + ".ranks", std::vector<double>{}, "optional: ring sizes with fits of their own", 2.0);
      s.float_list_key(l + ".bandwidth_by_ranks", std::vector<double>{}, "bus bandwidth at those sizes (GB/s)", 1e-6);
      s.float_list_key(l + ".latency_by_ranks", std::vector<double>{}, "latency per ring step at those sizes (us)",
                       0.0);
      for (const char* op : {"reduce_scatter", "allgather"}) {
        const std::string o = op;
        s.float_list_key(l + "." + o + "_bandwidth_by_ranks", std::vector<double>{},
                         "optional: the " + o + "'s own bus bandwidth at those sizes (GB/s); absent: the allreduce's",
                         1e-6);
        s.float_list_key(l + "." + o + "_latency_by_ranks", std::vector<double>{},
                         "optional: the " + o + "'s own latency per ring step at those sizes (us)", 0.0);
      }
    }
    return s;
  }();
  return schema;
}

namespace {
fs::path machines_dir() {
  const char* env = std::getenv("HPCT_MACHINES_DIR");
  return env && *env ? fs::path(env) : fs::path(HPCT_SOURCE_DIR) / "inputs" / "machines";
}

Link read_link(const Config& c, const std::string& l) {
  Link k;
  k.bandwidth_gbs = c.get_float(l + ".bandwidth_gbs");
  k.latency_us = c.get_float(l + ".latency_us");
  for (double r : c.get_float_list(l + ".ranks")) k.ranks.push_back(static_cast<int>(std::lround(r)));
  k.bandwidth_by_ranks = c.get_float_list(l + ".bandwidth_by_ranks");
  k.latency_by_ranks = c.get_float_list(l + ".latency_by_ranks");
  HPCT_USAGE_CHECK(k.bandwidth_by_ranks.size() == k.ranks.size() && k.latency_by_ranks.size() == k.ranks.size(),
                   "machine {}: {}.ranks has {} entries but {}.bandwidth_by_ranks {} and {}.latency_by_ranks {}; give "
                   "one bandwidth and one latency per ring size",
                   c.deck_path(), l, k.ranks.size(), l, k.bandwidth_by_ranks.size(), l, k.latency_by_ranks.size());
  k.reduce_scatter_bandwidth_by_ranks = c.get_float_list(l + ".reduce_scatter_bandwidth_by_ranks");
  k.reduce_scatter_latency_by_ranks = c.get_float_list(l + ".reduce_scatter_latency_by_ranks");
  k.allgather_bandwidth_by_ranks = c.get_float_list(l + ".allgather_bandwidth_by_ranks");
  k.allgather_latency_by_ranks = c.get_float_list(l + ".allgather_latency_by_ranks");
  for (const auto& [op, bw, lat] :
       {std::tuple{"reduce_scatter", &k.reduce_scatter_bandwidth_by_ranks, &k.reduce_scatter_latency_by_ranks},
        std::tuple{"allgather", &k.allgather_bandwidth_by_ranks, &k.allgather_latency_by_ranks}})
    HPCT_USAGE_CHECK((bw->empty() && lat->empty()) || (bw->size() == k.ranks.size() && lat->size() == k.ranks.size()),
                     "machine {}: {}.{}_bandwidth_by_ranks has {} entries and {}.{}_latency_by_ranks {}, {}.ranks {}; "
                     "give both with one entry per ring size, or neither (the allreduce's fit then stands for it)",
                     c.deck_path(), l, op, bw->size(), l, op, lat->size(), l, k.ranks.size());
  return k;
}
}  // namespace

std::vector<std::string> machine_presets() {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(machines_dir(), ec))
    if (e.path().extension() == ".toml") names.push_back(e.path().stem().string());
  std::sort(names.begin(), names.end());
  return names;
}

Machine load_machine(const std::string& name_or_file) {
  const bool is_file = name_or_file.find('/') != std::string::npos || name_or_file.ends_with(".toml");
  const fs::path path = is_file ? fs::path(name_or_file) : machines_dir() / (name_or_file + ".toml");
  if (!fs::exists(path)) {
    std::string presets;
    for (const std::string& n : machine_presets()) presets += (presets.empty() ? "" : ", ") + n;
    HPCT_USAGE_FAIL("--machine {}: no such {} ({}); name a preset of {} ({}) or a machine file (TOML, "
                    "docs/parallelism.md)",
                    name_or_file, is_file ? "file" : "preset", path.string(), machines_dir().string(),
                    presets.empty() ? "none found" : presets);
  }
  const Config c = Config::load(machine_schema(), path.string());
  Machine m;
  m.source = path.string();
  m.name = c.get_string("machine.name");
  m.device = c.get_string("machine.device") == "cuda" ? Device::CUDA : Device::CPU;
  m.device_name = c.get_string("machine.device_name");
  m.devices_per_node = static_cast<int>(c.get_int("machine.devices_per_node"));
  m.memory_gb = c.get_float("machine.memory_gb");
  m.memory_per_node = c.get_string("machine.memory_per") == "node";
  m.peak_tflops = c.get_float("compute.peak_tflops");
  m.gemm_efficiency = c.get_float("compute.gemm_efficiency");
  m.kernel_overhead_us = c.get_float("compute.kernel_overhead_us");
  m.memory_gbs = c.get_float("compute.memory_gbs");
  m.optimizer_gbs = c.get_float("compute.optimizer_gbs");
  m.comm_overlap = c.get_float("compute.comm_overlap");
  m.shared_ranks = c.get_float_list("compute.shared_ranks");
  m.shared_slowdown = c.get_float_list("compute.shared_slowdown");
  m.shared_sync_us = c.get_float("compute.shared_sync_us");
  m.shared_wait_share = c.get_float("compute.shared_wait_share");
  HPCT_USAGE_CHECK(!m.shared_ranks.empty() && m.shared_ranks.size() == m.shared_slowdown.size() &&
                       std::is_sorted(m.shared_ranks.begin(), m.shared_ranks.end()) &&
                       std::adjacent_find(m.shared_ranks.begin(), m.shared_ranks.end()) == m.shared_ranks.end(),
                   "machine {}: compute.shared_ranks ({} entries) must increase strictly and pair with "
                   "compute.shared_slowdown ({} entries)",
                   m.source, m.shared_ranks.size(), m.shared_slowdown.size());
  m.intra = read_link(c, "intra");
  m.inter = read_link(c, "inter");
  return m;
}

}  // namespace hpct::train
