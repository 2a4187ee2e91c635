#include "train/tasks/resnet/resnet_auto_plan.hpp"

#include <algorithm>
#include <numeric>

#include "core/error.hpp"
#include "core/format.hpp"
#include "data/image_dataset.hpp"
#include "train/loop/run_environment.hpp"
#include "train/tasks/resnet/resnet_deck.hpp"
#include "train/tasks/resnet/resnet_plan.hpp"

namespace hpct::train {

StepTime predict_resnet_step(const resnet::ResNetConfig& cfg, const RunConfig& run, int world, bool sync_bn,
                             const Machine& mc, DType act, Work* work_out) {
  const int b = run.train.micro_batch, dp = world;
  const double m = static_cast<double>(micro_batches_per_step(run, dp));
  const int rpn = std::min(world, mc.devices_per_node);
  const std::string precision = precision_name(run.train.precision);
  const resnet::MemoryPlan plan = resnet::memory_plan(cfg, b, act);
  const bool full = run.train.recompute == models::Recompute::Full;
  const double fwd_flops = resnet::forward_flops_per_image(cfg) * b;
  Work mb;
  mb.gemm_flops = fwd_flops * (full ? 4 : 3);
  mb.gemm_calls = 3.0 * cfg.depth * (full ? 4.0 / 3.0 : 1.0);
  mb.memory_bytes = 6.0 * static_cast<double>(plan.activation_bytes) * (full ? 4.0 / 3.0 : 1.0);
  const double mb_compute = mc.compute_seconds(mb, precision, rpn);

  std::vector<int> members(static_cast<size_t>(dp));
  std::iota(members.begin(), members.end(), 0);
  const auto [ranks, nodes] = span_of(members, rpn);
  StepTime st;
  st.compute = m * mb_compute;
  if (sync_bn)  // mean and variance of every BatchNorm forward, their gradients' sums backward: latency-bound
    st.tp_comm = m * 2.0 * cfg.depth * mc.collective_seconds(Collective::AllReduce, 2.0 * 4 * 256, ranks, nodes, rpn);

  DataParallelStep dps;
  dps.sync = run.parallel.sync;
  dps.sync.zero = dp > 1 ? run.parallel.sync.zero : 0;
  dps.dp_members = members;
  dps.ranks_per_node = rpn;
  dps.params = static_cast<double>(plan.num_params);
  dps.micro_batches = m;
  dps.micro_batch_compute = mb_compute;
  dps.act_bytes = static_cast<double>(dtype_size(act));
  dps.layers = cfg.depth;
  dps.full_recompute = full;
  st.dp_exposed = data_parallel_seconds(mc, dps, "deck " + run.deck_path);

  const Work opt = optimizer_work(dps, 20, "deck " + run.deck_path);  // SGD with momentum
  st.optimizer = mc.compute_seconds(opt, precision, rpn);
  if (work_out) {
    *work_out = mb.scaled(m);
    *work_out += opt;
  }
  return st;
}

int auto_plan_resnet(const Config& deck, int world, const AutoPlanOptions& o) {
  const RunConfig deck_run = read_run_config(deck);
  AutoPlanProblem p = auto_plan_problem("train_resnet", "images/s", deck, deck_run, world, o);
  const auto ds = data::ImageDataset::open_header(resolve_data_path(deck.get_string("data.train")));
  const resnet::ResNetConfig cfg = resnet_model_config(deck, ds.channels(), ds.height(), ds.width(), ds.num_classes());
  const bool sync_bn = deck.get_bool("model.sync_bn");
  const int momentum_buffers = deck.get_float("optim.momentum") > 0.0 ? 1 : 0;
  const std::string device = machine_device_key(p.machine);
  const int64_t GB = deck_run.train.global_batch;
  p.samples_per_step = static_cast<double>(GB);
  p.flops_per_step = resnet::training_flops_per_image(cfg) * static_cast<double>(GB);

  auto set_args = [&](const Layout& l) {
    std::vector<std::string> s = {fmt::format("parallel.zero={}", l.zero),
                                  fmt::format("parallel.zero_group={}", l.zero_group),
                                  std::string("train.recompute=") + models::recompute_name(l.recompute),
                                  fmt::format("train.micro_batch={}", l.micro_batch),
                                  std::string("parallel.grad_dtype=") + grad_dtype_key(l.grad_dtype)};
    if (device != deck_run.train.device) s.push_back("train.device=" + device);
    return s;
  };
  std::vector<RunConfig> runs;
  const int dp = world;
  if (GB % dp != 0) {
    ++p.invalid;
  } else {
    for (int zero = 0; zero <= (dp > 1 ? 3 : 0); ++zero) {
      std::vector<int> groups = {0};
      if (zero > 0)
        for (int g : divisors(dp))
          if (g >= 2 && g < dp) groups.push_back(g);
      for (int group : groups)
        for (models::Recompute rc : {models::Recompute::None, models::Recompute::Full})
          for (int mb : divisors(GB / dp))
            for (int bf16 = 0; bf16 <= (dp > 1 ? 1 : 0); ++bf16) {
              Layout l{dp, 1, 1, 1, false, zero, group, rc, mb, bf16 ? DType::BF16 : DType::F32};
              std::vector<std::string> set = set_args(l);
              std::vector<std::string> ov = deck.overrides();
              ov.insert(ov.end(), set.begin(), set.end());
              try {
                const Config c = Config::parse(resnet_deck_schema(), deck.deck_text(), deck.deck_path(), ov);
                RunConfig run = read_run_config(c);
                check_resnet_layout(run);
                Candidate cand;
                cand.layout = l;
                cand.set = std::move(set);
                cand.time = predict_resnet_step(cfg, run, world, sync_bn, p.machine, plan_target(run).act, &cand.work);
                const int deck_zero = dp > 1 ? deck_run.parallel.sync.zero : 0;
                cand.deck = deck_run.parallel.tp == 1 && deck_run.parallel.pp == 1 && deck_zero == zero &&
                            (zero == 0 || deck_run.parallel.sync.zero_group == group) &&
                            deck_run.train.recompute == rc && deck_run.train.micro_batch == mb &&
                            (dp == 1 || (deck_run.parallel.sync.reduce_dtype == DType::BF16) == (bf16 == 1));
                p.candidates.push_back(std::move(cand));
                runs.push_back(std::move(run));
              } catch (const UsageError&) {
                ++p.invalid;
              }
            }
    }
  }
  if (std::none_of(p.candidates.begin(), p.candidates.end(), [](const Candidate& c) { return c.deck; })) {
    try {  // the deck's own layout at this world: the rule it breaks
      check_resnet_layout(deck_run);
      micro_batches_per_step(deck_run, world);
      p.deck_invalid = "not among the layouts enumerated";
    } catch (const UsageError& e) {
      p.deck_invalid = e.what();
    }
  }
  p.memory_plan = [&](const Candidate& c) {
    const RunConfig& run = runs[static_cast<size_t>(&c - p.candidates.data())];
    return plan_resnet_memory(cfg, run, world, sync_bn, momentum_buffers, plan_target(run));
  };
  return run_auto_plan(p, o);
}

}  // namespace hpct::train
