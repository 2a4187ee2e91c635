#pragma once
// A pipeline whose ranks share a node's cores, played out action by action (the layout planner's model of a pipeline
// on an oversubscribed CPU node; docs/parallelism.md "Choosing a layout").
//
// On devices of their own a pipeline's step is its critical path, (m + (p - 1) / v) micro-batches of the slowest
// stage. Where the ranks share cores, a rank waiting in the bubble gives its core to the ranks that compute, so the
// step is nearer the node's work at the shared rate, but not all of it: in the fill and drain, and wherever the
// schedule's dependencies leave fewer runnable ranks than cores, cores idle. Neither bound holds then; this plays the
// schedule (parallel::make_schedule, the executor's own action order) with the ranks' compute shared: while n ranks of
// the node compute and w wait, each computing one progresses at 1 / slowdown(n + shared_wait_share w) of its speed
// alone (a waiting rank polls MPI and still takes part of a core).
#include <vector>

#include "parallel/pipeline_schedule.hpp"
#include "train/plan/machine.hpp"

namespace hpct::train {

struct SharedPipeline {
  parallel::ScheduleKind schedule = parallel::ScheduleKind::OneFOneB;
  int pp = 1, virtual_stages = 1, micro_batches = 1;
  int replicas = 1;  // ranks of the node that run each stage in lockstep (its DP and TP peers on the node)
  // per pipeline rank: one micro-batch's forward and backward compute over all its chunks, alone on a core
  // (seconds), and the rank's communication per micro-batch (TP collectives; seconds, not shared: a rank in a
  // collective leaves its core), split between forward and backward in proportion to their compute
  std::vector<double> forward_s, backward_s, comm_s;
};

// The step's pipeline seconds (first action to the last rank's last), every rank starting at 0.
double shared_pipeline_seconds(const Machine& mc, const SharedPipeline& p);

}  // namespace hpct::train
