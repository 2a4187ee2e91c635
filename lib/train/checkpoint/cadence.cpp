#include "train/checkpoint/cadence.hpp"

#include "train/loop/run_config.hpp"
#include "train/loop/run_environment.hpp"
#include "train/loop/stop_signals.hpp"

namespace hpct::train {

CheckpointCadence::CheckpointCadence(const RunConfig& cfg)
    : every_(cfg.checkpoint.every),
      deadline_(cfg.train.deadline),
      minutes_(cfg.checkpoint.every_minutes),
      at_end_(cfg.checkpoint.at_end) {}

CheckpointCadence::Decision CheckpointCadence::decide(comm::Communicator& world, int64_t s, int64_t steps,
                                                      double step_ms, double in_flight_s, bool save_failed) {
  // signal, deadline near, minutes cadence due, a background save failed
  int32_t flags[4] = {stop_signal_received(), 0, 0, save_failed ? 1 : 0};
  if (deadline_ > 0) {
    const double margin = 2.0 * step_ms / 1e3 + 1.5 * last_ckpt_s_ + in_flight_s + 2.0;
    flags[1] = unix_now() + margin >= static_cast<double>(deadline_) ? 1 : 0;
  }
  if (minutes_ > 0) flags[2] = since_.seconds() >= minutes_ * 60.0 ? 1 : 0;
  world.allreduce(flags, 4, DType::I32, comm::ReduceOp::Max, "stop / checkpoint decision");
  Decision d;
  d.save_failed = flags[3] != 0;
  d.stop = (flags[0] != 0 || flags[1] != 0) && s < steps;
  const bool every = every_ > 0 && s % every_ == 0;
  d.why = flags[0]   ? signal_name(flags[0])
          : flags[1] ? "train.deadline"
          : flags[2] ? "every_minutes"
          : every    ? "every"
                     : "end";
  d.save = d.stop || flags[2] || every || (s == steps && at_end_);
  return d;
}

void CheckpointCadence::started() { since_.reset(); }

void CheckpointCadence::finished(double seconds) { last_ckpt_s_ = seconds; }

}  // namespace hpct::train
