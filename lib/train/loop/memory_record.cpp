#include "train/loop/memory_record.hpp"

#include <fmt/format.h>
#include <sys/resource.h>

#include "core/format.hpp"
#if HPCT_HAVE_CUDA
#include "kernels/cuda/cuda_device.hpp"
#endif

namespace hpct::train {

double resident_bytes(Device device) {
#if HPCT_HAVE_CUDA
  if (device == Device::CUDA) return static_cast<double>(kernels::cuda_device_memory_in_use());
#else
  (void)device;
#endif
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) * 1024.0;  // Linux: KiB
}

MemoryRecord gather_memory_record(comm::Communicator& world, const MemoryKinds& mine, Device device) {
  double v[9] = {mine.params,       mine.grads,   mine.optimizer,        mine.comm, mine.activations, mine.workspace,
                 mine.ckpt_staging, mine.total(), resident_bytes(device)};
  world.allreduce(v, 9, DType::F64, comm::ReduceOp::Max, "memory record");
  MemoryRecord r;
  r.kinds = {v[0], v[1], v[2], v[3], v[4], v[5], v[6]};
  r.peak = v[7];
  r.rss = v[8];
  return r;
}

double gather_rss(comm::Communicator& world, Device device) {
  double v = resident_bytes(device);
  world.allreduce(&v, 1, DType::F64, comm::ReduceOp::Max, "memory record (rss)");
  return v;
}

std::vector<std::pair<std::string, std::optional<double>>> memory_fields(const MemoryRecord& r) {
  const MemoryKinds& k = r.kinds;
  return {{"params", k.params},
          {"grads", k.grads},
          {"optimizer", k.optimizer},
          {"comm", k.comm},
          {"activations", k.activations},
          {"workspace", k.workspace},
          {"ckpt_staging", k.ckpt_staging},
          {"peak", r.peak},
          {"rss", r.rss}};
}

std::string describe_memory_record(const MemoryRecord& r, int world) {
  std::string s = fmt::format("memory record (max over {} ranks):", world);
  const auto fields = memory_fields(r);
  for (size_t i = 0; i < fields.size(); ++i)
    s += fmt::format("{} {} {}", i ? " |" : "", fields[i].first, human_bytes(*fields[i].second));
  return s;
}

}  // namespace hpct::train
