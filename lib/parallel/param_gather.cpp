#include "parallel/param_gather.hpp"

#include <algorithm>

#include "core/format.hpp"
#include "core/timer.hpp"
#include "kernels/kernels.hpp"

namespace hpct::parallel {

namespace {
// Places start 64-byte aligned for every storage type (32 elements of a 16-bit type, 16 floats twice over).
constexpr int64_t kGatherAlign = 32;
int64_t aligned(int64_t n) { return (n + kGatherAlign - 1) / kGatherAlign * kGatherAlign; }
int64_t bucket_numel(const Bucket& b) { return b.elem_end - b.elem_begin; }
}  // namespace

size_t GatherPlan::shard_bytes(DType act) const {
  const size_t n = static_cast<size_t>(std::max<int64_t>(shard_numel, 1));
  return slab_aligned(n * sizeof(float)) + (act == DType::F32 ? 0 : slab_aligned(n * dtype_size(act)));
}

size_t GatherPlan::gather_bytes(DType act) const {
  return slab_aligned(static_cast<size_t>(std::max<int64_t>(ring_numel, 1)) * dtype_size(act)) +
         slab_aligned(static_cast<size_t>(std::max<int64_t>(pinned_numel, 1)) * dtype_size(act));
}

GatherPlan plan_gather(const BucketPlan& buckets) {
  HPCT_CHECK(buckets.ring && buckets.sharded, "ZeRO-3's parameter gathers need ZeRO-3's bucket plan at DP > 1");
  GatherPlan g;
  const size_t nb = buckets.buckets.size();
  g.place.assign(nb, 0);
  g.slot.assign(nb, -1);
  for (size_t b = 0; b < nb; ++b) {
    const int64_t len = aligned(bucket_numel(buckets.buckets[b]));
    if (buckets.bucket_pinned[b]) {
      g.place[b] = g.pinned_numel;
      g.pinned_numel += len;
      continue;
    }
    const int s = static_cast<int>(g.ring.size() % 2);
    g.slot[b] = s;
    g.slot_numel[s] = std::max(g.slot_numel[s], len);
    g.ring.push_back(static_cast<int>(b));
  }
  for (int b : g.ring) g.place[static_cast<size_t>(b)] = g.slot[static_cast<size_t>(b)] == 0 ? 0 : g.slot_numel[0];
  g.ring_numel = g.slot_numel[0] + g.slot_numel[1];
  g.shard_numel = buckets.shard_numel;
  return g;
}

ParamGather::ParamGather(comm::Communicator& dp, const BucketPlan& buckets, Slab& read, const ExecContext& ctx,
                         bool prefetch)
    : dp_(dp),
      buckets_(buckets),
      plan_(plan_gather(buckets)),
      read_(read),
      act_(read.tensors().empty() ? DType::F32 : read.tensors().front().dtype),
      ctx_(ctx),
      prefetch_(prefetch),
      shard_("zero3_param_shard", read.device()),
      gather_("zero3_param_gathers", read.device()) {
  HPCT_CHECK(!read_.allocated(),
             "ZeRO-3 over the allocated parameter slab {}: build the model with its parameters "
             "planned only",
             read_.name());
  HPCT_CHECK(ctx_.device == read_.device(), "ZeRO-3: the parameters are on {} but the kernels would run on {}",
             device_name(read_.device()), device_name(ctx_.device));
  const int64_t n = std::max<int64_t>(plan_.shard_numel, 1);
  shard_.add("master", {n});
  if (act_ != DType::F32) shard_.add("compute", {n}, act_);
  shard_.allocate();
  gather_.add("slots", {std::max<int64_t>(plan_.ring_numel, 1)}, act_);
  gather_.add("pinned", {std::max<int64_t>(plan_.pinned_numel, 1)}, act_);
  gather_.allocate();
  HPCT_CHECK(shard_.bytes() == plan_.shard_bytes(act_) && gather_.bytes() == plan_.gather_bytes(act_),
             "ZeRO-3 buffers of {} + {} bytes, planned {} + {}", shard_.bytes(), gather_.bytes(),
             plan_.shard_bytes(act_), plan_.gather_bytes(act_));
  master_base_ = shard_.tensors()[0].f32();
  compute_base_ = act_ == DType::F32 ? static_cast<void*>(master_base_) : shard_.tensors()[1].data;
  // the padding between tensors is gathered too: zeros, never read
  kernels::fill_zero(ctx_, shard_.base(), static_cast<int64_t>(shard_.bytes()));
  slots_ = static_cast<char*>(gather_.tensors()[0].data);
  pinned_ = static_cast<char*>(gather_.tensors()[1].data);
  // every tensor the kernels read at its bucket's place, at the offset it has in the bucket's element range
  const size_t es = dtype_size(act_);
  const auto& ts = read_.tensors();
  HPCT_CHECK(ts.size() == buckets_.bucket_of_tensor.size(), "ZeRO-3: {} tensors to read, {} in the bucket plan",
             ts.size(), buckets_.bucket_of_tensor.size());
  std::vector<void*> data;
  for (size_t i = 0; i < ts.size(); ++i) {
    const int64_t elem = buckets_.tensor_elem[i];  // the tensor's element offset in the layout the buckets tile
    HPCT_CHECK(ts[i].dtype == act_, "ZeRO-3: tensor {} is {}, the gathers move {}", ts[i].name, dtype_name(ts[i].dtype),
               dtype_name(act_));
    const auto b = static_cast<size_t>(buckets_.bucket_of_tensor[i]);
    const Bucket& bk = buckets_.buckets[b];
    char* base = (plan_.slot[b] < 0 ? pinned_ : slots_) + static_cast<size_t>(plan_.place[b]) * es;
    data.push_back(base + static_cast<size_t>(elem - bk.elem_begin) * es);
  }
  read_.bind(data);
  holder_.assign(2, -1);
  resident_.assign(buckets_.buckets.size(), false);
  work_.resize(buckets_.buckets.size());
}

std::string ParamGather::describe() const {
  return fmt::format("ZeRO-3: parameters sharded ({} fp32 masters{} per rank), gathered in {} layer by layer into two "
                     "slots of {} and {} ({}){}",
                     human_bytes(plan_.shard_numel * 4.0),
                     act_ == DType::F32 ? "" : fmt::format(" + a {} shard", dtype_name(act_)), dtype_name(act_),
                     human_bytes(static_cast<double>(plan_.slot_numel[0] * dtype_size(act_))),
                     human_bytes(static_cast<double>(plan_.slot_numel[1] * dtype_size(act_))),
                     prefetch_ ? "the next layer prefetched" : "no prefetch",
                     plan_.pinned_numel == 0
                         ? ""
                         : fmt::format(", {} gathered once per step and kept (the tied embedding)",
                                       human_bytes(static_cast<double>(plan_.pinned_numel * dtype_size(act_)))));
}

void ParamGather::store_whole(int tensor, const float* host) {
  for (const BucketPlan::Owned& o : buckets_.owned) {
    if (o.tensor != tensor || o.end <= o.begin) continue;
    kernels::copy_from_host(ctx_, master_base_ + o.at, host + o.begin,
                            (o.end - o.begin) * static_cast<int64_t>(sizeof(float)));
  }
  kernels::synchronize(ctx_);  // `host` may be refilled by the caller
}

void ParamGather::refresh() {
  for (size_t b = 0; b < work_.size(); ++b) {
    if (work_[b]) {  // a prefetch the step did not read (none in the models' schedules): done before its source changes
      work_[b]->wait();
      work_[b].reset();
    }
    resident_[b] = false;
  }
  holder_.assign(2, -1);
  if (act_ == DType::BF16) kernels::cast(ctx_, static_cast<bf16*>(compute_base_), master_base_, plan_.shard_numel);
  if (act_ == DType::F16) kernels::cast(ctx_, static_cast<fp16*>(compute_base_), master_base_, plan_.shard_numel);
}

void ParamGather::launch(size_t b) {
  const Bucket& bk = buckets_.buckets[b];
  const size_t es = dtype_size(act_);
  const int s = plan_.slot[b];
  if (s >= 0) {  // the slot's previous bucket is done (double buffering: the model reads it no more)
    const int prev = holder_[static_cast<size_t>(s)];
    if (prev >= 0 && prev != static_cast<int>(b)) {
      if (work_[static_cast<size_t>(prev)]) {
        work_[static_cast<size_t>(prev)]->wait();
        work_[static_cast<size_t>(prev)].reset();
      }
      resident_[static_cast<size_t>(prev)] = false;
    }
    holder_[static_cast<size_t>(s)] = static_cast<int>(b);
  }
  char* dst = (s < 0 ? pinned_ : slots_) + static_cast<size_t>(plan_.place[b]) * es;
  const char* src = static_cast<const char*>(compute_base_) + static_cast<size_t>(bk.shard_offset) * es;
  work_[b] = dp_.allgather_v_async(src, dst, bk.counts, act_,
                                   fmt::format("ZeRO-3 parameter gather, bucket {} of {}", b, work_.size()));
  resident_[b] = true;
}

void ParamGather::ensure(size_t b) {
  if (!resident_[b]) launch(b);
  if (work_[b]) {
    Timer t;
    work_[b]->wait();
    work_[b].reset();
    wait_ms_ += t.ms();
  }
}

void ParamGather::reading(int first, int end, int next_first, int next_end) {
  int last = -1;
  for (int i = first; i < end; ++i) {
    const int b = buckets_.bucket_of_tensor[static_cast<size_t>(i)];
    if (b != last) ensure(static_cast<size_t>(b));
    last = b;
  }
  if (!prefetch_) return;
  last = -1;
  for (int i = next_first; i < next_end; ++i) {
    const int b = buckets_.bucket_of_tensor[static_cast<size_t>(i)];
    if (b != last && !resident_[static_cast<size_t>(b)]) launch(static_cast<size_t>(b));
    last = b;
  }
  dp_.progress();
}

}  // namespace hpct::parallel
