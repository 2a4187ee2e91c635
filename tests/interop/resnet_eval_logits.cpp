// hpctrain's own eval-mode logits of a ResNet checkpoint on given images, for check_torchvision_export.py to hold
// torchvision's against. The same code as train_resnet's evaluation (ResNetStage::evaluate): the model of the
// checkpoint's deck (resnet_model_config), every parameter and BN running statistic read from the checkpoint's
// /model/<name>, the images normalised by data::fill_images with the deck's data.mean / data.std (the evaluation
// path: no augmentation), ResNet::forward with train = false (BN on its running statistics), one micro-batch.
//   usage: resnet_eval_logits CKPT_PATH IMAGES.h5 COUNT OUT.h5
// OUT.h5: /images (COUNT, C, H, W) fp32, the normalised images the forward saw; /logits (COUNT, K) fp32; /labels.
#include <hdf5.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "ckpt/checkpoint.hpp"
#include "core/config.hpp"
#include "core/error.hpp"
#include "core/h5_check.hpp"
#include "data/image_dataset.hpp"
#include "models/resnet/resnet.hpp"
#include "train/tasks/h5_write.hpp"
#include "train/tasks/resnet/resnet_deck.hpp"

using namespace hpct;

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: resnet_eval_logits CKPT_PATH IMAGES.h5 COUNT OUT.h5\n");
    return 2;
  }
  try {
    const std::string dir = ckpt::find_step_dir(argv[1]);
    const ckpt::Reader reader(dir);
    const Config deck = Config::parse(train::resnet_deck_schema(), reader.attrs().strings.at("deck"), dir + " (deck)");
    const data::ImageDataset set = data::ImageDataset::open(argv[2]);
    const int n = std::atoi(argv[3]);
    HPCT_CHECK(n >= 1 && n <= set.size(), "COUNT {} must be in [1, {}]", n, set.size());
    const resnet::ResNetConfig cfg = train::resnet_model_config(
        deck, set.channels(), set.height(), set.width(), static_cast<int>(reader.attrs().ints.at("model.num_classes")));
    data::ImageNormalization norm;
    const auto& mean = deck.get_float_list("data.mean");
    const auto& sd = deck.get_float_list("data.std");
    norm.mean.assign(mean.begin(), mean.end());
    norm.std.assign(sd.begin(), sd.end());

    const ExecContext ctx;
    resnet::ResNet model(cfg, n, Device::CPU);
    for (Tensor& t : model.params().tensors()) reader.read_all("model/" + t.name, DType::F32, t.data);
    for (Tensor& t : model.buffers().tensors()) reader.read_all("model/" + t.name, DType::F32, t.data);

    std::vector<float> images(static_cast<size_t>(n * set.image_elems()));
    std::vector<int32_t> labels(static_cast<size_t>(n));
    data::fill_images(set, norm, 0, n, images.data(), labels.data());
    model.forward(ctx, images.data(), n, /*train=*/false);

    hid_t f = H5_CHECK(H5Fcreate(argv[4], H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT));
    train::h5::write_dataset(f, "images", {n, set.channels(), set.height(), set.width()}, H5T_NATIVE_FLOAT,
                             images.data());
    train::h5::write_dataset(f, "logits", {n, cfg.num_classes}, H5T_NATIVE_FLOAT, model.logits().f32());
    train::h5::write_dataset(f, "labels", {n}, H5T_NATIVE_INT32, labels.data());
    train::h5::attr_i64(f, "step", reader.attrs().ints.at("step"));
    H5_CHECK(H5Fclose(f));
    std::printf("resnet_eval_logits: %s step %lld, %d images -> %s\n", dir.c_str(),
                static_cast<long long>(reader.attrs().ints.at("step")), n, argv[4]);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "resnet_eval_logits: %s\n", e.what());
    return 1;
  }
}
