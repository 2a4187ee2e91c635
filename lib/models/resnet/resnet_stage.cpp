#include "models/resnet/resnet_stage.hpp"

#include <algorithm>

#include "kernels/kernels.hpp"

namespace hpct::resnet {

namespace k = hpct::kernels;

int64_t count_correct(const float* logits, const int32_t* labels, int b, int K) {
  int64_t n = 0;
  for (int i = 0; i < b; ++i) {
    const float* row = logits + static_cast<int64_t>(i) * K;
    n += (std::max_element(row, row + K) - row) == labels[i];
  }
  return n;
}

size_t ResNetStage::planned_bytes(const ResNetConfig& cfg, int micro_batch) {
  const size_t images = static_cast<size_t>(micro_batch) * cfg.in_channels * cfg.height * cfg.width;
  return slab_aligned(images * sizeof(float)) + slab_aligned(static_cast<size_t>(micro_batch) * sizeof(int32_t)) +
         slab_aligned(sizeof(float));
}

ResNetStage::ResNetStage(const ExecContext& ctx, ResNet& model, ImageFill fill, MicroFirst micro_first)
    : ctx_(ctx),
      model_(model),
      fill_(std::move(fill)),
      micro_first_(std::move(micro_first)),
      MB_(model.micro_batch()),
      K_(model.config().num_classes),
      io_("batch", ctx.device) {
  const ResNetConfig& c = model.config();
  D_ = static_cast<int64_t>(c.in_channels) * c.height * c.width;
  img_dev_ = &io_.add("images", {MB_, c.in_channels, c.height, c.width});
  lab_dev_ = &io_.add("labels", {MB_}, DType::I32);
  sum_dev_ = &io_.add("loss_sum", {1});
  io_.allocate();
  HPCT_CHECK(io_.bytes() == planned_bytes(c, MB_), "batch buffers of {} bytes differ from their plan", io_.bytes());
  img_host_.assign(static_cast<size_t>(MB_ * D_), 0.0f);
  logits_host_.assign(static_cast<size_t>(MB_) * K_, 0.0f);
  logits_stored_.assign(logits_host_.size() * dtype_size(model.activation_dtype()), 0);
  lab_host_.assign(static_cast<size_t>(MB_), 0);
}

void ResNetStage::begin_step(int64_t step, float dloss) {
  step_ = step;
  dloss_ = dloss;
  model_.refresh_compute_params(ctx_);  // the masters changed in the last optimizer step (a no-op in fp32)
  sums_[0] = sums_[1] = 0.0;
}

void ResNetStage::stage_in_and_forward(int b, bool train) {
  k::copy_from_host(ctx_, img_dev_->data, img_host_.data(), b * D_ * 4);
  k::copy_from_host(ctx_, lab_dev_->data, lab_host_.data(), static_cast<int64_t>(b) * 4);
  model_.forward(ctx_, img_dev_->f32(), b, train);
  const Tensor& logits = model_.logits();
  k::copy_to_host(ctx_, logits_stored_.data(), logits.data,
                  static_cast<int64_t>(b) * K_ * static_cast<int64_t>(dtype_size(logits.dtype)));
}

const float* ResNetStage::host_logits(int b) {
  widen_to_f32(model_.activation_dtype(), logits_stored_.data(), logits_host_.data(), static_cast<int64_t>(b) * K_);
  return logits_host_.data();
}

void ResNetStage::backward(int chunk, int micro, const void*, void*) {
  HPCT_CHECK(chunk == 0, "ResNetStage: model chunk {}: the ResNet holds one chunk", chunk);
  const int64_t first = micro_first_(micro);
  // The previous copies from img_host_ / lab_host_ have completed before we refill them (CUDA copies are
  // asynchronous; the stream is idle here anyway: sum_to_host below synchronizes). CPU: a no-op.
  k::synchronize(ctx_);
  fill_(step_, first, MB_, img_host_.data(), lab_host_.data());
  stage_in_and_forward(MB_, /*train=*/true);  // the logits' copy is queued before the backward overwrites them
  const float* losses = model_.loss_and_backward(ctx_, lab_dev_->i32(), dloss_, MB_);
  sums_[0] += k::sum_to_host(ctx_, sum_dev_->f32(), losses, MB_);
  // logits_host_ is read only now: sum_to_host synchronized, so the copy queued before backward has landed
  sums_[1] += static_cast<double>(count_correct(host_logits(MB_), lab_host_.data(), MB_, K_));
}

std::pair<double, double> ResNetStage::evaluate(const data::ImageDataset& set, const data::ImageNormalization& norm,
                                                int64_t first, int64_t end, int64_t forwards) {
  double loss = 0.0, correct = 0.0;
  model_.refresh_compute_params(ctx_);  // evaluation follows an optimizer step (a no-op in fp32)
  const int64_t needed = (end - first + MB_ - 1) / MB_;
  for (int64_t r = 0; r < std::max(needed, forwards); ++r) {
    const bool extra = r >= needed;  // past the range: a forward for the other ranks' collectives, not counted
    const int64_t i = extra ? std::min<int64_t>(first, std::max<int64_t>(0, set.size() - 1)) : first + r * MB_;
    const int b = extra ? 1 : static_cast<int>(std::min<int64_t>(MB_, end - i));
    k::synchronize(ctx_);  // the last batch's copies from img_host_ / lab_host_ are done before we refill them
    data::fill_images(set, norm, i, b, img_host_.data(), lab_host_.data());
    stage_in_and_forward(b, /*train=*/false);
    const double sum = k::sum_to_host(ctx_, sum_dev_->f32(), model_.loss(ctx_, lab_dev_->i32(), b), b);
    if (extra) continue;
    loss += sum;  // (the sum synchronizes)
    correct += static_cast<double>(count_correct(host_logits(b), lab_host_.data(), b, K_));
  }
  return {loss, correct};
}

}  // namespace hpct::resnet
