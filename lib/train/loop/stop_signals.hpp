#pragma once
// Preemption: SIGUSR1 / SIGTERM ask the job to checkpoint and exit with code 3 (docs/contracts.md). The
// handlers only set a flag; the trainer agrees on it once per step with one allreduce(MAX) together
// with the deadline and the minutes cadence, so every rank checkpoints at the same step.
namespace hpct::train {

void install_stop_signal_handlers();  // SIGUSR1, SIGTERM
int stop_signal_received();           // 0, or the signal number last received
const char* signal_name(int sig);

}  // namespace hpct::train
