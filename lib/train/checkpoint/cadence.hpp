#pragma once
// When the step loop saves and stops (docs/contracts.md): signals, train.deadline and the checkpoint cadences, decided
// collectively after every step.
#include <cstdint>

#include "comm/communicator.hpp"
#include "core/timer.hpp"

namespace hpct::train {

struct RunConfig;  // train/loop/run_config.hpp

// The per-step checkpoint and stop decision (docs/contracts.md): SIGUSR1/SIGTERM, train.deadline (with a margin of two
// steps, 1.5 checkpoint writes, what remains of a background write in flight, and 2 s) and checkpoint.every_minutes are
// agreed by one allreduce(MAX) over the world, so every rank saves and stops at the same step; checkpoint.every and
// checkpoint.at_end are local.
class CheckpointCadence {
 public:
  explicit CheckpointCadence(const RunConfig& cfg);
  struct Decision {
    bool save = false, stop = false;
    const char* why = "";  // the reason, for the log: a signal name, "train.deadline", "every_minutes", "every", "end"
    bool save_failed = false;  // some rank found its background save failed: every rank waits for it (and throws)
  };
  // After optimizer step s of steps, which took step_ms; in_flight_s: the estimated remaining seconds of a background
  // write still in flight (a stop must wait for it before its own save); save_failed: this rank found its finished
  // background save failed.
  Decision decide(comm::Communicator& world, int64_t s, int64_t steps, double step_ms, double in_flight_s = 0.0,
                  bool save_failed = false);
  // A save started (restarts the minutes cadence).
  void started();
  // A checkpoint write finished and took `seconds`, snapshot to commit (sizes the deadline margin).
  void finished(double seconds);

 private:
  int64_t every_ = 0, deadline_ = 0;
  double minutes_ = 0.0, last_ckpt_s_ = 0.0;
  bool at_end_ = true;
  Timer since_;
};

}  // namespace hpct::train
