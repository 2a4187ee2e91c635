#include "parallel/grad_sync.hpp"

#include <algorithm>

#include "core/format.hpp"
#include "core/timer.hpp"
#include "kernels/kernels.hpp"

namespace hpct::parallel {

DType parse_grad_dtype(const std::string& s) {
  if (s == "fp32") return DType::F32;
  if (s == "bf16") return DType::BF16;
  HPCT_USAGE_FAIL("parallel.grad_dtype = \"{}\": use \"fp32\" (reduce gradients in fp32, the default) or \"bf16\" "
                  "(reduce them in bf16: half the bytes, within bf16 rounding)",
                  s);
}

const char* grad_dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "fp32";
    case DType::BF16: return "bf16";
    default: return dtype_name(t);
  }
}

int64_t BucketPlan::owned_numel() const {
  int64_t n = 0;
  for (const Owned& o : owned) n += o.end - o.begin;
  return n;
}

size_t BucketPlan::shard_bytes() const {
  return sharded ? slab_aligned(static_cast<size_t>(std::max<int64_t>(shard_numel, 1)) * sizeof(float)) : 0;
}

size_t BucketPlan::comm_bytes() const {
  return bf16_image ? slab_aligned(static_cast<size_t>(std::max<int64_t>(slab_numel, 1)) * sizeof(bf16)) : 0;
}

BucketPlan plan_buckets(const Slab& grads, const GradSyncOptions& opts, int dp_size, int dp_rank) {
  HPCT_CHECK(opts.zero == 0 || opts.zero == 1, "parallel.zero = {} (0 or 1)", opts.zero);
  HPCT_CHECK(dp_size >= 1 && 0 <= dp_rank && dp_rank < dp_size, "DP rank {} of {}", dp_rank, dp_size);
  const auto& ts = grads.tensors();
  const int n = static_cast<int>(ts.size());
  auto elem_of = [&](int i) {
    return static_cast<int64_t>(grads.planned_offset(static_cast<size_t>(i)) / sizeof(float));
  };
  for (const Tensor& t : ts) HPCT_CHECK(t.dtype == DType::F32, "gradient {} is not f32", t.name);
  for (int i = 1; i < n; ++i)
    HPCT_CHECK(elem_of(i) >= elem_of(i - 1) + ts[i - 1].numel(), "gradient slab is not in layout order");

  BucketPlan plan;
  // buckets in reverse layout order
  plan.bucket_of_tensor.assign(static_cast<size_t>(n), -1);
  int end = n;
  while (end > 0) {
    int first = end - 1;
    size_t bytes = ts[first].bytes();
    while (first > 0 && bytes < opts.bucket_bytes) bytes += ts[--first].bytes();
    Bucket b;
    b.first_tensor = first;
    b.end_tensor = end;
    b.elem_begin = elem_of(first);
    b.elem_end = elem_of(end - 1) + ts[end - 1].numel();
    for (int i = first; i < end; ++i) plan.bucket_of_tensor[i] = static_cast<int>(plan.buckets.size());
    plan.slab_numel = std::max(plan.slab_numel, b.elem_end);
    plan.buckets.push_back(b);
    end = first;
  }

  // ZeRO shares and the ranges this rank updates
  const int P = dp_size, me = dp_rank;
  plan.sharded = opts.zero && P > 1;  // at DP 1 the owned share is the gradient slab itself
  plan.bf16_image = opts.reduce_dtype == DType::BF16 && P > 1;
  for (Bucket& b : plan.buckets) {
    const int64_t len = b.elem_end - b.elem_begin;
    b.counts.resize(static_cast<size_t>(P));
    for (int r = 0; r < P; ++r) b.counts[r] = len / P + (r < len % P ? 1 : 0);
    for (int r = 0; r < me; ++r) b.own_offset += b.counts[r];
    b.shard_offset = plan.shard_numel;
    plan.shard_numel += plan.sharded ? b.counts[me] : 0;
  }
  for (const Bucket& b : plan.buckets) {
    int64_t own_begin = b.elem_begin, own_end = b.elem_end;
    if (opts.zero) {
      own_begin = b.elem_begin + b.own_offset;
      own_end = own_begin + b.counts[me];
    }
    for (int i = b.first_tensor; i < b.end_tensor; ++i) {
      const int64_t ts0 = elem_of(i), te0 = ts0 + ts[i].numel();
      const int64_t a = std::max(own_begin, ts0), e = std::min(own_end, te0);
      if (a >= e) continue;
      plan.owned.push_back({i, a - ts0, e - ts0, plan.sharded ? b.shard_offset + (a - own_begin) : a});
    }
  }
  // the optimizer walks its ranges in layout order
  std::sort(plan.owned.begin(), plan.owned.end(), [](const BucketPlan::Owned& x, const BucketPlan::Owned& y) {
    return x.tensor != y.tensor ? x.tensor < y.tensor : x.begin < y.begin;
  });
  return plan;
}

GradSync::GradSync(comm::Communicator& dp, Slab& params, Slab& grads, const GradSyncOptions& opts,
                   const ExecContext& ctx)
    : dp_(dp),
      params_(params),
      grads_(grads),
      opts_(opts),
      ctx_(ctx),
      plan_(plan_buckets(grads, opts, dp.size(), dp.rank())),
      shard_("zero_grad_shard", grads.device()),
      reduced_("grad_bf16_buckets", grads.device()) {
  HPCT_CHECK(opts_.reduce_dtype == DType::F32 || opts_.reduce_dtype == DType::BF16,
             "parallel.grad_dtype: gradients are reduced in fp32 or bf16, not {}", dtype_name(opts_.reduce_dtype));
  HPCT_CHECK(params_.tensors().size() == grads_.tensors().size(), "params and grads differ in count");
  HPCT_CHECK(params_.bytes() == grads_.bytes(), "params and grads slabs differ in layout");
  HPCT_CHECK(grads_.allocated(), "GradSync over the unallocated gradient slab {}", grads_.name());
  if (plan_.bf16_image) {  // the bf16 image of every bucket (the buckets tile [0, slab_numel))
    HPCT_CHECK(ctx_.device == grads_.device(),
               "parallel.grad_dtype = bf16 on rank {} of the {} group: the gradients are on {} but the casts would run "
               "on {}; pass the run's ExecContext (ParallelContext::exec()) to GradSync",
               dp_.rank(), dp_.name(), device_name(grads_.device()), device_name(ctx_.device));
    reduced_.add("grad_bf16", {std::max<int64_t>(plan_.slab_numel, 1)}, DType::BF16);
    reduced_.allocate();
    reduced_base_ = reduced_.tensors()[0].b16();
  }
  if (plan_.sharded) {
    shard_.add("grad_shard", {std::max<int64_t>(plan_.shard_numel, 1)});
    shard_.allocate();
  }
  HPCT_CHECK(shard_.bytes() == plan_.shard_bytes() && reduced_.bytes() == plan_.comm_bytes(),
             "gradient sync buffers of {} + {} bytes, planned {} + {}", shard_.bytes(), reduced_.bytes(),
             plan_.shard_bytes(), plan_.comm_bytes());
  float* base = plan_.sharded ? shard_.tensors()[0].f32() : static_cast<float*>(grads_.base());
  for (const BucketPlan::Owned& o : plan_.owned) owned_.push_back({o.tensor, o.begin, o.end, base + o.at});
  pending_.resize(buckets_.size());
  work_.resize(buckets_.size());
  launched_.assign(buckets_.size(), false);
}

std::string GradSync::describe() const {
  return fmt::format(
      "{} bucket(s) of >= {} (overlap {}), ZeRO-{}{}, reduced in {}{}", buckets_.size(),
      human_bytes(opts_.bucket_bytes), opts_.overlap ? "on" : "off", opts_.zero,
      opts_.zero ? fmt::format(" (gradient shard {} per rank)", human_bytes(plan_.shard_numel * 4.0)) : "",
      grad_dtype_name(opts_.reduce_dtype),
      reduced_.bytes() > 0 ? fmt::format(" (bucket buffer {})", human_bytes(static_cast<double>(reduced_.bytes())))
                           : "");
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
  if (reduced_base_ != nullptr) {
    // bf16: the bucket's image, reduced in place (ZeRO: this rank's share stays at own_offset); land() casts it back
    bf16* img = reduced_base_ + bk.elem_begin;
    kernels::cast(ctx_, img, base, len);
    if (opts_.zero)
      work_[b] = dp_.reduce_scatter_v_async(img, img + bk.own_offset, bk.counts, DType::BF16, comm::ReduceOp::Sum,
                                            what);
    else
      work_[b] = dp_.allreduce_async(img, len, DType::BF16, comm::ReduceOp::Sum, what);
  } else if (opts_.zero) {
    work_[b] = dp_.reduce_scatter_v_async(base, shard_.tensors()[0].f32() + bk.shard_offset, bk.counts, DType::F32,
                                          comm::ReduceOp::Sum, what);
  } else {
    work_[b] = dp_.allreduce_async(base, len, DType::F32, comm::ReduceOp::Sum, what);
  }
  launched_[b] = true;
}

void GradSync::land(size_t b) {
  if (reduced_base_ == nullptr) return;  // fp32: the reduction wrote the fp32 result itself
  const Bucket& bk = buckets_[b];
  if (opts_.zero)
    kernels::cast(ctx_, shard_.tensors()[0].f32() + bk.shard_offset, reduced_base_ + bk.elem_begin + bk.own_offset,
                  bk.counts[static_cast<size_t>(dp_.rank())]);
  else
    kernels::cast(ctx_, static_cast<float*>(grads_.base()) + bk.elem_begin, reduced_base_ + bk.elem_begin,
                  bk.elem_end - bk.elem_begin);
}

void GradSync::on_ready(int first, int end) {
  if (!armed_ || dp_.size() == 1) return;
  for (int i = first; i < end; ++i) --pending_[static_cast<size_t>(plan_.bucket_of_tensor[static_cast<size_t>(i)])];
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
  for (size_t b = 0; b < work_.size(); ++b) {
    work_[b]->wait();
    work_[b].reset();
    land(b);
  }
  exposed_ms_ = t.ms();
  armed_ = false;
}

void GradSync::gather_params() {
  gather_ms_ = 0.0;
  if (!opts_.zero || dp_.size() == 1) return;
  Timer t;
  for (size_t b = 0; b < buckets_.size(); ++b) {
    const Bucket& bk = buckets_[b];
    float* base = static_cast<float*>(params_.base()) + bk.elem_begin;
    work_[b] = dp_.allgather_v_async(base + bk.own_offset, base, bk.counts, DType::F32,
                                     fmt::format("parameter allgather, bucket {} of {}", b, buckets_.size()));
  }
  for (auto& w : work_) {
    w->wait();
    w.reset();
  }
  gather_ms_ = t.ms();
}

}  // namespace hpct::parallel
