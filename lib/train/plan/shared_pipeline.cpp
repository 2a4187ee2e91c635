#include "train/plan/shared_pipeline.hpp"

#include <algorithm>
#include <limits>

#include "core/error.hpp"

namespace hpct::train {

double shared_pipeline_seconds(const Machine& mc, const SharedPipeline& p) {
  const int P = p.pp, V = p.virtual_stages, m = p.micro_batches;
  HPCT_CHECK(P >= 1 && V >= 1 && m >= 1 && p.replicas >= 1 && static_cast<int>(p.forward_s.size()) == P &&
                 static_cast<int>(p.backward_s.size()) == P && static_cast<int>(p.comm_s.size()) == P,
             "shared_pipeline_seconds: pp {}, v {}, m {}, replicas {}, {} / {} / {} stage times", P, V, m, p.replicas,
             p.forward_s.size(), p.backward_s.size(), p.comm_s.size());
  std::vector<std::vector<parallel::Action>> plan(static_cast<size_t>(P));
  for (int r = 0; r < P; ++r) plan[static_cast<size_t>(r)] = parallel::make_schedule(p.schedule, P, r, m, V);

  // done[k][j]: when virtual stage k finished micro-batch j's forward (fdone) or backward (bdone); < 0: not yet
  const int K = P * V;
  std::vector<double> fdone(static_cast<size_t>(K * m), -1.0), bdone(static_cast<size_t>(K * m), -1.0);
  auto at = [m](int k, int j) { return static_cast<size_t>(k * m + j); };
  struct Rank {
    size_t next = 0;         // its next action
    bool busy = false;       // an action is under way: its compute, then its communication
    double work = 0;         // compute left of it (seconds alone)
    double comm = 0;         // its communication's length, once the compute is done
    double comm_until = -1;  // the communication under way ends then (< 0: none under way)
  };
  std::vector<Rank> ranks(static_cast<size_t>(P));
  double now = 0;
  size_t left = 0;
  for (const auto& s : plan) left += s.size();

  // An action may start when its input is there: a forward's from the previous virtual stage, a backward's from the
  // next (the last virtual stage's backward follows its own forward, which the rank's order already ensures).
  // Returns when (< 0: not known yet). The messages between stages are priced apart (the planner's p2p part).
  auto ready_at = [&](int r, const parallel::Action& a) {
    const int k = a.chunk * P + r;
    const bool forward = a.op == parallel::Action::Forward;
    if (forward ? k == 0 : k == K - 1) return 0.0;
    return forward ? fdone[at(k - 1, a.micro)] : bdone[at(k + 1, a.micro)];
  };
  auto share = [&](int r, const parallel::Action& a) {  // the action's compute and communication, per chunk
    const size_t i = static_cast<size_t>(r);
    const double f = p.forward_s[i] / V, b = p.backward_s[i] / V, c = p.comm_s[i] / V;
    const double fc = f + b > 0 ? c * f / (f + b) : c / 2;
    return a.op == parallel::Action::Forward ? std::pair{f, fc} : std::pair{b, c - fc};
  };
  while (left > 0) {
    // start what can start now
    for (int r = 0; r < P; ++r) {
      Rank& k = ranks[static_cast<size_t>(r)];
      const auto& s = plan[static_cast<size_t>(r)];
      if (k.busy || k.next >= s.size()) continue;
      const double ready = ready_at(r, s[k.next]);
      if (ready < 0 || ready > now) continue;
      const auto [work, comm] = share(r, s[k.next]);
      k.busy = true;
      k.work = work;
      k.comm = comm;
      k.comm_until = work > 0 ? -1.0 : now + comm;
    }
    // the computing ranks share the cores with each other and, for shared_wait_share of a core each, with the ranks
    // that wait (for an input, in a collective, or done and at the step's end)
    int computing = 0;
    for (const Rank& k : ranks) computing += k.busy && k.work > 0 ? 1 : 0;
    const double contending = p.replicas * (computing + mc.shared_wait_share * (P - computing));
    const double rate = computing > 0 ? 1.0 / mc.slowdown(contending) : 0.0;
    // the next event: a compute finishing, a communication finishing, an input arriving
    double dt = std::numeric_limits<double>::infinity();
    for (int r = 0; r < P; ++r) {
      const Rank& k = ranks[static_cast<size_t>(r)];
      const auto& s = plan[static_cast<size_t>(r)];
      if (k.busy && k.work > 0) dt = std::min(dt, k.work / rate);
      else if (k.busy)
        dt = std::min(dt, std::max(0.0, k.comm_until - now));  // in its communication
      else if (k.next < s.size()) {
        const double ready = ready_at(r, s[k.next]);
        if (ready > now) dt = std::min(dt, ready - now);
      }
    }
    HPCT_CHECK(dt < std::numeric_limits<double>::infinity(),
               "shared_pipeline_seconds: no rank can go on (pp {}, v {}, m {}): the schedule's dependencies do not "
               "resolve",
               P, V, m);
    now += dt;
    for (int r = 0; r < P; ++r) {
      Rank& k = ranks[static_cast<size_t>(r)];
      if (!k.busy) continue;
      if (k.work > 0) {
        k.work -= dt * rate;
        if (k.work <= 1e-12) {  // a picosecond: what rounding leaves of the one that set dt
          k.work = 0;
          k.comm_until = now + k.comm;
        }
      }
      if (k.work == 0 && k.comm_until <= now) {
        const parallel::Action& a = plan[static_cast<size_t>(r)][k.next];
        (a.op == parallel::Action::Forward ? fdone : bdone)[at(a.chunk * P + r, a.micro)] = now;
        k.busy = false;
        ++k.next;
        --left;
      }
    }
  }
  return now;
}

}  // namespace hpct::train
