// The layout planner (train/plan/auto_plan.hpp, machine.hpp, tasks/gpt/gpt_auto_plan.hpp): machine files and their
// errors, the alpha-beta collectives and the compute model, and what ranks the GPT's layouts (recompute, the bubble
// with virtual stages, the micro-batch against the per-call overhead, placement across nodes, the FLOP count).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>

#include <unistd.h>

#include "core/error.hpp"
#include "models/gpt/gpt.hpp"
#include "train/loop/run_config.hpp"
#include "train/plan/auto_plan.hpp"
#include "train/plan/machine.hpp"
#include "train/plan/shared_pipeline.hpp"
#include "train/tasks/gpt/gpt_auto_plan.hpp"
#include "train/tasks/gpt/gpt_deck.hpp"

namespace hpct::train {
namespace {

namespace fs = std::filesystem;

const std::string kMachine = R"(
[machine]
name = "test"
device = "cuda"
device_name = "NVIDIA H100 80GB HBM3"
devices_per_node = 4
memory_gb = 80.0
[compute]
gemm_efficiency = 0.5
kernel_overhead_us = 10.0
memory_gbs = 1000.0
[intra]
bandwidth_gbs = 100.0
latency_us = 2.0
[inter]
bandwidth_gbs = 10.0
latency_us = 5.0
)";

// ctest runs each case as its own process, several at once: a directory per process keeps one case from reading a
// file another is rewriting. It goes when the process ends.
struct MachineDir {
  fs::path path = fs::temp_directory_path() / ("hpct_test_auto_plan_" + std::to_string(::getpid()));
  ~MachineDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

std::string write_machine(const std::string& name, const std::string& text) {
  static const MachineDir machine_dir;
  const fs::path& dir = machine_dir.path;
  fs::create_directories(dir);
  const fs::path p = dir / (name + ".toml");
  std::ofstream(p) << text;
  return p.string();
}

std::string usage_message(const std::function<void()>& f) {
  try {
    f();
  } catch (const UsageError& e) {
    return e.what();
  }
  return "no UsageError";
}

TEST(Machine, LoadsAFileAndItsDefaults) {
  const Machine m = load_machine(write_machine("ok", kMachine));
  EXPECT_EQ(m.name, "test");
  EXPECT_EQ(m.device, Device::CUDA);
  EXPECT_EQ(m.devices_per_node, 4);
  EXPECT_FALSE(m.memory_per_node);
  EXPECT_DOUBLE_EQ(m.rank_memory_bytes(4), 80.0 * 1024 * 1024 * 1024);
  EXPECT_DOUBLE_EQ(m.peak_at("bf16"), 989.5);  // the peak table's H100 entry
  EXPECT_DOUBLE_EQ(m.slowdown(4), 1.0);
}

TEST(Machine, ErrorsNameTheKeyOrThePresets) {
  std::string bad = kMachine;
  bad.replace(bad.find("memory_gbs"), 10, "memory_gbz");
  EXPECT_NE(usage_message([&] { load_machine(write_machine("bad_key", bad)); }).find("memory_gbz"), std::string::npos);
  const std::string missing = usage_message([] { load_machine("no_such_machine_preset"); });
  EXPECT_NE(missing.find("no such preset"), std::string::npos) << missing;
  EXPECT_NE(missing.find("h100_dgx"), std::string::npos) << missing;  // the presets are listed
  std::string lists = kMachine + "ranks = [2.0, 4.0]\nbandwidth_by_ranks = [1.0]\nlatency_by_ranks = [1.0, 2.0]\n";
  EXPECT_NE(usage_message([&] { load_machine(write_machine("lists", lists)); }).find("inter.ranks has 2 entries"),
            std::string::npos);
  std::string no_peak = kMachine;
  no_peak.replace(no_peak.find("NVIDIA H100 80GB HBM3"), 21, "Unknown Accelerator 9");
  const Machine m = load_machine(write_machine("no_peak", no_peak));
  EXPECT_NE(usage_message([&] { m.peak_at("bf16"); }).find("compute.peak_tflops"), std::string::npos);
}

TEST(Machine, PresetsLoad) {
  for (const char* name : {"h100_dgx", "a100_dgx", "this_cpu"}) {
    const Machine m = load_machine(name);
    EXPECT_EQ(m.name, name);
    EXPECT_GT(m.memory_gb, 0);
  }
}

TEST(Machine, RingCollectives) {
  const Machine m = load_machine(write_machine("ok", kMachine));
  const double n = 1e8, bw = 100e9, a = 2e-6;
  EXPECT_NEAR(m.collective_seconds(Collective::AllReduce, n, 4, 1), 2 * 0.75 * n / bw + 6 * a, 1e-12);
  EXPECT_NEAR(m.collective_seconds(Collective::ReduceScatter, n, 4, 1), 0.75 * n / bw + 3 * a, 1e-12);
  EXPECT_NEAR(m.collective_seconds(Collective::AllGather, n, 4, 1), 0.75 * n / bw + 3 * a, 1e-12);
  EXPECT_NEAR(m.collective_seconds(Collective::SendRecv, n, 2, 1), n / bw + a, 1e-12);
  EXPECT_NEAR(m.collective_seconds(Collective::SendRecv, n, 2, 2), n / 10e9 + 5e-6, 1e-12);
  EXPECT_EQ(m.collective_seconds(Collective::AllReduce, n, 1, 1), 0.0);
  // 8 ranks on 2 nodes: the in-node reduce-scatter and allgather, then the nodes' ring on a quarter each
  const double hier = 2 * (0.75 * n / bw + 3 * a) + (2 * 0.5 * (n / 4) / 10e9 + 2 * 5e-6);
  EXPECT_NEAR(m.collective_seconds(Collective::AllReduce, n, 8, 2), hier, 1e-12);
}

TEST(Machine, PerCountFitsAndSlowdown) {
  Machine m = load_machine(write_machine("ok", kMachine));
  m.intra.ranks = {2, 8};
  m.intra.bandwidth_by_ranks = {50.0, 5.0};
  m.intra.latency_by_ranks = {1.0, 9.0};
  EXPECT_DOUBLE_EQ(m.intra.at(2).first, 50e9);
  EXPECT_DOUBLE_EQ(m.intra.at(3).first, 50e9);  // nearest count
  EXPECT_DOUBLE_EQ(m.intra.at(5).first, 5e9);   // a tie takes the larger
  EXPECT_DOUBLE_EQ(m.intra.at(16).second, 9e-6);
  m.shared_ranks = {1, 2, 4};
  m.shared_slowdown = {1.0, 1.2, 2.4};
  EXPECT_DOUBLE_EQ(m.slowdown(1), 1.0);
  EXPECT_DOUBLE_EQ(m.slowdown(3), 1.8);
  EXPECT_DOUBLE_EQ(m.slowdown(8), 2.4);  // the last one's beyond it
  // where ranks share cores, a collective waits for a descheduled partner with probability 1 - 1 / slowdown
  m.shared_sync_us = 1000.0;
  const double ring = m.collective_seconds(Collective::AllReduce, 1e6, 2, 1, 1);
  EXPECT_NEAR(m.collective_seconds(Collective::AllReduce, 1e6, 2, 1, 2) - ring, 1e-3 * (1 - 1 / 1.2), 1e-12);
  // and a ring measured with its own ranks on the node is slower by slowdown(node) / slowdown(ring) where more share
  // the cores: a pair among 4 ranks gets half the core time it had alone (2.4 / 1.2)
  const double pair = m.collective_seconds(Collective::SendRecv, 1e6, 2, 1, 1);
  EXPECT_NEAR(m.collective_seconds(Collective::SendRecv, 1e6, 2, 1, 4), 2 * pair + 1e-3 * (1 - 1 / 2.4), 1e-12);
  const Work w{2e12, 100, 1e9};
  EXPECT_NEAR(m.compute_seconds(w, "bf16", 2), 1.2 * (2e12 / (989.5e12 * 0.5) + 100 * 10e-6 + 1e9 / 1e12), 1e-12);
}

TEST(Machine, PerOperationFitsOptimizerRateAndOverlap) {
  std::string text = kMachine + "ranks = [2.0, 4.0]\nbandwidth_by_ranks = [10.0, 5.0]\nlatency_by_ranks = [1.0, 1.0]\n";
  Machine m = load_machine(write_machine("ops_absent", text));
  // without fits of their own, reduce-scatter and allgather follow the allreduce's ring: half its time
  EXPECT_NEAR(2 * m.collective_seconds(Collective::ReduceScatter, 1e8, 2, 2),
              m.collective_seconds(Collective::AllReduce, 1e8, 2, 2), 1e-12);
  EXPECT_DOUBLE_EQ(m.comm_overlap, 1.0);
  EXPECT_DOUBLE_EQ(m.optimizer_gbs, 0.0);
  const Work opt{0, 0, 0, 1e9};
  EXPECT_NEAR(m.compute_seconds(opt, "bf16", 1), 1e9 / 1e12, 1e-15);  // no optimizer rate: the memory rate
  text += "reduce_scatter_bandwidth_by_ranks = [2.0, 1.0]\nreduce_scatter_latency_by_ranks = [3.0, 3.0]\n";
  std::string file = text;
  file.replace(file.find("memory_gbs = 1000.0"), 19, "memory_gbs = 1000.0\noptimizer_gbs = 4000.0\ncomm_overlap = 0.0");
  m = load_machine(write_machine("ops", file));
  // two ranks on two nodes: one ring on the inter-node link, whose lists these are
  EXPECT_NEAR(m.collective_seconds(Collective::ReduceScatter, 1e8, 2, 2), 0.5 * 1e8 / 2e9 + 3e-6, 1e-12);
  EXPECT_NEAR(m.collective_seconds(Collective::AllGather, 1e8, 2, 2), 0.5 * 1e8 / 10e9 + 1e-6, 1e-12);
  EXPECT_NEAR(m.compute_seconds(opt, "bf16", 1), 1e9 / 4e12, 1e-15);
  EXPECT_DOUBLE_EQ(m.comm_overlap, 0.0);
  // a list without its partner, or of another length than ranks, is refused by name
  const std::string half = text.substr(0, text.find("reduce_scatter_latency_by_ranks"));
  EXPECT_NE(usage_message([&] {
              load_machine(write_machine("ops_half", half));
            }).find("inter.reduce_scatter_bandwidth_by_ranks has 2 entries"),
            std::string::npos);
}

// A machine whose 8 ranks share 2 cores: one or two ranks run at full speed, k > 2 at k / 2 of it.
Machine two_cores() {
  Machine m = load_machine(write_machine("ok", kMachine));
  m.shared_ranks = {1, 2, 4, 8};
  m.shared_slowdown = {1.0, 1.0, 2.0, 4.0};
  return m;
}

SharedPipeline uniform_pipeline(int pp, int v, int m, double f, double b) {
  SharedPipeline p;
  p.pp = pp;
  p.virtual_stages = v;
  p.micro_batches = m;
  p.forward_s.assign(static_cast<size_t>(pp), f);
  p.backward_s.assign(static_cast<size_t>(pp), b);
  p.comm_s.assign(static_cast<size_t>(pp), 0.0);
  return p;
}

TEST(SharedPipeline, OnCoresOfTheirOwnItIsTheSchedulesCriticalPath) {
  const Machine gpu = load_machine(write_machine("ok", kMachine));  // slowdown 1 at every count
  for (parallel::ScheduleKind kind : {parallel::ScheduleKind::OneFOneB, parallel::ScheduleKind::GPipe}) {
    SharedPipeline p = uniform_pipeline(4, 1, 8, 1.0, 2.0);
    p.schedule = kind;
    EXPECT_NEAR(shared_pipeline_seconds(gpu, p), (8 + 3) * 3.0, 1e-9);  // (m + p - 1)(F + B)
  }
  // interleaved: (v m + p - 1)(F + B) / v
  EXPECT_NEAR(shared_pipeline_seconds(gpu, uniform_pipeline(4, 2, 8, 1.0, 2.0)), (16 + 3) * 3.0 / 2, 1e-9);
  // a stage twice as slow paces the pipeline: (m - 1) of its micro-batches after the fill through it
  SharedPipeline slow = uniform_pipeline(2, 1, 4, 1.0, 2.0);
  slow.forward_s[1] = 2.0;
  slow.backward_s[1] = 4.0;
  EXPECT_NEAR(shared_pipeline_seconds(gpu, slow), 1.0 + 4 * 6.0 + 2.0, 1e-9);
  // communication is time the rank holds, not compute it shares
  SharedPipeline comm = uniform_pipeline(1, 1, 3, 1.0, 2.0);
  comm.comm_s = {0.5};
  EXPECT_NEAR(shared_pipeline_seconds(gpu, comm), 3 * 3.5, 1e-9);
}

TEST(SharedPipeline, SharedCoresLieBetweenTheNodesWorkAndTheSerialSum) {
  const Machine cpu = two_cores();
  // four stages on two cores: at best the node's work over the two cores, 4 x 8 x 3 / 2 = 48; the fill and drain,
  // where fewer than two ranks can run, leave a core idle, so more; never the serial 96
  const double t = shared_pipeline_seconds(cpu, uniform_pipeline(4, 1, 8, 1.0, 2.0));
  EXPECT_GT(t, 48.0 + 1.0);
  EXPECT_LT(t, 60.0);
  // ranks waiting for their input that still poll keep part of a core from the computing ones: slower; a waiting
  // rank as busy as a computing one leaves every computing rank half a core: the critical path at half speed
  Machine polling = cpu;
  polling.shared_wait_share = 0.25;
  EXPECT_GT(shared_pipeline_seconds(polling, uniform_pipeline(4, 1, 8, 1.0, 2.0)), t);
  polling.shared_wait_share = 1.0;
  EXPECT_NEAR(shared_pipeline_seconds(polling, uniform_pipeline(4, 1, 8, 1.0, 2.0)), (8 + 3) * 3.0 * 2, 1e-9);
  // one rank per core: the plain critical path
  EXPECT_NEAR(shared_pipeline_seconds(cpu, uniform_pipeline(2, 1, 8, 1.0, 2.0)), (8 + 1) * 3.0, 1e-9);
  // replicas share the cores too: two pipelines of two stages run as one of four ranks' work, (8 + 1) x 3 x 2 at
  // most (every rank always runnable would be 2 x 2 x 8 x 3 / 2 = 48)
  SharedPipeline twice = uniform_pipeline(2, 1, 8, 1.0, 2.0);
  twice.replicas = 2;
  const double t2 = shared_pipeline_seconds(cpu, twice);
  EXPECT_GE(t2, 48.0 - 1e-9);
  EXPECT_LE(t2, (8 + 1) * 3.0 * 2 + 1e-9);
}

const std::string kGptDeck = R"(
[model]
n_layer = 8
n_head = 8
n_embd = 512
seq_len = 512
vocab_size = 1000
[data]
train = "t.bin"
val = "v.bin"
[train]
steps = 10
global_batch = 64
micro_batch = 4
precision = "bf16"
device = "cuda"
)";

struct Predicted {
  StepTime t;
  Work w;
};

Predicted predict(int world, const std::vector<std::string>& sets, const Machine& m) {
  const Config deck = Config::parse(gpt_deck_schema(), kGptDeck, "t.toml", sets);
  const RunConfig run = read_run_config(deck);
  Predicted p;
  p.t = predict_gpt_step(gpt_model_config(deck), run, world, m, DType::BF16, &p.w);
  return p;
}

TEST(GptPrediction, OneRankIsItsComputeAndCountsTheModelsFlops) {
  const Machine m = load_machine(write_machine("ok", kMachine));
  const Predicted p = predict(1, {}, m);
  EXPECT_EQ(p.t.tp_comm + p.t.bubble + p.t.p2p + p.t.dp_exposed, 0.0);
  EXPECT_NEAR(p.t.compute + p.t.optimizer, m.compute_seconds(p.w, "bf16", 1), 1e-12);
  // the GEMM FLOPs against the trainer's 6N + 12LCT count: the same products, attention's over the causal half only
  const Config deck = Config::parse(gpt_deck_schema(), kGptDeck, "t.toml");
  const double model = gpt::flops_per_token(gpt_model_config(deck)) * 64 * 512;
  EXPECT_GT(p.w.gemm_flops / model, 0.85);
  EXPECT_LT(p.w.gemm_flops / model, 1.0);
}

TEST(GptPrediction, RecomputeCostsAForward) {
  const Machine m = load_machine(write_machine("ok", kMachine));
  const double none = predict(1, {}, m).t.compute;
  const double selective = predict(1, {"train.recompute=selective"}, m).t.compute;
  const double full = predict(1, {"train.recompute=full"}, m).t.compute;
  EXPECT_LT(none, selective);
  EXPECT_LT(selective, full);
  EXPECT_GT(full / none, 1.2);  // about a third more compute (the layers' forward again), the head's excepted
  EXPECT_LT(full / none, 1.34);
}

TEST(GptPrediction, VirtualStagesShrinkTheBubble) {
  const Machine m = load_machine(write_machine("ok", kMachine));
  const StepTime v1 = predict(2, {"parallel.pp=2"}, m).t;
  const StepTime v2 = predict(2, {"parallel.pp=2", "parallel.virtual_stages=2"}, m).t;
  EXPECT_GT(v1.bubble, 0.0);
  EXPECT_NEAR(v2.bubble / v1.bubble, 0.5, 0.1);  // (PP - 1) / V of a micro-batch, the slowest stage's
  EXPECT_GT(v2.p2p, v1.p2p);                     // twice the boundary crossings
}

TEST(GptPrediction, LargerMicroBatchesPayFewerCallOverheads) {
  Machine m = load_machine(write_machine("ok", kMachine));
  m.kernel_overhead_us = 1000.0;  // launch-bound: the number of calls decides
  const Predicted small = predict(1, {"train.micro_batch=1"}, m), large = predict(1, {"train.micro_batch=16"}, m);
  EXPECT_NEAR(small.w.gemm_calls / large.w.gemm_calls, 16.0, 1e-9);
  EXPECT_NEAR(small.w.gemm_flops, large.w.gemm_flops, 1e-6 * large.w.gemm_flops);
  EXPECT_GT(small.t.compute, 5 * large.t.compute);
}

TEST(GptPrediction, TensorParallelCollectivesAcrossNodesCostMore) {
  Machine m = load_machine(write_machine("ok", kMachine));
  const StepTime in_node = predict(4, {"parallel.tp=4"}, m).t;
  m.devices_per_node = 2;  // the TP group now spans two nodes
  const StepTime across = predict(4, {"parallel.tp=4"}, m).t;
  EXPECT_GT(in_node.tp_comm, 0.0);
  EXPECT_GT(across.tp_comm, 2 * in_node.tp_comm);
  // sequence parallelism: the same collective bytes, the residual stream's elementwise work sharded
  const StepTime sp = predict(4, {"parallel.tp=4", "parallel.sp=true"}, load_machine(write_machine("ok", kMachine))).t;
  EXPECT_NEAR(sp.tp_comm, in_node.tp_comm, 1e-12);
  EXPECT_LT(sp.compute, in_node.compute);
}

TEST(GptPrediction, DataParallelTerms) {
  const Machine m = load_machine(write_machine("ok", kMachine));
  const StepTime overlap = predict(4, {}, m).t;
  const StepTime exposed = predict(4, {"parallel.overlap=false"}, m).t;
  EXPECT_GT(exposed.dp_exposed, overlap.dp_exposed);
  const StepTime z1 = predict(4, {"parallel.zero=1"}, m).t;
  EXPECT_LT(z1.optimizer, overlap.optimizer);  // a quarter of the update
  EXPECT_GT(z1.dp_exposed, 0.0);               // the parameter allgather after the step is never hidden
  const StepTime bf16 = predict(4, {"parallel.zero=1", "parallel.grad_dtype=bf16"}, m).t;
  EXPECT_LT(bf16.dp_exposed, z1.dp_exposed);
}

TEST(AutoPlan, Divisors) {
  EXPECT_EQ(divisors(12), (std::vector<int>{1, 2, 3, 4, 6, 12}));
  EXPECT_EQ(divisors(1), (std::vector<int>{1}));
}

TEST(AutoPlan, NothingFitsExitsOne) {
  std::string tiny = kMachine;
  tiny.replace(tiny.find("memory_gb = 80.0"), 16, "memory_gb = 0.001");
  const Config deck = Config::parse(gpt_deck_schema(), kGptDeck, "t.toml");
  AutoPlanOptions o;
  o.machine = write_machine("tiny", tiny);
  o.top = 3;
  EXPECT_EQ(auto_plan_gpt(deck, 4, o), 1);
  o.machine = write_machine("ok", kMachine);
  EXPECT_EQ(auto_plan_gpt(deck, 4, o), 0);
}

}  // namespace
}  // namespace hpct::train
