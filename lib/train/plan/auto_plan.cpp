#include "train/plan/auto_plan.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <chrono>
#include <cstdio>
#include <numeric>

#include "core/device_peaks.hpp"
#include "core/error.hpp"
#include "core/format.hpp"
#include "parallel/grad_sync.hpp"

namespace hpct::train {

std::vector<int> divisors(int64_t n) {
  std::vector<int> d;
  for (int64_t i = 1; i <= n; ++i)
    if (n % i == 0) d.push_back(static_cast<int>(i));
  return d;
}

const char* grad_dtype_key(DType t) { return parallel::grad_dtype_name(t); }

std::string describe_layout(const Layout& l) {
  return fmt::format("dp {} tp {} pp {} v {} sp {} zero {} group {} recompute {} mb {} grad {}", l.dp, l.tp, l.pp, l.v,
                     l.sp ? 1 : 0, l.zero, l.zero_group, models::recompute_name(l.recompute), l.micro_batch,
                     grad_dtype_key(l.grad_dtype));
}

AutoPlanProblem auto_plan_problem(const std::string& app, const std::string& unit, const Config& deck,
                                  const RunConfig& run, int world, const AutoPlanOptions& o) {
  AutoPlanProblem p;
  p.machine = load_machine(o.machine);
  p.app = app;
  p.deck_path = deck.deck_path();
  p.unit = unit;
  p.world = world;
  p.precision = precision_name(run.train.precision);
  p.memory_limit_bytes = run.train.memory_limit_gb * 1e9;
  return p;
}

const char* machine_device_key(const Machine& m) { return m.device == Device::CUDA ? "cuda" : "cpu"; }

std::pair<int, int> span_of(const std::vector<int>& ranks, int ranks_per_node) {
  std::vector<int> nodes;
  for (int r : ranks) nodes.push_back(r / ranks_per_node);
  std::sort(nodes.begin(), nodes.end());
  return {static_cast<int>(ranks.size()), static_cast<int>(std::unique(nodes.begin(), nodes.end()) - nodes.begin())};
}

double data_parallel_seconds(const Machine& mc, const DataParallelStep& s, const std::string& where) {
  const int dp = static_cast<int>(s.dp_members.size());
  if (dp <= 1) return 0.0;
  const int zero = s.sync.zero;
  const int group = zero > 0 ? parallel::zero_shard_size(s.sync.zero_group, dp, where) : dp;
  const auto [shard_ranks, shard_nodes] = span_of({s.dp_members.begin(), s.dp_members.begin() + group},
                                                  s.ranks_per_node);
  std::vector<int> across;  // one rank of each shard group
  for (int i = 0; i < dp; i += group) across.push_back(s.dp_members[static_cast<size_t>(i)]);
  const auto [across_ranks, across_nodes] = span_of(across, s.ranks_per_node);
  const auto [dp_ranks, dp_nodes] = span_of(s.dp_members, s.ranks_per_node);
  auto reduce = [&](double bytes) {
    if (zero == 0) return mc.collective_seconds(Collective::AllReduce, bytes, dp_ranks, dp_nodes, s.ranks_per_node);
    return mc.collective_seconds(Collective::ReduceScatter, bytes, shard_ranks, shard_nodes, s.ranks_per_node) +
           mc.collective_seconds(Collective::AllReduce, bytes / group, across_ranks, across_nodes, s.ranks_per_node);
  };
  const double grad_bytes = s.params * static_cast<double>(dtype_size(s.sync.reduce_dtype));
  const double buckets = std::max(1.0, std::ceil(s.params * 4 / static_cast<double>(s.sync.bucket_bytes)));
  const double last = reduce(grad_bytes / buckets), all = buckets * last;
  // the micro-batch's backward, as far as the machine lets compute hide communication
  const double hidden = s.sync.overlap ? s.micro_batch_compute * 2.0 / 3.0 * mc.comm_overlap : 0.0;
  const double exposed = s.sync.overlap ? std::max(last, all - hidden) : all;
  double t = zero >= 2 ? s.micro_batches * exposed : exposed;
  if (zero == 1 || zero == 2)  // the updated fp32 parameters, gathered after the step
    t += buckets * mc.collective_seconds(Collective::AllGather, s.params * 4 / buckets, shard_ranks, shard_nodes,
                                         s.ranks_per_node);
  if (zero == 3) {
    const double passes = 2 + (s.full_recompute ? 1 : 0);
    const int layers = std::max(1, s.layers);  // one gather per layer and pass
    const double first = mc.collective_seconds(Collective::AllGather, s.params * s.act_bytes / layers, shard_ranks,
                                               shard_nodes, s.ranks_per_node);
    const double gathers = passes * layers * first;
    t += s.micro_batches *
         (s.sync.prefetch ? std::max(first, gathers - s.micro_batch_compute * mc.comm_overlap) : gathers);
  }
  return t;
}

Work optimizer_work(const DataParallelStep& s, double update_bytes, const std::string& where) {
  const int dp = static_cast<int>(s.dp_members.size());
  const double owned = s.sync.zero > 0 ? s.params / parallel::zero_shard_size(s.sync.zero_group, dp, where) : s.params;
  Work w;
  w.optimizer_bytes = owned * update_bytes + s.params * 8 +
                      (dp > 1 && s.sync.reduce_dtype == DType::BF16 ? s.params * 6 : 0.0);
  return w;
}

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
constexpr double kCheckSeconds = 30.0;  // the memory checks' time budget
constexpr int kShownRejected = 20;      // layouts that do not fit, shown before the ones that do
constexpr int kSameLimit = 50;          // layouts in a row stopped by a backend limit: the model cannot run

// The memory check of one candidate: the model's exact plan, its largest rank against the limit.
void check_memory(const AutoPlanProblem& p, Candidate& c, double limit) {
  c.checked = true;
  MemoryPlanTable plan;
  try {
    plan = p.memory_plan(c);
  } catch (const Error& e) {  // a limit of the backend's kernels the plan meets (e.g. a head size CUDA lacks)
    c.fits = false;
    c.backend_limit = true;
    c.reason = std::string("the model cannot run this layout: ") + e.what();
    return;
  }
  const DeviceNeed need = largest_device_need(plan);
  c.memory = plan.record();
  c.device_need = need.bytes;
  c.fits = need.bytes <= limit;
  if (!c.fits)
    c.reason = fmt::format("rank (pp {}, tp {}) needs {} > {} per rank (largest: {} {})", need.pp_rank, need.tp_rank,
                           human_bytes(need.bytes), human_bytes(limit), need.largest_kind,
                           human_bytes(need.largest_bytes));
}

nlohmann::ordered_json candidate_json(const AutoPlanProblem& p, const Candidate& c, double mfu, size_t position) {
  const Layout& l = c.layout;
  nlohmann::ordered_json j;
  j["rank"] = c.rank > 0 ? nlohmann::ordered_json(c.rank) : nlohmann::ordered_json(nullptr);
  j["position"] = position;  // 1-based in predicted order among every valid layout, fitting or not
  j["deck"] = c.deck;
  j["app"] = p.app;
  j["world"] = p.world;
  j["machine"] = p.machine.name;
  j["layout"] = {{"dp", l.dp},
                 {"tp", l.tp},
                 {"pp", l.pp},
                 {"v", l.v},
                 {"sp", l.sp},
                 {"zero", l.zero},
                 {"zero_group", l.zero_group},
                 {"recompute", models::recompute_name(l.recompute)},
                 {"micro_batch", l.micro_batch},
                 {"grad_dtype", grad_dtype_key(l.grad_dtype)}};
  const double t = c.time.total();
  j["pred_ms"] = t * 1e3;
  j["throughput"] = p.samples_per_step / t;
  j["unit"] = p.unit;
  j["mfu"] = mfu > 0 ? nlohmann::ordered_json(mfu) : nlohmann::ordered_json(nullptr);
  if (c.checked) {
    j["mem_peak_bytes"] = c.device_need;
    nlohmann::ordered_json m;
    for (const auto& [name, value] : memory_fields(c.memory))
      if (name != "rss") m[name] = *value;
    j["memory"] = m;
  } else {
    j["mem_peak_bytes"] = nullptr;
    j["memory"] = nullptr;
  }
  j["fits"] = c.checked && c.fits;
  j["reason"] = c.checked ? c.reason : "not checked";
  j["set"] = c.set;
  j["time_ms"] = {{"compute", c.time.compute * 1e3},       {"tp_comm", c.time.tp_comm * 1e3},
                  {"bubble", c.time.bubble * 1e3},         {"p2p", c.time.p2p * 1e3},
                  {"dp_exposed", c.time.dp_exposed * 1e3}, {"optimizer", c.time.optimizer * 1e3}};
  j["work"] = {{"gemm_flops", c.work.gemm_flops},
               {"gemm_calls", c.work.gemm_calls},
               {"memory_bytes", c.work.memory_bytes},
               {"optimizer_bytes", c.work.optimizer_bytes}};
  return j;
}

std::string short_layout(const Layout& l) {
  return fmt::format("{:>3} {:>3} {:>3} {:>2} {:>2} {:>4} {:>4} {:>9} {:>4} {:>4}", l.dp, l.tp, l.pp, l.v, l.sp ? 1 : 0,
                     l.zero, l.zero_group, models::recompute_name(l.recompute), l.micro_batch,
                     grad_dtype_key(l.grad_dtype));
}

}  // namespace

int run_auto_plan(AutoPlanProblem& p, const AutoPlanOptions& o) {
  const Machine& mc = p.machine;
  const int ranks_on_node = std::min(p.world, mc.devices_per_node);
  const double limit = p.memory_limit_bytes > 0 ? p.memory_limit_bytes : mc.rank_memory_bytes(ranks_on_node);
  const double peak = mc.peak_tflops > 0 || find_device_peaks(mc.device_name) ? mc.peak_at(p.precision) : 0.0;

  std::vector<size_t> order(p.candidates.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return p.candidates[a].time.total() < p.candidates[b].time.total(); });
  const auto deck_it = std::find_if(p.candidates.begin(), p.candidates.end(),
                                    [](const Candidate& c) { return c.deck; });

  // memory in predicted order: until `top` fit and the deck's own layout has its rank (top 0: every candidate), within
  // kCheckSeconds (a large model's plan takes milliseconds, and when nothing fits every candidate would be planned)
  if (deck_it != p.candidates.end()) check_memory(p, *deck_it, limit);
  std::vector<size_t> shown;  // printed in order: the ranked ones and the rejected ones met before the last of them
  int fitted = 0, checked = 0, rejected = 0, same_limit = 0;
  bool timed_out = false, deck_reached = false;
  std::string backend_refusal;  // the backend's limit every layout meets (a head size its kernels lack)
  for (size_t i : order) {
    Candidate& c = p.candidates[i];
    const bool need_more = o.top == 0 || fitted < o.top;
    const bool deck_pending = deck_it != p.candidates.end() && !deck_reached;
    if (!need_more && !deck_pending) break;
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - p.started).count() > kCheckSeconds) {
      timed_out = true;
      break;
    }
    if (!c.checked || c.deck) {
      if (!c.checked) check_memory(p, c, limit);
      ++checked;
    }
    deck_reached = deck_reached || c.deck;
    if (c.fits) c.rank = ++fitted;
    if (need_more && (c.fits || rejected < kShownRejected)) shown.push_back(i);
    if (!c.fits) ++rejected;
    // the backend's limits, layout after layout (their figures differ with TP): the model does not run here at all
    same_limit = c.backend_limit ? same_limit + 1 : 0;
    backend_refusal = same_limit > 0 ? c.reason : "";
    if (same_limit >= kSameLimit && fitted == 0) break;
  }
  auto mfu_of = [&](const Candidate& c) {
    return peak > 0 ? p.flops_per_step / (c.time.total() * p.world * peak * 1e12) : 0.0;
  };
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - p.started).count();

  std::printf("auto plan: %s | world %d | machine %s (%s): %d x %s per node, %s per %s | %s\n", p.deck_path.c_str(),
              p.world, mc.name.c_str(), mc.source.c_str(), mc.devices_per_node, mc.device_name.c_str(),
              human_bytes(mc.memory_gb * kGiB).c_str(), mc.memory_per_node ? "node" : "device", p.precision.c_str());
  std::printf("%zu layouts valid for the deck (%d refused by its rules); %d checked for memory in predicted order "
              "(limit %s per rank%s), %d fit; ranking took %.2f s\n",
              p.candidates.size(), p.invalid, checked, human_bytes(limit).c_str(),
              p.memory_limit_bytes > 0 ? ", train.memory_limit_gb" : "", fitted, seconds);
  if (rejected > kShownRejected)
    std::printf("(%d layouts met before the last one shown do not fit; the first %d are shown)\n", rejected,
                kShownRejected);
  if (timed_out)
    std::printf("(the memory checks stopped after %.0f s: the next candidates in predicted order were not planned)\n",
                kCheckSeconds);
  std::printf("%5s %10s %12s %6s | %8s %8s %8s %8s %8s %8s | %3s %3s %3s %2s %2s %4s %4s %9s %4s %4s | %10s\n", "rank",
              "pred ms", p.unit.c_str(), "MFU", "compute", "tp", "bubble", "p2p", "dp", "optim", "dp", "tp", "pp", "v",
              "sp", "zero", "grp", "recompute", "mb", "grad", "mem peak");
  auto row = [&](const Candidate& c) {
    const double mfu = mfu_of(c);
    std::printf("%5s %10.3f %12.4g %6s | %8.3f %8.3f %8.3f %8.3f %8.3f %8.3f | %s | %10s%s%s\n",
                c.rank > 0 ? std::to_string(c.rank).c_str() : "-", c.time.total() * 1e3,
                p.samples_per_step / c.time.total(), mfu > 0 ? fmt::format("{:.1f}%", 100 * mfu).c_str() : "-",
                c.time.compute * 1e3, c.time.tp_comm * 1e3, c.time.bubble * 1e3, c.time.p2p * 1e3,
                c.time.dp_exposed * 1e3, c.time.optimizer * 1e3, short_layout(c.layout).c_str(),
                c.checked ? human_bytes(c.device_need).c_str() : "?", c.deck ? "  <- the deck's layout" : "",
                c.checked && !c.fits ? ("  does not fit: " + c.reason).c_str() : "");
  };
  for (size_t i : shown) row(p.candidates[i]);
  const bool deck_shown = deck_it != p.candidates.end() &&
                          std::find(shown.begin(), shown.end(), static_cast<size_t>(deck_it - p.candidates.begin())) !=
                              shown.end();
  if (deck_it != p.candidates.end() && !deck_shown) {
    std::printf("...\n");
    row(*deck_it);
  }
  if (deck_it == p.candidates.end())
    std::printf("the deck's own layout is not a candidate: %s\n", p.deck_invalid.c_str());
  const auto best = std::find_if(order.begin(), order.end(), [&](size_t i) { return p.candidates[i].rank == 1; });
  if (best == order.end() && !backend_refusal.empty()) {
    std::printf("no layout runs: the %d layouts checked last all stop at a limit of the backend, the last one: %s\n",
                same_limit, backend_refusal.c_str());
  } else if (best == order.end()) {
    std::printf("no layout fits in %s per rank: a larger world, a machine with more memory, or a smaller model\n",
                human_bytes(limit).c_str());
  } else {
    const Candidate& b = p.candidates[*best];
    std::string args;
    for (const std::string& s : b.set) args += " --set " + s;
    std::printf("best: %s\n  select it with:%s\n", describe_layout(b.layout).c_str(), args.c_str());
    if (deck_it != p.candidates.end() && deck_it->rank != 1)
      std::printf("the deck's layout: %s, predicted %.2fx the best's step time\n",
                  deck_it->rank > 0 ? fmt::format("rank {}", deck_it->rank).c_str()
                  : deck_it->fits   ? "fits, rank not reached within the memory checks' time"
                                    : ("does not fit: " + deck_it->reason).c_str(),
                  deck_it->time.total() / b.time.total());
  }
  std::printf("(predicted: compute from the machine's GEMM rate, per-call overhead and memory rate; TP, pipeline and "
              "data-parallel collectives as alpha-beta rings; the pipeline bubble; not modelled: data loading, "
              "evaluation, checkpoints, stragglers; docs/parallelism.md \"Choosing a layout\")\n");
  if (o.json) {
    std::vector<size_t> position(order.size());
    for (size_t k = 0; k < order.size(); ++k) position[order[k]] = k + 1;
    for (size_t i : shown)
      std::printf("%s\n", candidate_json(p, p.candidates[i], mfu_of(p.candidates[i]), position[i]).dump().c_str());
    if (deck_it != p.candidates.end() && !deck_shown) {
      const size_t d = static_cast<size_t>(deck_it - p.candidates.begin());
      std::printf("%s\n", candidate_json(p, *deck_it, mfu_of(*deck_it), position[d]).dump().c_str());
    }
  }
  return best == order.end() ? 1 : 0;
}

}  // namespace hpct::train
