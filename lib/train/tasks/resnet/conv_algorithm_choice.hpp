#pragma once
// train.conv_algorithms (the ResNet on CUDA; docs/cuda.md, "Convolution algorithms"): which of cuDNN's deterministic
// convolution algorithms a run computes with, decided once before its first step, the same on every rank.
//   timed      (default) the table in <out>/conv_algorithms.json when it was timed on this GPU model and cuDNN and holds
//              every convolution of the model: a resumed run, or a rerun into the same directory, computes with the same
//              algorithms, so with the same bits. Otherwise rank 0 times the candidates (ResNet::time_conv_algorithms)
//              and writes the table there.
//   heuristic  cuDNN's heuristic order (the first deterministic candidate whose workspace fits): no timing, no file; the
//              same bits on every run with this GPU model, cuDNN and workspace.
//   <path>     the table in that file (an earlier run's conv_algorithms.json: its algorithms, so its bits), copied to
//              <out>/conv_algorithms.json. A table timed on another GPU model or cuDNN, or lacking some of the model's
//              convolutions, is used where it applies, with a warning (the rest runs cuDNN's heuristic order).
// The file: one JSON object (conv_algorithms_json) with the device, the cuDNN version, and per convolution its shape and
// type, the chosen algorithm of each phase and the candidates' times. Rank 0 reads, times and writes; the table's text
// goes to every rank in one broadcast, and a failure (an explicit file missing or unreadable) is a UsageError on all.
#include <functional>
#include <string>
#include <vector>

#include "comm/communicator.hpp"
#include "kernels/conv_algorithms.hpp"

namespace hpct::train {

// The values of train.conv_algorithms besides a path.
inline constexpr const char* kConvAlgorithmsTimed = "timed";
inline constexpr const char* kConvAlgorithmsHeuristic = "heuristic";
// The table's file in the run directory.
inline constexpr const char* kConvAlgorithmsFile = "conv_algorithms.json";
// The measured runs of each candidate (its time is their median), after one warm-up run.
inline constexpr int kConvAlgorithmRepeats = 5;

// The table as its file holds it, and back; parse errors are UsageErrors naming `source` and the field.
std::string conv_algorithms_json(const kernels::ConvAlgorithms& table);
kernels::ConvAlgorithms parse_conv_algorithms(const std::string& text, const std::string& source);

struct ConvAlgorithmRequest {
  std::string setting;  // train.conv_algorithms: "timed", "heuristic" or a path
  std::string out_dir;  // the run directory
  std::string device;   // the GPU's name as the driver reports it (RunDevice::gpu_name)
  int cudnn_version = 0;
  std::vector<kernels::ConvAlgoKey> keys;  // the model's convolutions (ResNet::conv_algo_keys)
};

// The run's table (empty under "heuristic"), collective over `world`; `time_them` runs on rank 0 only, when the
// setting is "timed" and no usable table is in the run directory. Rank 0 logs what it did.
kernels::ConvAlgorithms decide_conv_algorithms(comm::Communicator& world, const ConvAlgorithmRequest& request,
                                               const std::function<std::vector<kernels::ConvTiming>()>& time_them);

}  // namespace hpct::train
