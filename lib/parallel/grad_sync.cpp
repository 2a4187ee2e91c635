#include "parallel/grad_sync.hpp"

#include <algorithm>

#include "core/format.hpp"
#include "core/test_fault.hpp"
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

int zero_shard_size(int zero_group, int dp, const std::string& where) {
  HPCT_USAGE_CHECK(zero_group == 0 || zero_group == dp || (zero_group >= 2 && zero_group < dp && dp % zero_group == 0),
                   "{}: parallel.zero_group = {} does not divide the data-parallel size {} into groups of 2 or more "
                   "ranks; choose a divisor of {} that is at least 2 (or 0: shard over the whole DP group)",
                   where, zero_group, dp, dp);
  return zero_group == 0 ? dp : zero_group;
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

int64_t BucketPlan::image_numel() const {
  if (!bf16_image) return 0;
  return ring ? ring_numel + pinned_numel : slab_numel;
}

size_t BucketPlan::comm_bytes() const {
  return bf16_image ? slab_aligned(static_cast<size_t>(std::max<int64_t>(image_numel(), 1)) * sizeof(bf16)) : 0;
}

size_t BucketPlan::bucket_bytes() const {
  if (!ring) return 0;
  return slab_aligned(static_cast<size_t>(std::max<int64_t>(ring_numel, 1)) * sizeof(float)) +
         slab_aligned(static_cast<size_t>(std::max<int64_t>(pinned_numel, 1)) * sizeof(float));
}

namespace {

constexpr int64_t kPlaceAlign = 16;  // ring places keep the slab's 64-byte alignment of every tensor
int64_t round_up(int64_t n, int64_t a) { return (n + a - 1) / a * a; }

// ZeRO-2: places every bucket (see BucketPlan) for the model's write order.
void place_buckets(BucketPlan& plan, const GradWriteOrder& order, int n_tensors) {
  const size_t nb = plan.buckets.size();
  // when each bucket opens (the first group writing one of its tensors) and completes (the last such group)
  std::vector<int> opens(nb, -1), completes(nb, -1), covered(static_cast<size_t>(n_tensors), 0);
  for (size_t g = 0; g < order.groups.size(); ++g)
    for (int i = order.groups[g].first; i < order.groups[g].second; ++i) {
      HPCT_CHECK(0 <= i && i < n_tensors, "write group [{}, {}) beyond the {} gradients", order.groups[g].first,
                 order.groups[g].second, n_tensors);
      ++covered[static_cast<size_t>(i)];
      const auto b = static_cast<size_t>(plan.bucket_of_tensor[static_cast<size_t>(i)]);
      if (opens[b] < 0) opens[b] = static_cast<int>(g);
      completes[b] = static_cast<int>(g);
    }
  for (int i = 0; i < n_tensors; ++i)
    HPCT_CHECK(covered[static_cast<size_t>(i)] == 1, "gradient {} is in {} write groups (should be in one)", i,
               covered[static_cast<size_t>(i)]);
  auto len = [&](int b) {  // a bucket's place: its elements, rounded up to keep the alignment
    return round_up(plan.buckets[static_cast<size_t>(b)].elem_end - plan.buckets[static_cast<size_t>(b)].elem_begin,
                    kPlaceAlign);
  };
  plan.place.assign(nb, 0);
  std::vector<int> ring;  // ring buckets in the order they open
  for (size_t b = 0; b < nb; ++b) {
    if (plan.bucket_pinned[b]) {
      plan.place[b] = plan.pinned_numel;
      plan.pinned_numel += len(static_cast<int>(b));
    } else {
      ring.push_back(static_cast<int>(b));
    }
  }
  std::stable_sort(ring.begin(), ring.end(), [&](int x, int y) { return opens[x] < opens[y]; });
  auto overlap = [&](int x, int y) {
    const int64_t px = plan.place[static_cast<size_t>(x)], py = plan.place[static_cast<size_t>(y)];
    return px < py + len(y) && py < px + len(x);
  };
  int64_t largest = 0, total = 0;
  for (int b : ring) {
    largest = std::max(largest, len(b));
    total += len(b);
  }
  // the smallest ring, in steps of a quarter of the largest bucket, where a bucket opens only over complete ones (the
  // whole of the buckets end to end always works)
  const int64_t step = std::max<int64_t>(round_up(largest / 4, kPlaceAlign), kPlaceAlign);
  for (int64_t size = largest;; size = std::min(size + step, total)) {
    int64_t head = 0;
    bool ok = true;
    for (size_t k = 0; k < ring.size() && ok; ++k) {
      const int b = ring[k];
      if (head + len(b) > size) head = 0;
      plan.place[static_cast<size_t>(b)] = head;
      head += len(b);
      for (size_t j = 0; j < k && ok; ++j)
        ok = !overlap(b, ring[j]) || completes[static_cast<size_t>(ring[j])] < opens[static_cast<size_t>(b)];
    }
    if (ok || size >= total) {
      HPCT_CHECK(ok, "no ring of gradient buckets fits the write order");
      plan.ring_numel = size;
      break;
    }
  }
  plan.overlaps.assign(nb, {});
  for (int b : ring)
    for (int d : ring)
      if (overlap(b, d)) plan.overlaps[static_cast<size_t>(b)].push_back(d);
}

}  // namespace

BucketPlan plan_buckets(const Slab& grads, const GradSyncOptions& opts, int dp_size, int dp_rank,
                        const GradWriteOrder* order) {
  HPCT_CHECK(opts.zero >= 0 && opts.zero <= 3, "parallel.zero = {} (0, 1, 2 or 3)", opts.zero);
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
  plan.ring = opts.zero >= 2 && dp_size > 1;
  HPCT_CHECK(!plan.ring || order != nullptr, "ZeRO-2 and ZeRO-3 need the model's gradient write order");
  auto pinned = [&](int i) {
    return plan.ring && static_cast<size_t>(i) < order->pinned.size() && order->pinned[static_cast<size_t>(i)];
  };
  // ZeRO-3 gathers parameters bucket by bucket as the model reads them, one write group (a layer) at a time: a bucket
  // is one group (less its pinned tensors), whatever bucket_bytes says
  const bool by_group = opts.zero == 3 && dp_size > 1;
  std::vector<int> group_of(static_cast<size_t>(n), -1);
  if (by_group)
    for (size_t g = 0; g < order->groups.size(); ++g)
      for (int i = order->groups[g].first; i < order->groups[g].second; ++i)
        if (0 <= i && i < n) group_of[static_cast<size_t>(i)] = static_cast<int>(g);
  auto joins = [&](int i) {  // whether tensor i - 1 may join the bucket that starts at tensor i
    if (pinned(i) || pinned(i - 1)) return false;
    return by_group ? group_of[static_cast<size_t>(i - 1)] == group_of[static_cast<size_t>(i)] : true;
  };
  // buckets in reverse layout order (ZeRO-2: a pinned tensor is a bucket of its own)
  plan.bucket_of_tensor.assign(static_cast<size_t>(n), -1);
  for (int i = 0; i < n; ++i) plan.tensor_elem.push_back(elem_of(i));
  int end = n;
  while (end > 0) {
    int first = end - 1;
    size_t bytes = ts[first].bytes();
    while (first > 0 && (by_group || bytes < opts.bucket_bytes) && joins(first)) bytes += ts[--first].bytes();
    Bucket b;
    b.first_tensor = first;
    b.end_tensor = end;
    b.elem_begin = elem_of(first);
    b.elem_end = elem_of(end - 1) + ts[end - 1].numel();
    for (int i = first; i < end; ++i) plan.bucket_of_tensor[i] = static_cast<int>(plan.buckets.size());
    plan.slab_numel = std::max(plan.slab_numel, b.elem_end);
    plan.buckets.push_back(b);
    plan.bucket_pinned.push_back(pinned(first));
    end = first;
  }
  if (plan.ring) place_buckets(plan, *order, n);

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
                   const ExecContext& ctx, const GradWriteOrder* order, comm::Communicator* replicas)
    : dp_(dp),
      replicas_(replicas),
      params_(params),
      grads_(grads),
      opts_(opts),
      ctx_(ctx),
      plan_(plan_buckets(grads, opts, dp.size(), dp.rank(), order)),
      shard_("zero_grad_shard", grads.device()),
      reduced_("grad_bf16_buckets", grads.device()),
      buckets_mem_("zero2_gradient_buckets", grads.device()) {
  HPCT_CHECK(opts_.reduce_dtype == DType::F32 || opts_.reduce_dtype == DType::BF16,
             "parallel.grad_dtype: gradients are reduced in fp32 or bf16, not {}", dtype_name(opts_.reduce_dtype));
  HPCT_CHECK(params_.tensors().size() == grads_.tensors().size(), "params and grads differ in count");
  HPCT_CHECK(params_.bytes() == grads_.bytes(), "params and grads slabs differ in layout");
  if (plan_.ring) {
    // ZeRO-2 and ZeRO-3: the gradients live in the buckets; the model planned its gradient slab without allocating it
    HPCT_CHECK(!grads_.allocated(),
               "ZeRO-{} over the allocated gradient slab {}: build the model with its gradients planned only",
               opts_.zero, grads_.name());
    HPCT_CHECK(opts_.overlap, "ZeRO-2 reduce-scatters the buckets as backward produces them (overlap on)");
    HPCT_CHECK(ctx_.device == grads_.device(), "ZeRO-2: the gradients are on {} but the kernels would run on {}",
               device_name(grads_.device()), device_name(ctx_.device));
    buckets_mem_.add("ring", {std::max<int64_t>(plan_.ring_numel, 1)});
    buckets_mem_.add("pinned", {std::max<int64_t>(plan_.pinned_numel, 1)});
    buckets_mem_.allocate();
    ring_ = buckets_mem_.tensors()[0].f32();
    pinned_ = buckets_mem_.tensors()[1].f32();
    std::vector<void*> data;
    for (size_t i = 0; i < grads_.tensors().size(); ++i) {
      const auto b = static_cast<size_t>(plan_.bucket_of_tensor[i]);
      const int64_t elem = static_cast<int64_t>(grads_.planned_offset(i) / sizeof(float));
      data.push_back(bucket_data(b) + (elem - buckets_[b].elem_begin));
    }
    grads_.bind(data);
    for (size_t b = 0; b < buckets_.size(); ++b)
      if (!plan_.bucket_pinned[b]) ring_order_.push_back(static_cast<int>(b));
    opened_.assign(buckets_.size(), false);
    HPCT_CHECK(buckets_mem_.bytes() == plan_.bucket_bytes(), "ZeRO-2 buckets of {} bytes, planned {}",
               buckets_mem_.bytes(), plan_.bucket_bytes());
  }
  HPCT_CHECK(grads_.allocated(), "GradSync over the unallocated gradient slab {}", grads_.name());
  if (plan_.bf16_image) {  // the bf16 image of every bucket (the buckets tile [0, slab_numel); ZeRO-2: their places)
    HPCT_CHECK(ctx_.device == grads_.device(),
               "parallel.grad_dtype = bf16 on rank {} of the {} group: the gradients are on {} but the casts would run "
               "on {}; pass the run's ExecContext (ParallelContext::exec()) to GradSync",
               dp_.rank(), dp_.name(), device_name(grads_.device()), device_name(ctx_.device));
    reduced_.add("grad_bf16", {std::max<int64_t>(plan_.image_numel(), 1)}, DType::BF16);
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
  // test hook (core/test_fault.hpp, zero_shard_offset): the gradient shard read one element early
  const bool shifted = plan_.sharded && fault_active(FaultKind::ZeroShardOffset, dp_.rank());
  for (const BucketPlan::Owned& o : plan_.owned)
    owned_.push_back({o.tensor, o.begin, o.end, base + o.at - (shifted && o.at > 0 ? 1 : 0)});
  pending_.resize(buckets_.size());
  work_.resize(buckets_.size());
}

std::string GradSync::describe() const {
  return fmt::format(
      "{} bucket(s) of >= {} (overlap {}), ZeRO-{}{}, reduced in {}{}", buckets_.size(),
      human_bytes(opts_.bucket_bytes), opts_.overlap ? "on" : "off", opts_.zero,
      opts_.zero ? fmt::format(" (gradient shard {} per rank{})", human_bytes(plan_.shard_numel * 4.0),
                               plan_.ring ? fmt::format("; reduce-scattered every micro-batch from a ring of {} and {} "
                                                        "kept whole",
                                                        human_bytes(plan_.ring_numel * 4.0),
                                                        human_bytes(plan_.pinned_numel * 4.0))
                                          : "")
                 : "",
      grad_dtype_name(opts_.reduce_dtype),
      reduced_.bytes() > 0 ? fmt::format(" (bucket buffer {})", human_bytes(static_cast<double>(reduced_.bytes())))
                           : "");
}

float* GradSync::bucket_data(size_t b) { return (plan_.bucket_pinned[b] ? pinned_ : ring_) + plan_.place[b]; }

bf16* GradSync::bucket_image(size_t b) {
  if (!plan_.ring) return reduced_base_ + buckets_[b].elem_begin;
  return reduced_base_ + (plan_.bucket_pinned[b] ? plan_.ring_numel : 0) + plan_.place[b];
}

void GradSync::begin_step() {
  if (!plan_.ring) return;
  // the shard sums the step's micro-batches; the pinned buckets accumulate in place until finish()
  kernels::fill_zero(ctx_, shard_.tensors()[0].f32(), static_cast<int64_t>(shard_.tensors()[0].bytes()));
  kernels::fill_zero(ctx_, pinned_, static_cast<int64_t>(buckets_mem_.tensors()[1].bytes()));
  for (size_t b = 0; b < buckets_.size(); ++b)
    if (plan_.bucket_pinned[b]) pending_[b] = 0;
}

void GradSync::begin_micro_batch() {
  HPCT_CHECK(plan_.ring, "begin_micro_batch outside ZeRO-2");
  armed_ = true;
  next_launch_ = 0;
  for (size_t b = 0; b < buckets_.size(); ++b) {
    if (plan_.bucket_pinned[b]) continue;
    pending_[b] = buckets_[b].end_tensor - buckets_[b].first_tensor;
    opened_[b] = false;
  }
}

void GradSync::wait_and_land(size_t b) {
  if (!work_[b]) return;
  work_[b]->wait();
  work_[b].reset();
  land(b);
}

void GradSync::open(int b) {
  for (int d : plan_.overlaps[static_cast<size_t>(b)]) wait_and_land(static_cast<size_t>(d));
  const Bucket& bk = buckets_[static_cast<size_t>(b)];
  kernels::fill_zero(ctx_, bucket_data(static_cast<size_t>(b)),
                     static_cast<int64_t>(bk.elem_end - bk.elem_begin) * static_cast<int64_t>(sizeof(float)));
  opened_[static_cast<size_t>(b)] = true;
}

void GradSync::writing(int first, int end) {
  if (!plan_.ring) return;
  HPCT_CHECK(armed_, "GradSync::writing outside a micro-batch (begin_micro_batch not called)");
  for (int i = first; i < end; ++i) {
    const int b = plan_.bucket_of_tensor[static_cast<size_t>(i)];
    if (!plan_.bucket_pinned[static_cast<size_t>(b)] && !opened_[static_cast<size_t>(b)]) open(b);
  }
}

void GradSync::arm() {
  armed_ = true;
  next_launch_ = 0;
  for (size_t b = 0; b < buckets_.size(); ++b) pending_[b] = buckets_[b].end_tensor - buckets_[b].first_tensor;
}

void GradSync::launch(size_t b) {
  const Bucket& bk = buckets_[b];
  const int64_t len = bk.elem_end - bk.elem_begin;
  const std::string what = fmt::format("gradient bucket {} of {}", b, buckets_.size());
  if (b == 0) {  // test hooks (core/test_fault.hpp): this rank's contribution to bucket 0 counted twice, or dropped
    float* mine = plan_.ring ? bucket_data(b) : static_cast<float*>(grads_.base()) + bk.elem_begin;
    if (fault_active(FaultKind::DpBucketTwice, dp_.rank())) kernels::scale(ctx_, mine, 2.0f, len);
    if (fault_active(FaultKind::DpBucketDropped, dp_.rank())) kernels::scale(ctx_, mine, 0.0f, len);
  }
  if (plan_.ring) {
    // ZeRO-2: a ring bucket is reduce-scattered in place (this rank's share stays at own_offset; land() adds it to the
    // shard), a pinned one straight into the shard (once per step, after the last micro-batch). bf16: the bucket's
    // image at its place, reduced in place; land() casts the share back
    float* data = bucket_data(b);
    if (reduced_base_ != nullptr) {
      bf16* img = bucket_image(b);
      kernels::cast(ctx_, img, data, len);
      work_[b] = dp_.reduce_scatter_v_async(img, img + bk.own_offset, bk.counts, DType::BF16, comm::ReduceOp::Sum,
                                            what);
      return;
    }
    float* recv = plan_.bucket_pinned[b] ? shard_.tensors()[0].f32() + bk.shard_offset : data + bk.own_offset;
    work_[b] = dp_.reduce_scatter_v_async(data, recv, bk.counts, DType::F32, comm::ReduceOp::Sum, what);
    return;
  }
  float* base = static_cast<float*>(grads_.base()) + bk.elem_begin;
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
}

void GradSync::land(size_t b) {
  const Bucket& bk = buckets_[b];
  if (plan_.ring) {  // ZeRO-2: this micro-batch's reduced share joins the step's sum (a pinned bucket wrote it)
    const int64_t n = bk.counts[static_cast<size_t>(dp_.rank())];
    float* sum = shard_.tensors()[0].f32() + bk.shard_offset;
    float* share = bucket_data(b) + bk.own_offset;
    if (reduced_base_ != nullptr) {  // bf16: the reduced share, cast back (a pinned one: straight into the shard)
      kernels::cast(ctx_, plan_.bucket_pinned[b] ? sum : share, bucket_image(b) + bk.own_offset, n);
      if (plan_.bucket_pinned[b]) return;
    }
    if (!plan_.bucket_pinned[b]) kernels::residual_forward<float>(ctx_, sum, sum, share, n);
    return;
  }
  if (reduced_base_ == nullptr) return;  // fp32: the reduction wrote the fp32 result itself
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
  if (plan_.ring) {  // ZeRO-2: the ring buckets go out in order as they complete, every micro-batch
    while (next_launch_ < ring_order_.size() && pending_[static_cast<size_t>(ring_order_[next_launch_])] == 0)
      launch(static_cast<size_t>(ring_order_[next_launch_++]));
    dp_.progress();
    return;
  }
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
  if (plan_.ring) {  // ZeRO-2: the last micro-batch's ring buckets are out; the pinned ones go now, once per step
    HPCT_CHECK(next_launch_ == ring_order_.size(), "ZeRO-2: {} of {} gradient buckets incomplete after backward",
               ring_order_.size() - next_launch_, ring_order_.size());
    for (size_t b = 0; b < buckets_.size(); ++b)
      if (plan_.bucket_pinned[b]) launch(b);
  } else {
    while (next_launch_ < buckets_.size()) launch(next_launch_++);
  }
  for (size_t b = 0; b < buckets_.size(); ++b) wait_and_land(b);
  sum_over_replicas();
  exposed_ms_ = t.ms();
  armed_ = false;
}

void GradSync::sum_over_replicas() {
  // hybrid sharding: the same share of every shard group holds a partial sum (its group's ranks); one allreduce over
  // those replicas completes it, fp32, after the group's reduce-scatter (ZeRO++ hpZ / FSDP HYBRID_SHARD)
  if (replicas_ == nullptr || replicas_->size() == 1 || !plan_.sharded) return;
  replicas_->allreduce(shard_.tensors()[0].f32(), plan_.shard_numel, DType::F32, comm::ReduceOp::Sum,
                       "gradient shard over the ZeRO replica group");
}

void GradSync::gather_params() {
  gather_ms_ = 0.0;
  // ZeRO-3: nothing to gather after the step (the model's reads gather: parallel/param_gather.hpp)
  if (!opts_.zero || opts_.zero == 3 || dp_.size() == 1) return;
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
