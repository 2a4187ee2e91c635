#pragma once
// Which of cuDNN's deterministic algorithms each convolution runs (docs/cuda.md, "Convolution algorithms"). Without a
// table the CUDA backend runs, per shape and phase, the first of cuDNN's heuristic candidates whose workspace fits
// (cuda/cuda_resnet.cu). conv2d_time_algorithms (kernels.hpp) times those candidates on the device; a ConvAlgorithms
// table holds the choice made from the times, per shape and phase, and reaches the backend through
// ExecContext::conv_algorithms. The table is plain host data (this file needs no CUDA): the run keeps it in its output
// directory (train/tasks/resnet/conv_algorithm_choice.hpp), so that a resumed run, or a rerun given the file, runs the same
// algorithms and reproduces itself bit for bit. The CPU backend has one way to run each convolution and never reads it.
// C++17 (included by the CUDA translation units).
#include <array>
#include <cstddef>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "kernels/exec_context.hpp"
#include "tensor/tensor.hpp"

namespace hpct::kernels {

// One convolution as the table knows it. 16-bit storage runs one math whatever train.precision says (cuDNN's
// tensor-core products on the 16-bit tensors): its key records the storage's own precision (BF16 or FP16).
struct ConvAlgoKey {
  int N = 0, C = 0, H = 0, W = 0, OC = 0, KH = 0, KW = 0, stride = 0, pad = 0;
  DType storage = DType::F32;
  Precision precision = Precision::FP32;
  bool channels_last = false;

  bool operator<(const ConvAlgoKey& o) const;
  bool operator==(const ConvAlgoKey& o) const;
  // "N=256 C=64 H=56 W=56 OC=64 3x3 stride 1 pad 1, bf16 storage, bf16 math, channels-last"
  std::string describe() const;
};
// The key of a convolution run under ctx (its precision and channels_last) with activations of type `storage`.
ConvAlgoKey conv_algo_key(const ExecContext& ctx, int N, int C, int H, int W, int OC, int KH, int KW, int stride,
                          int pad, DType storage);

enum class ConvPhase { Forward = 0, BackwardData = 1, BackwardFilter = 2 };
constexpr int kConvPhases = 3;
// "forward", "backward_data", "backward_filter" (the file's field names)
const char* conv_phase_name(ConvPhase phase);

// One candidate algorithm of a phase: cuDNN's number for it, its workspace for the shape, and the median of its timed
// runs in ms (negative: not timed, because its workspace does not fit the one the model plans, or cuDNN refused it).
struct AlgoTime {
  int algo = -1;
  size_t bytes = 0;
  double ms = -1.0;
};

// The times of one convolution's candidates, per phase (ConvPhase order), each list in cuDNN's heuristic order.
struct ConvTiming {
  ConvAlgoKey key;
  std::array<std::vector<AlgoTime>, kConvPhases> phases;
};

// Within this fraction of the heuristic's own choice, a faster candidate does not replace it: two timings of one shape
// then choose alike unless the candidates differ by more than run-to-run noise.
constexpr double kConvAlgoMargin = 0.05;

// A phase's choice from its candidates in cuDNN's heuristic order: the first timed one (what the backend runs without a
// table), unless another is faster than it by more than `margin` (ms < (1 - margin) x its ms): then the fastest (the
// earlier one on a tie). -1 when none was timed.
int choose_algorithm(const std::vector<AlgoTime>& heuristic_order, double margin = kConvAlgoMargin);

// The choices of a run, per convolution and phase, and the times they were made from. `device` and `cudnn_version`
// name where they were timed (the driver's device name, cudnnGetVersion()): algorithm numbers mean nothing elsewhere.
class ConvAlgorithms {
 public:
  using Choice = std::array<int, kConvPhases>;  // per ConvPhase; -1: no choice (the backend's heuristic order)

  ConvAlgorithms() = default;
  ConvAlgorithms(std::string device, int cudnn_version) : device_(std::move(device)), cudnn_version_(cudnn_version) {}

  const std::string& device() const { return device_; }
  int cudnn_version() const { return cudnn_version_; }
  bool empty() const { return entries_.empty(); }
  size_t size() const { return entries_.size(); }

  // Chooses each phase from the timing (choose_algorithm) and records choice and times; replaces an earlier entry.
  void add(const ConvTiming& timing, double margin = kConvAlgoMargin);
  // Records a choice as it is (a table read from its file); times may be empty.
  void set(const ConvAlgoKey& key, const Choice& choice, const ConvTiming* timing = nullptr);
  // The algorithm chosen for this convolution and phase; -1 when the table has none.
  int find(const ConvAlgoKey& key, ConvPhase phase) const;
  bool contains(const ConvAlgoKey& key) const { return entries_.count(key) > 0; }

  struct Entry {
    Choice choice{-1, -1, -1};
    ConvTiming timing;  // the candidates' times (empty phases when read without them)
  };
  const std::map<ConvAlgoKey, Entry>& entries() const { return entries_; }

  // Per phase, the summed ms of the chosen algorithms and of the heuristic's first timed ones (one call of each
  // convolution), and how many convolutions run another than the heuristic's: what timing bought, for the log.
  std::string summary() const;

 private:
  std::string device_;
  int cudnn_version_ = 0;
  std::map<ConvAlgoKey, Entry> entries_;
};

}  // namespace hpct::kernels
