// train_resnet: trains a ResNet on an HDF5 image dataset from a TOML deck, data-parallel over the MPI ranks.
//   train_resnet DECK.toml [--out DIR] [--set section.key=value]... [--dump FILE.h5]
//                [--plan [--json] [--device-name NAME]]
#include <cstdio>

#include "app_main.hpp"
#include "train_cli.hpp"
#include "core/config.hpp"
#include "core/device_peaks.hpp"
#include "core/format.hpp"
#include "data/image_dataset.hpp"
#include "models/resnet/resnet.hpp"
#include "train/resnet_deck.hpp"
#include "train/run_device.hpp"
#include "train/resnet_trainer.hpp"

int main(int argc, char** argv) {
  return hpct::run_mpi_app(argc, argv, "train_resnet", [](int argc, char** argv) {
    CLI::App app{"hpctrain train_resnet: trains a ResNet described by a TOML deck on an HDF5 image dataset"};
    hpct::TrainCli cli;
    hpct::add_train_options(app, cli, "inputs/resnet20_fmnist.toml",
                            "write initial weights, every step's batch, losses and final weights to this HDF5 file "
                            "(for the PyTorch cross-check; one rank)",
                            hpct::train::resnet_deck_schema());
    bool plan = false, plan_json = false;
    std::string device_name;
    CLI::Option* plan_opt = app.add_flag("--plan", plan,
                                         "print the model and one rank's memory plan from the deck "
                                         "and the dataset's image shape, without training");
    app.add_flag("--json", plan_json,
                 "with --plan: also print one JSON line {\"plan\":{...}} (parameters, FLOPs per "
                 "image and per step, memory, the device's peak TFLOP/s)")
        ->needs(plan_opt);
    app.add_option("--device-name", device_name,
                   "with --plan: the device whose peak TFLOP/s the JSON line gives at "
                   "train.precision, as nvidia-smi names it (e.g. \"NVIDIA H100 80GB "
                   "HBM3\")")
        ->needs(plan_opt);
    if (!hpct::parse_train_cli(app, argc, argv, "train_resnet")) return 0;
    const hpct::Config deck = hpct::Config::load(hpct::train::resnet_deck_schema(), cli.deck_path, cli.overrides);
    if (plan) {
      if (hpct::process_identity().rank != 0) return 0;
      const auto ds = hpct::data::ImageDataset::open(hpct::train::resolve_data_path(deck.get_string("data.train")));
      const auto cfg = hpct::train::resnet_model_config(deck, ds.channels(), ds.height(), ds.width(), ds.num_classes());
      const int mb = static_cast<int>(deck.get_int("train.micro_batch"));
      // activations at their stored size: bf16 under train.precision = bf16 on either backend, f16 under fp16 (CUDA)
      const hpct::Precision requested = hpct::parse_precision(deck.get_string("train.precision"));
      // fp16 storage exists on CUDA only: train.device = cpu with fp16 is the trainer's UsageError, raised here too
      if (requested == hpct::Precision::FP16)
        hpct::train::decide_precision(deck.get_string("train.device"), hpct::Device::CPU, requested, deck.deck_path(),
                                      nullptr);
      const hpct::DType act = hpct::train::activation_dtype(requested);
      const auto m = hpct::resnet::memory_plan(cfg, mb, act);
      std::printf("plan: %s | ResNet-%d (%s) on %dx%dx%d, %d classes | %lld parameters | %.3f GFLOP/image forward\n",
                  deck.deck_path().c_str(), cfg.depth, cfg.style.c_str(), cfg.in_channels, cfg.height, cfg.width,
                  cfg.num_classes, static_cast<long long>(m.num_params),
                  hpct::resnet::forward_flops_per_image(cfg) / 1e9);
      std::printf("micro_batch %d: params %s | grads %s | BN buffers %s | momentum %s (1/DP with ZeRO-1) | 16-bit "
                  "compute copy %s | activations %s (%s) | activation grads %s | conv workspace %s | total %s\n",
                  mb, hpct::human_bytes(m.param_bytes).c_str(), hpct::human_bytes(m.grad_bytes).c_str(),
                  hpct::human_bytes(m.buffer_bytes).c_str(), hpct::human_bytes(m.param_bytes).c_str(),
                  hpct::human_bytes(m.compute_param_bytes).c_str(), hpct::human_bytes(m.activation_bytes).c_str(),
                  hpct::dtype_name(act), hpct::human_bytes(m.activation_grad_bytes).c_str(),
                  hpct::human_bytes(m.workspace_bytes).c_str(), hpct::human_bytes(m.total() + m.param_bytes).c_str());
      if (plan_json) {
        // FLOPs as the trainer counts them (docs/performance.md): 3 x forward per image, x global_batch per step
        const int64_t gb = deck.get_int("train.global_batch");
        const double train_fpi = hpct::resnet::training_flops_per_image(cfg);
        const std::string& precision = deck.get_string("train.precision");
        const std::string line = fmt::format(
            R"({{"plan":{{"app":"train_resnet","deck":{},"depth":{},"style":{},"image":[{},{},{}],"num_classes":{},)"
            R"("micro_batch":{},"global_batch":{},"parameters":{},"flops_per_image_forward":{},)"
            R"("flops_per_image_training":{},"training_flops_per_step":{},"memory_bytes":{},)"
            R"("activation_bytes":{},"activation_dtype":{},"device":{},)"
            R"("precision":{},{},"log_peak_tflops":{}}}}})",
            hpct::json_quote(deck.deck_path()), cfg.depth, hpct::json_quote(cfg.style), cfg.in_channels, cfg.height,
            cfg.width, cfg.num_classes, mb, gb, m.num_params, hpct::resnet::forward_flops_per_image(cfg), train_fpi,
            train_fpi * static_cast<double>(gb), m.total() + m.param_bytes,
            m.activation_bytes + m.activation_grad_bytes, hpct::json_quote(hpct::dtype_name(act)),
            hpct::json_quote(deck.get_string("train.device")), hpct::json_quote(precision),
            hpct::peak_json_members(device_name, precision), deck.get_float("log.peak_tflops"));
        std::printf("%s\n", line.c_str());
      }
      return 0;
    }
    return hpct::train::run_resnet(deck, cli.run_options());
  });
}
