#include "train/tasks/gpt/gpt_auto_plan.hpp"

#include <algorithm>
#include <cmath>

#include "core/error.hpp"
#include "core/format.hpp"
#include "models/gpt/gpt_layout.hpp"
#include "parallel/grid.hpp"
#include "train/plan/shared_pipeline.hpp"
#include "train/tasks/gpt/gpt_deck.hpp"
#include "train/tasks/gpt/gpt_plan.hpp"

namespace hpct::train {
namespace {

// One transformer block's forward on a micro-batch of M = b T tokens at TP t (the rank's shard).
Work block_forward(const gpt::GptConfig& cfg, int t, bool sp, int b, double act_bytes) {
  const double C = cfg.n_embd, T = cfg.seq_len, M = static_cast<double>(b) * T;
  Work w;
  w.gemm(M, 3 * C / t, C);  // QKV
  w.gemm(M, C, C / t);      // attention projection
  w.gemm(M, 4 * C / t, C);  // MLP up
  w.gemm(M, C, 4 * C / t);  // MLP down
  const double heads = static_cast<double>(b) * cfg.n_head / t, hs = C / cfg.n_head;
  const double scores = heads * T * T / 2;  // the causal half
  w.gemm_flops += 2 * 2 * scores * hs;      // S = q k^T and o = P v
  w.gemm_calls += 2;
  w.memory_bytes += scores * 4;  // the softmax's exponentials, priced as 4 bytes a score
  // LayerNorms (2 x 2C), residual adds (2 x 3C): the residual stream, sharded under SP; GELU (2 x 4C / t)
  w.memory_bytes += M * (10 * C / (sp ? t : 1) + 8 * C / t) * act_bytes;
  return w;
}

// Its backward: input and weight gradients of every GEMM (twice the forward's products and calls), attention's
// backward (dP, dS and the three gradients: 2.5 times its forward's products, the exponentials recomputed), and twice
// the memory-bound traffic.
Work block_backward(const Work& fwd, const gpt::GptConfig& cfg, int t, int b) {
  const double T = cfg.seq_len, C = cfg.n_embd;
  const double scores = static_cast<double>(b) * cfg.n_head / t * T * T / 2, attn = 4 * scores * C / cfg.n_head;
  Work w;
  w.gemm_flops = 2 * (fwd.gemm_flops - attn) + 2.5 * attn;
  w.gemm_calls = 2 * (fwd.gemm_calls - 2) + 5;
  w.memory_bytes = 2 * fwd.memory_bytes;
  return w;
}

// The rank's parameters at TP t on a stage (its blocks; the embedding on the first stage; the final LayerNorm and
// the tied embedding's copy on the last).
double stage_params(const gpt::GptConfig& cfg, int t, int pp, const std::vector<gpt::StagePlan>& chunks) {
  const double C = cfg.n_embd;
  double n = 0;
  for (const gpt::StagePlan& ch : chunks) {
    n += ch.num_layers() * (12 * C * C / t + 7 * C / t + 6 * C);
    if (ch.has_embedding) n += static_cast<double>(cfg.padded_vocab) * C / t + static_cast<double>(cfg.seq_len) * C;
    if (ch.has_head) n += 2 * C + (pp > 1 ? static_cast<double>(cfg.padded_vocab) * C / t : 0.0);
  }
  return n;
}

}  // namespace

StepTime predict_gpt_step(const gpt::GptConfig& cfg, const RunConfig& run, int world, const Machine& mc, DType act,
                          Work* work_out) {
  const int tp = run.parallel.tp, pp = run.parallel.pp, v = run.parallel.virtual_stages, b = run.train.micro_batch;
  const bool sp = run.parallel.sp;
  const parallel::Grid grid(world, tp, pp, run.parallel.order, "deck " + run.deck_path);
  const int dp = grid.dp();
  const double m = static_cast<double>(micro_batches_per_step(run, dp));
  const int rpn = std::min(world, mc.devices_per_node);
  const std::string precision = precision_name(run.train.precision);
  const double ab = static_cast<double>(dtype_size(act));
  const double C = cfg.n_embd, M = static_cast<double>(b) * cfg.seq_len, Vp = cfg.padded_vocab;
  const models::Recompute rc = run.train.recompute;

  const auto [tp_ranks, tp_nodes] = span_of(grid.group(parallel::Axis::TP, 0), rpn);
  const int pp_nodes = span_of(grid.group(parallel::Axis::PP, 0), rpn).second;

  const Work fwd = block_forward(cfg, tp, sp, b, ab);
  Work block = fwd;
  block += block_backward(fwd, cfg, tp, b);
  if (rc == models::Recompute::Full) block += fwd;
  if (rc == models::Recompute::Selective) block.memory_bytes += M * (4 * C / (sp ? tp : 1) + 8 * C / tp) * ab;
  const double act_msg = M * C * ab;  // one micro-batch's activations, the TP collectives' buffer
  // per block and pass (forward, backward, the full recompute's forward): two allreduces, or under SP two allgathers
  // and two reduce-scatters (their ring's bytes are the allreduce's, but twice the synchronisations)
  const double passes = 2 + (rc == models::Recompute::Full ? 1 : 0);
  const double block_tp = passes * 2 *
                          (sp ? mc.collective_seconds(Collective::AllGather, act_msg, tp_ranks, tp_nodes, rpn) +
                                    mc.collective_seconds(Collective::ReduceScatter, act_msg, tp_ranks, tp_nodes, rpn)
                              : mc.collective_seconds(Collective::AllReduce, act_msg, tp_ranks, tp_nodes, rpn));

  // per stage: the micro-batch's work and its TP collectives; the slowest stage paces the pipeline
  double slowest = -1, mb_compute = 0, mb_tp = 0, params = 0;
  std::vector<double> stage_compute, stage_tp;  // by pipeline rank
  Work mb_work;
  for (int p = 0; p < pp; ++p) {
    const std::vector<gpt::StagePlan> chunks = gpt::chunk_plans(cfg, pp, p, v);
    Work w;
    double t_tp = 0;
    for (const gpt::StagePlan& ch : chunks) {
      w += block.scaled(ch.num_layers());
      t_tp += ch.num_layers() * block_tp;
      if (ch.has_embedding) {  // gather of wte and wpe rows, their gradients scattered back (fp32)
        w.memory_bytes += M * C * (3 * ab + 2 * ab + 8);
        t_tp += mc.collective_seconds(Collective::AllReduce, act_msg, tp_ranks, tp_nodes, rpn);
      }
      if (ch.has_head) {  // final LayerNorm, logits (M x Vp/t), the loss's softmax over them, and their backward
        w.gemm(M, Vp / tp, C, 3);
        w.memory_bytes += M * (6 * C / (sp ? tp : 1) * ab + Vp / tp * 12);
        t_tp += 2 * mc.collective_seconds(Collective::AllReduce, M * 8, tp_ranks, tp_nodes, rpn);
      }
    }
    const double t_compute = mc.compute_seconds(w, precision, 1);  // the rank alone on its cores
    stage_compute.push_back(t_compute);
    stage_tp.push_back(t_tp);
    if (t_compute + t_tp > slowest) {
      slowest = t_compute + t_tp;
      mb_compute = t_compute;
      mb_tp = t_tp;
      mb_work = w;
    }
    params = std::max(params, stage_params(cfg, tp, pp, chunks));
  }

  // The pipeline: on devices of their own, its critical path, (m + (PP - 1) / V) micro-batches of the slowest stage.
  // Where one node's ranks share its cores (slowdown > 1), ranks waiting in the bubble leave their cores to the ones
  // computing (Open MPI yields when oversubscribed), but the fill, the drain and the schedule's dependencies leave
  // cores idle: the schedule is played out with the cores shared (train/plan/shared_pipeline.hpp). A pipeline over
  // several such nodes (or no pipeline): its path, or the slowest stage's node's work at the shared rate, whichever
  // is longer.
  const double share = mc.slowdown(rpn);
  double pipeline = (m + static_cast<double>(pp - 1) / v) * slowest;
  if (share > 1 && pp > 1 && world <= mc.devices_per_node) {
    SharedPipeline sim;
    sim.schedule = run.parallel.schedule;
    sim.pp = pp;
    sim.virtual_stages = v;
    sim.micro_batches = static_cast<int>(m);
    sim.replicas = world / pp;
    // the forward's share of a block's compute (the rest: backward, and the full recompute's forward)
    const double forward_share = mc.compute_seconds(fwd, precision, 1) / mc.compute_seconds(block, precision, 1);
    for (int p = 0; p < pp; ++p) {
      sim.forward_s.push_back(stage_compute[static_cast<size_t>(p)] * forward_share);
      sim.backward_s.push_back(stage_compute[static_cast<size_t>(p)] * (1 - forward_share));
    }
    sim.comm_s = stage_tp;
    pipeline = shared_pipeline_seconds(mc, sim);
  } else if (share > 1) {
    const double stage_max = *std::max_element(stage_compute.begin(), stage_compute.end());
    pipeline = std::max(pipeline, share * m * stage_max + m * mb_tp);
  }
  StepTime st;
  st.tp_comm = m * mb_tp;
  st.compute = std::min(share * m * mb_compute, pipeline - st.tp_comm);
  st.bubble = pipeline - st.compute - st.tp_comm;
  mb_compute *= share;  // a micro-batch's compute as the gradient sync overlaps it
  if (pp > 1) {
    const gpt::ModelParallel mp{tp, 0, pp, 0, sp, v};
    const double msg = static_cast<double>(gpt::boundary_numel(cfg, mp, b)) * ab;
    st.p2p = (2 * v * m + 2 * (pp - 1)) * mc.collective_seconds(Collective::SendRecv, msg, 2, pp_nodes, rpn);
  }

  // data parallelism
  const parallel::GradSyncOptions& sync = run.parallel.sync;
  DataParallelStep dps;
  dps.sync = sync;
  dps.sync.zero = dp > 1 ? sync.zero : 0;
  dps.dp_members = grid.group(parallel::Axis::DP, 0);
  dps.ranks_per_node = rpn;
  dps.params = params;
  dps.micro_batches = m;
  dps.micro_batch_compute = mb_compute;
  dps.act_bytes = ab;
  dps.layers = std::max(1, cfg.n_layer / pp);
  dps.full_recompute = rc == models::Recompute::Full;
  st.dp_exposed = data_parallel_seconds(mc, dps, "deck " + run.deck_path);
  const Work opt = optimizer_work(dps, 28, "deck " + run.deck_path);  // AdamW
  st.optimizer = mc.compute_seconds(opt, precision, rpn);
  if (work_out) {
    *work_out = mb_work.scaled(m);
    *work_out += opt;
  }
  return st;
}

namespace {

std::string set_value(bool b) { return b ? "true" : "false"; }

// The --set arguments of a layout (and the machine's device when the deck names another).
std::vector<std::string> gpt_set_args(const Layout& l, const std::string& device, const std::string& deck_device) {
  std::vector<std::string> s = {fmt::format("parallel.tp={}", l.tp),
                                fmt::format("parallel.pp={}", l.pp),
                                fmt::format("parallel.virtual_stages={}", l.v),
                                "parallel.sp=" + set_value(l.sp),
                                fmt::format("parallel.zero={}", l.zero),
                                fmt::format("parallel.zero_group={}", l.zero_group),
                                std::string("train.recompute=") + models::recompute_name(l.recompute),
                                fmt::format("train.micro_batch={}", l.micro_batch),
                                std::string("parallel.grad_dtype=") + grad_dtype_key(l.grad_dtype)};
  if (l.pp > 1) s.push_back("parallel.schedule=1f1b");
  if (device != deck_device) s.push_back("train.device=" + device);
  return s;
}

Layout layout_of(const RunConfig& run, int world) {
  Layout l;
  l.tp = run.parallel.tp;
  l.pp = run.parallel.pp;
  l.dp = world / (l.tp * l.pp);
  l.v = run.parallel.virtual_stages;
  l.sp = run.parallel.sp;
  l.zero = l.dp > 1 ? run.parallel.sync.zero : 0;
  l.zero_group = run.parallel.sync.zero_group;
  l.recompute = run.train.recompute;
  l.micro_batch = run.train.micro_batch;
  l.grad_dtype = l.dp > 1 ? run.parallel.sync.reduce_dtype : DType::F32;
  return l;
}

bool same_layout(const Layout& a, const Layout& b) {
  return a.dp == b.dp && a.tp == b.tp && a.pp == b.pp && a.v == b.v && a.sp == b.sp && a.zero == b.zero &&
         (a.zero == 0 || a.zero_group == b.zero_group || (a.zero_group == 0 && b.zero_group == a.dp) ||
          (b.zero_group == 0 && a.zero_group == b.dp)) &&
         a.recompute == b.recompute && a.micro_batch == b.micro_batch && a.grad_dtype == b.grad_dtype;
}

}  // namespace

int auto_plan_gpt(const Config& deck, int world, const AutoPlanOptions& o) {
  const gpt::GptConfig cfg = gpt_model_config(deck);
  const RunConfig deck_run = read_run_config(deck);
  const AttentionImpl attention = gpt_attention(deck);
  AutoPlanProblem p = auto_plan_problem("train_gpt", "tokens/s", deck, deck_run, world, o);
  const std::string device = machine_device_key(p.machine);
  const int64_t GB = deck_run.train.global_batch;
  p.samples_per_step = static_cast<double>(GB) * cfg.seq_len;
  p.flops_per_step = gpt::flops_per_token(cfg) * p.samples_per_step;

  // the deck's own layout, or why it is not a candidate at this world
  std::optional<Layout> deck_layout;
  try {
    Config c = Config::parse(gpt_deck_schema(), deck.deck_text(), deck.deck_path(), [&] {
      std::vector<std::string> ov = deck.overrides();
      if (deck_run.train.device != device) ov.push_back("train.device=" + device);
      return ov;
    }());
    const RunConfig run = read_run_config(c);
    validate_gpt_layout(cfg, run);
    predict_gpt_step(cfg, run, world, p.machine, plan_target(run).act);
    deck_layout = layout_of(run, world);
  } catch (const UsageError& e) {
    p.deck_invalid = e.what();
  }

  // The deck's rules decide what is valid: each structural layout (the grid, virtual stages, SP, ZeRO stage and
  // group) is read through the deck's schema and checks once; recompute and the gradient dtype are free of cross-key
  // rules and vary on the typed config, as does the micro-batch, whose rules micro_batches_per_step holds.
  std::vector<RunConfig> runs;  // by candidate: the run each layout's memory plan is made for
  const std::vector<models::Recompute> recomputes = {models::Recompute::None, models::Recompute::Selective,
                                                     models::Recompute::Full};
  for (int tp : divisors(world))
    for (int pp : divisors(world / tp)) {
      const int dp = world / (tp * pp);
      if (GB % dp != 0) {  // the global batch does not split over the DP ranks
        ++p.invalid;
        continue;
      }
      for (int v = 1; v <= (pp > 1 ? 8 : 1); ++v)
        for (int sp = 0; sp <= (tp > 1 ? 1 : 0); ++sp)
          for (int zero = 0; zero <= (dp > 1 ? 3 : 0); ++zero) {
            std::vector<int> groups = {0};
            if (zero > 0)
              for (int g : divisors(dp))
                if (g >= 2 && g < dp) groups.push_back(g);
            for (int group : groups) {
              Layout l{dp, tp, pp, v, sp == 1, zero, group, models::Recompute::None, 1, DType::F32};
              std::optional<RunConfig> structural;
              try {
                std::vector<std::string> ov = deck.overrides();
                for (const std::string& a : gpt_set_args(l, device, deck_run.train.device)) ov.push_back(a);
                const Config c = Config::parse(gpt_deck_schema(), deck.deck_text(), deck.deck_path(), ov);
                structural = read_run_config(c);
                validate_gpt_layout(cfg, *structural);
                parallel::Grid(world, tp, pp, structural->parallel.order, "deck " + deck.deck_path());
              } catch (const UsageError&) {
                ++p.invalid;
                continue;
              }
              for (models::Recompute rc : recomputes)
                for (int mb : divisors(GB / dp))
                  for (int bf16 = 0; bf16 <= (dp > 1 ? 1 : 0); ++bf16) {
                    l.recompute = rc;
                    l.micro_batch = mb;
                    l.grad_dtype = bf16 ? DType::BF16 : DType::F32;
                    RunConfig run = *structural;
                    run.train.recompute = rc;
                    run.train.micro_batch = mb;
                    run.parallel.sync.reduce_dtype = l.grad_dtype;
                    try {
                      micro_batches_per_step(run, dp);
                    } catch (const UsageError&) {  // e.g. the interleaved schedule's whole groups of pp
                      ++p.invalid;
                      continue;
                    }
                    Candidate cand;
                    cand.layout = l;
                    cand.set = gpt_set_args(l, device, deck_run.train.device);
                    cand.time = predict_gpt_step(cfg, run, world, p.machine, plan_target(run).act, &cand.work);
                    cand.deck = deck_layout && same_layout(*deck_layout, l);
                    p.candidates.push_back(std::move(cand));
                    runs.push_back(std::move(run));
                  }
            }
          }
    }
  p.memory_plan = [&](const Candidate& c) {
    const RunConfig& run = runs[static_cast<size_t>(&c - p.candidates.data())];
    return plan_gpt_memory(cfg, run, world, plan_target(run), attention, /*first_tp_rank_only=*/true);
  };
  return run_auto_plan(p, o);
}

}  // namespace hpct::train
