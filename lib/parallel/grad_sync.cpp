#include "parallel/grad_sync.hpp"

#include <algorithm>

#include "core/format.hpp"
#include "core/timer.hpp"

namespace hpct::parallel {

GradSync::GradSync(comm::Communicator& dp, Slab& params, Slab& grads, const GradSyncOptions& opts)
    : dp_(dp), params_(params), grads_(grads), opts_(opts), shard_("zero_grad_shard", grads.device()) {
  HPCT_CHECK(opts_.zero == 0 || opts_.zero == 1, "parallel.zero = {} (0 or 1)", opts_.zero);
  HPCT_CHECK(params_.tensors().size() == grads_.tensors().size(), "params and grads differ in count");
  HPCT_CHECK(params_.bytes() == grads_.bytes(), "params and grads slabs differ in layout");
  const auto& ts = grads_.tensors();
  const int n = static_cast<int>(ts.size());
  auto elem_of = [&](const Tensor& t) { return static_cast<int64_t>(grads_.offset_of(t) / sizeof(float)); };
  for (const Tensor& t : ts) HPCT_CHECK(t.dtype == DType::F32, "gradient {} is not f32", t.name);
  for (int i = 1; i < n; ++i)
    HPCT_CHECK(elem_of(ts[i]) >= elem_of(ts[i - 1]) + ts[i - 1].numel(), "gradient slab is not in layout order");

  // buckets in reverse layout order
  bucket_of_tensor_.assign(static_cast<size_t>(n), -1);
  int end = n;
  while (end > 0) {
    int first = end - 1;
    size_t bytes = ts[first].bytes();
    while (first > 0 && bytes < opts_.bucket_bytes) bytes += ts[--first].bytes();
    Bucket b;
    b.first_tensor = first;
    b.end_tensor = end;
    b.elem_begin = elem_of(ts[first]);
    b.elem_end = elem_of(ts[end - 1]) + ts[end - 1].numel();
    for (int i = first; i < end; ++i) bucket_of_tensor_[i] = static_cast<int>(buckets_.size());
    buckets_.push_back(b);
    end = first;
  }

  // ZeRO shares and the ranges this rank updates
  const int P = dp_.size(), me = dp_.rank();
  const bool use_shard = opts_.zero && P > 1;  // at DP 1 the owned share is the gradient slab itself
  for (Bucket& b : buckets_) {
    const int64_t len = b.elem_end - b.elem_begin;
    b.counts.resize(static_cast<size_t>(P));
    for (int r = 0; r < P; ++r) b.counts[r] = len / P + (r < len % P ? 1 : 0);
    b.shard_offset = shard_numel_;
    shard_numel_ += use_shard ? b.counts[me] : 0;
  }
  if (use_shard) {
    shard_.add("grad_shard", {std::max<int64_t>(shard_numel_, 1)});
    shard_.allocate();
  }
  float* gbase = static_cast<float*>(grads_.base());
  for (const Bucket& b : buckets_) {
    int64_t own_begin = b.elem_begin, own_end = b.elem_end;
    if (opts_.zero) {
      int64_t pre = 0;
      for (int r = 0; r < me; ++r) pre += b.counts[r];
      own_begin = b.elem_begin + pre;
      own_end = own_begin + b.counts[me];
    }
    for (int i = b.first_tensor; i < b.end_tensor; ++i) {
      const int64_t ts0 = elem_of(ts[i]), te0 = ts0 + ts[i].numel();
      const int64_t a = std::max(own_begin, ts0), e = std::min(own_end, te0);
      if (a >= e) continue;
      float* g = use_shard ? shard_.tensors()[0].f32() + b.shard_offset + (a - own_begin) : gbase + a;
      owned_.push_back({i, a - ts0, e - ts0, g});
    }
  }
  // the optimizer walks its ranges in layout order
  std::sort(owned_.begin(), owned_.end(), [](const OwnedRange& x, const OwnedRange& y) {
    return x.tensor != y.tensor ? x.tensor < y.tensor : x.begin < y.begin;
  });
  pending_.resize(buckets_.size());
  work_.resize(buckets_.size());
  launched_.assign(buckets_.size(), false);
}

std::string GradSync::describe() const {
  return fmt::format("{} bucket(s) of >= {} (overlap {}), ZeRO-{}{}", buckets_.size(), human_bytes(opts_.bucket_bytes),
                     opts_.overlap ? "on" : "off", opts_.zero,
                     opts_.zero ? fmt::format(" (gradient shard {} per rank)", human_bytes(shard_numel_ * 4.0)) : "");
}

void GradSync::arm() {
  armed_ = true;
  next_launch_ = 0;
  for (size_t b = 0; b < buckets_.size(); ++b) {
    pending_[b] = buckets_[b].end_tensor - buckets_[b].first_tensor;
    launched_[b] = false;
  }
}

void GradSync::launch(size_t b) {
  const Bucket& bk = buckets_[b];
  float* base = static_cast<float*>(grads_.base()) + bk.elem_begin;
  const int64_t len = bk.elem_end - bk.elem_begin;
  const std::string what = fmt::format("gradient bucket {} of {}", b, buckets_.size());
  if (opts_.zero)
    work_[b] = dp_.reduce_scatter_v_async(base, shard_.tensors()[0].f32() + bk.shard_offset, bk.counts, DType::F32,
                                          comm::ReduceOp::Sum, what);
  else
    work_[b] = dp_.allreduce_async(base, len, DType::F32, comm::ReduceOp::Sum, what);
  launched_[b] = true;
}

void GradSync::on_ready(int first, int end) {
  if (!armed_ || dp_.size() == 1) return;
  for (int i = first; i < end; ++i) --pending_[static_cast<size_t>(bucket_of_tensor_[static_cast<size_t>(i)])];
  if (opts_.overlap) {
    while (next_launch_ < buckets_.size() && pending_[next_launch_] == 0) launch(next_launch_++);
    dp_.progress();
  }
}

void GradSync::finish() {
  exposed_ms_ = 0.0;
  if (dp_.size() == 1) {
    armed_ = false;  // one rank: its gradients are the sum (ZeRO-1 at DP 1 owns everything in place)
    return;
  }
  HPCT_CHECK(armed_, "GradSync::finish without arm()");
  Timer t;
  while (next_launch_ < buckets_.size()) launch(next_launch_++);
  for (auto& w : work_) {
    w->wait();
    w.reset();
  }
  exposed_ms_ = t.ms();
  armed_ = false;
}

void GradSync::gather_params() {
  gather_ms_ = 0.0;
  if (!opts_.zero || dp_.size() == 1) return;
  Timer t;
  const int me = dp_.rank();
  for (size_t b = 0; b < buckets_.size(); ++b) {
    const Bucket& bk = buckets_[b];
    int64_t pre = 0;
    for (int r = 0; r < me; ++r) pre += bk.counts[r];
    float* base = static_cast<float*>(params_.base()) + bk.elem_begin;
    work_[b] = dp_.allgather_v_async(base + pre, base, bk.counts, DType::F32,
                                     fmt::format("parameter allgather, bucket {} of {}", b, buckets_.size()));
  }
  for (auto& w : work_) {
    w->wait();
    w.reset();
  }
  gather_ms_ = t.ms();
}

}  // namespace hpct::parallel
