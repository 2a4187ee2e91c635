#pragma once
// The ResNet as the training loop's single pipeline stage (parallel/pipeline_schedule.hpp, schedule "none"), and its
// evaluation. A micro-batch runs in its backward slot: fill (host) and copy its images and labels, forward, copy the
// logits to the host (for the accuracy), fused loss + backward; the stage keeps the step's loss sum and correct
// predictions in double, added in micro-batch order. Each micro-batch synchronizes the host once (its loss sum).
#include <cstdint>
#include <functional>
#include <vector>

#include "data/image_dataset.hpp"
#include "kernels/exec_context.hpp"
#include "models/resnet/resnet.hpp"
#include "parallel/pipeline_schedule.hpp"
#include "tensor/tensor.hpp"

namespace hpct::resnet {

// Fills `count` images of step `step` starting at global sample `first`: images (count, C, H, W) and labels, host.
using ImageFill = std::function<void(int64_t step, int64_t first, int count, float* images, int32_t* labels)>;
// The first global sample of micro-batch j of this rank.
using MicroFirst = std::function<int64_t(int64_t micro)>;

// Correct top-1 predictions among b rows of logits (host, (b, K)) against labels; ties go to the lower class.
int64_t count_correct(const float* logits, const int32_t* labels, int b, int K);

class ResNetStage final : public parallel::PipelineStage {
 public:
  ResNetStage(const ExecContext& ctx, ResNet& model, ImageFill fill, MicroFirst micro_first);

  void begin_step(int64_t step, float dloss);
  double loss_sum() const { return sums_[0]; }  // this rank's, over the step's micro-batches
  double correct() const { return sums_[1]; }

  void forward(int, int, const void*, void*) override {}  // the micro-batch runs in its backward slot
  // One model chunk (the ResNet runs at pp = 1): chunk is always 0.
  void backward(int chunk, int micro, const void* dout, void* din) override;
  int64_t activation_numel() const override { return 0; }  // one stage: nothing is exchanged
  size_t bytes() const { return io_.bytes(); }  // its planned buffers (a micro-batch's images, labels, loss sum)
  // What bytes() is without a model (the memory plan; the constructor checks that the two agree).
  static size_t planned_bytes(const ResNetConfig& cfg, int micro_batch);

  // (loss sum, correct predictions) over images [first, end) of `set`, micro_batch at a time, BN in eval mode.
  // forwards: at least this many forwards (past the range: one image, not counted; under ZeRO-3 every forward is
  // collective over DP); 0: as many as the range needs.
  std::pair<double, double> evaluate(const data::ImageDataset& set, const data::ImageNormalization& norm, int64_t first,
                                     int64_t end, int64_t forwards = 0);

 private:
  // Copies images (b, C, H, W) and labels (b) from the host buffers, runs the forward, queues the logits' copy to the
  // host; returns with the logits on the device.
  void stage_in_and_forward(int b, bool train);
  // The first b rows of the logits copied by stage_in_and_forward, as floats (after the host has synchronized).
  const float* host_logits(int b);

  const ExecContext& ctx_;
  ResNet& model_;
  ImageFill fill_;
  MicroFirst micro_first_;
  int MB_, K_;
  int64_t D_;  // elements of one image
  int64_t step_ = 0;
  float dloss_ = 0.0f;
  double sums_[2] = {0.0, 0.0};  // loss sum, correct predictions
  Slab io_;
  Tensor *img_dev_ = nullptr, *lab_dev_ = nullptr, *sum_dev_ = nullptr;  // (MB, C, H, W), (MB), (1)
  std::vector<float> img_host_, logits_host_;                            // (MB, C, H, W), (MB, K)
  std::vector<int32_t> lab_host_;                                        // (MB)
  std::vector<unsigned char> logits_stored_;  // (MB, K) logits as the model stores them (f32, bf16 or f16), host copy
};

}  // namespace hpct::resnet
