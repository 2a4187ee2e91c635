#include "train/tasks/resnet/resnet_deck.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.hpp"
#include <fmt/ranges.h>

#include "core/format.hpp"
#include "train/loop/loss_scaling.hpp"
#include "train/plan/memory_plan.hpp"
#include "train/loop/run_config.hpp"
#include "train/loop/run_environment.hpp"

namespace hpct::train {

namespace {
// How train_resnet words the shared keys (train/loop/run_config.hpp).
SharedKeyWords resnet_key_words() {
  SharedKeyWords w;
  w.unit = "images";
  w.steps_doc = "optimizer steps (ignored when train.epochs > 0)";
  w.global_batch = 128;
  w.micro_batch = 128;
  w.seeded = "data order and augmentation";
  w.recompute_doc =
      "activation recompute in backward: none | full (each residual block from its input); losses and gradients are "
      "bitwise the same";
  w.recompute_choices = {"none", "full"};
  w.eval_every_doc = "evaluate every this many steps (0: at the end of every epoch and the run)";
  w.parallel_doc = "data parallelism (DP = world) and its gradient sync";
  w.tp_doc = "tensor-parallel size: the ResNet is data-parallel only, must be 1";
  w.pp_doc = "pipeline-parallel size: the ResNet is data-parallel only, must be 1";
  w.order_doc = "grid order (DP only here: any order gives rank = dp)";
  w.log_every = 10;
  return w;
}
}  // namespace

const ConfigSchema& resnet_deck_schema() {
  static const ConfigSchema schema = [] {
    ConfigSchema s;
    s.section("model", true, "ResNet architecture (image shape and classes come from the dataset)");
    s.string_key("model.style", "cifar",
                 "cifar (3x3 stem, 3 stages, depth 6n+2: 20, 56, ...) | imagenet (7x7 stem + "
                 "max-pool, 4 stages: 18, 34 BasicBlocks; 50, 101, 152 Bottlenecks)",
                 {"cifar", "imagenet"});
    s.int_key("model.depth", 20, "layers: cifar 6n+2 (8, 20, 32, 44, 56, 110); imagenet 18, 34, 50, 101, 152", 8, 1000);
    s.int_key("model.base_width", 0, "channels of the first stage (0: 16 for cifar, 64 for imagenet)", 0, 4096);
    s.int_key("model.num_classes", 0, "classifier outputs (0: the dataset's num_classes attribute)", 0, 1 << 20);
    s.bool_key("model.sync_bn", true,
               "SyncBN: BatchNorm statistics over the whole data-parallel batch (Chan's "
               "merge); false: per-rank statistics, running statistics of DP rank 0");
    s.string_key("model.memory_format", "auto",
                 "activation layout: nhwc (channels-last: cuDNN's and the CPU's oneDNN convolutions run on the "
                 "activations without reordering them) | nchw | auto (nhwc where every convolution runs "
                 "channels-last: the CPU with oneDNN, CUDA with bf16 or fp16 storage; else nchw); parameters and "
                 "checkpoints do not depend on it",
                 {"auto", "nchw", "nhwc"});

    s.section("data", true,
              "HDF5 image datasets (uint8 /images N x C x H x W, int /labels); relative paths resolve "
              "against $HPCT_DATA_DIR");
    s.string_key("data.train", std::nullopt, "training split, e.g. fmnist_train.h5");
    s.string_key("data.test", std::nullopt, "evaluation split, e.g. fmnist_test.h5 (test accuracy)");
    s.float_list_key("data.mean", std::vector<double>{0.2860}, "per-channel mean of pixel/255 (1 or C values)");
    s.float_list_key("data.std", std::vector<double>{0.3530}, "per-channel std of pixel/255 (1 or C values)");
    s.int_key("data.crop_pad", 0, "random crop with this much zero padding (0: off); torchvision RandomCrop(H, pad)", 0,
              1 << 16);
    s.bool_key("data.flip", false, "random horizontal flip with probability 1/2");
    s.int_key("data.eval_images", 0, "evaluate on the first this many test images (0: all)", 0, 1e12);

    const SharedKeyWords words = resnet_key_words();
    add_train_keys(s, words);
    s.int_key("train.epochs", 0, "train for this many epochs of N / global_batch steps (0: use train.steps)", 0, 1e9);
    s.string_key("train.conv_algorithms", "timed",
                 "CUDA: which of cuDNN's deterministic convolution algorithms run: timed (rank 0 times the candidates "
                 "before the first step and keeps the fastest; the table goes to <out>/conv_algorithms.json, which a "
                 "resumed run or a rerun into the same directory reuses) | heuristic (cuDNN's order, no timing) | the "
                 "path of an earlier run's conv_algorithms.json (its algorithms: its bits); ignored on the CPU");

    s.section("optim", false, "SGD with momentum (torch.optim.SGD), warm-up + cosine or step LR");
    s.float_key("optim.lr", 0.1, "peak learning rate", 0.0, 100.0);
    s.float_key("optim.momentum", 0.9, "momentum (0: plain SGD, no state)", 0.0, 0.999999);
    s.bool_key("optim.nesterov", true, "Nesterov momentum");
    s.float_key("optim.dampening", 0.0, "momentum dampening (must be 0 with nesterov)", 0.0, 1.0);
    s.float_key("optim.weight_decay", 5e-4, "L2 weight decay on conv and fc weights (not BatchNorm, not biases)", 0.0,
                10.0);
    s.string_key("optim.schedule", "cosine",
                 "after warm-up: cosine (to final_lr_frac at decay_steps) | step (x gamma "
                 "at each milestone epoch)",
                 {"cosine", "step"});
    s.float_key("optim.final_lr_frac", 0.0, "cosine: lr at decay_steps as a fraction of optim.lr", 0.0, 1.0);
    s.int_key("optim.decay_steps", 0, "cosine: absolute step where the decay ends (0: the run's last step)", 0, 1e12);
    s.float_list_key("optim.milestones", std::vector<double>{},
                     "step: the epochs after which lr is multiplied by gamma (e.g. [30, 60, 80] or \"30,60,80\")");
    s.float_key("optim.gamma", 0.1, "step: the factor at each milestone", 0.0, 1.0);
    s.int_key("optim.warmup_steps", 0, "linear warm-up steps", 0, 1e12);
    s.float_key("optim.label_smoothing", 0.0,
                "label smoothing of the cross-entropy (torch's label_smoothing; "
                "also in the test loss)",
                0.0, 0.999);
    s.float_key("optim.grad_clip", 0.0, "clip the global gradient norm to this (0: off)", 0.0, 1e9);

    add_layout_keys(s, words);
    add_run_keys(s);

    add_log_keys(s, words);
    return s;
  }();
  return schema;
}

resnet::ResNetConfig resnet_model_config(const Config& deck, int in_channels, int height, int width,
                                         int dataset_classes) {
  resnet::ResNetConfig c;
  c.style = deck.get_string("model.style");
  c.depth = static_cast<int>(deck.get_int("model.depth"));
  c.base_width = static_cast<int>(deck.get_int("model.base_width"));
  if (c.base_width == 0) c.base_width = c.style == "imagenet" ? 64 : 16;
  c.num_classes = static_cast<int>(deck.get_int("model.num_classes"));
  if (c.num_classes == 0) c.num_classes = dataset_classes;
  c.label_smoothing = static_cast<float>(deck.get_float("optim.label_smoothing"));
  c.memory_format = deck.get_string("model.memory_format");
  c.in_channels = in_channels;
  c.height = height;
  c.width = width;
  c.validate("deck " + deck.deck_path());
  return c;
}

ResNetDeck read_resnet_deck(const Config& deck, const RunConfig& run) {
  const int64_t GB = run.train.global_batch;
  ResNetDeck d{data::ImageDataset::open(resolve_data_path(deck.get_string("data.train"))),
               data::ImageDataset::open(resolve_data_path(deck.get_string("data.test"))),
               {},
               {},
               {},
               0,
               0,
               0,
               {},
               {},
               false,
               {},
               {}};
  const data::ImageDataset &train_set = d.train_set, &test_set = d.test_set;
  HPCT_USAGE_CHECK(
      test_set.channels() == train_set.channels() && test_set.height() == train_set.height() &&
          test_set.width() == train_set.width(),
      "deck {}: data.test {} holds {}x{}x{} images but data.train {} holds {}x{}x{}; both splits must have "
      "one image shape",
      deck.deck_path(), test_set.path(), test_set.channels(), test_set.height(), test_set.width(), train_set.path(),
      train_set.channels(), train_set.height(), train_set.width());
  HPCT_USAGE_CHECK(GB <= train_set.size(), "deck {}: train.global_batch = {} is larger than data.train {} ({} images)",
                   deck.deck_path(), GB, train_set.path(), train_set.size());
  const int classes = std::max(train_set.num_classes(), test_set.num_classes());
  d.cfg = resnet_model_config(deck, train_set.channels(), train_set.height(), train_set.width(), classes);
  HPCT_USAGE_CHECK(
      d.cfg.num_classes >= classes,
      "deck {}: model.num_classes = {} but the datasets have {} classes; raise it or set 0 (the dataset's)",
      deck.deck_path(), d.cfg.num_classes, classes);
  const auto floats = [&](const std::string& key) {
    const std::vector<double>& v = deck.get_float_list(key);
    return std::vector<float>(v.begin(), v.end());
  };
  d.norm.mean = floats("data.mean");
  d.norm.std = floats("data.std");
  const auto n_ok = [&](size_t n) { return n == 1 || n == static_cast<size_t>(train_set.channels()); };
  HPCT_USAGE_CHECK(n_ok(d.norm.mean.size()) && n_ok(d.norm.std.size()),
                   "deck {}: data.mean has {} and data.std {} values; give 1 or C = {} values each", deck.deck_path(),
                   d.norm.mean.size(), d.norm.std.size(), train_set.channels());
  for (float s : d.norm.std) HPCT_USAGE_CHECK(s > 0, "deck {}: data.std values must be positive", deck.deck_path());
  d.aug.pad = static_cast<int>(deck.get_int("data.crop_pad"));
  d.aug.flip = deck.get_bool("data.flip");
  HPCT_USAGE_CHECK(d.aug.pad <= std::min(train_set.height(), train_set.width()),
                   "deck {}: data.crop_pad = {} is larger than the image ({}x{})", deck.deck_path(), d.aug.pad,
                   train_set.height(), train_set.width());
  const int64_t spe = train_set.size() / GB;  // as ImageBatchSampler::steps_per_epoch()
  d.epochs = deck.get_int("train.epochs");
  d.steps = d.epochs > 0 ? d.epochs * spe : run.train.steps;
  d.n_eval = deck.get_int("data.eval_images");
  d.n_eval = d.n_eval > 0 ? std::min<int64_t>(d.n_eval, test_set.size()) : test_set.size();

  std::vector<int64_t> milestones;  // optimizer steps
  for (double e : deck.get_float_list("optim.milestones")) {
    HPCT_USAGE_CHECK(e == std::floor(e) && e > static_cast<double>(milestones.empty() ? 0 : milestones.back() / spe),
                     "deck {}: optim.milestones = [{}]: epochs must be ascending positive integers", deck.deck_path(),
                     fmt::join(deck.get_float_list("optim.milestones"), ", "));
    milestones.push_back(static_cast<int64_t>(e) * spe);
  }
  d.sync_bn = deck.get_bool("model.sync_bn");
  d.lr_kind = deck.get_string("optim.schedule");
  d.conv_algorithms = deck.get_string("train.conv_algorithms");
  if (d.lr_kind == "step") {
    HPCT_USAGE_CHECK(!milestones.empty(),
                     "deck {}: optim.schedule = \"step\" needs optim.milestones (epochs, e.g. "
                     "\"30,60,80\")",
                     deck.deck_path());
    d.sched.lr = deck.get_float("optim.lr");
    d.sched.warmup_steps = deck.get_int("optim.warmup_steps");
    d.sched.kind = optim::LrSchedule::Kind::Step;
    d.sched.gamma = deck.get_float("optim.gamma");
    d.sched.milestones = milestones;
  } else {
    d.sched = read_cosine_schedule(deck, d.steps);
  }
  d.sgd.momentum = static_cast<float>(deck.get_float("optim.momentum"));
  d.sgd.nesterov = deck.get_bool("optim.nesterov");
  d.sgd.dampening = static_cast<float>(deck.get_float("optim.dampening"));
  d.sgd.weight_decay = static_cast<float>(deck.get_float("optim.weight_decay"));
  d.sgd.grad_clip = static_cast<float>(deck.get_float("optim.grad_clip"));
  HPCT_USAGE_CHECK(!d.sgd.nesterov || (d.sgd.momentum > 0 && d.sgd.dampening == 0),
                   "deck {}: optim.nesterov = true needs optim.momentum > 0 and optim.dampening = 0 (torch.optim.SGD)",
                   deck.deck_path());
  return d;
}

void check_resnet_layout(const RunConfig& run) {
  HPCT_USAGE_CHECK(run.parallel.tp == 1 && run.parallel.pp == 1,
                   "deck {}: parallel.tp = {} and parallel.pp = {}: train_resnet is data-parallel only (DP = the world "
                   "size); set both to 1",
                   run.deck_path, run.parallel.tp, run.parallel.pp);
}

}  // namespace hpct::train
