#include "models/compute_copy.hpp"

#include <type_traits>

#include "core/error.hpp"
#include "kernels/kernels.hpp"

namespace hpct::models {

void refresh_compute_copy(const ExecContext& ctx, Slab& copy, const Slab& masters) {
  auto& dst = copy.tensors();
  if (dst.empty()) return;
  const auto& src = masters.tensors();
  HPCT_CHECK(dst.size() == src.size(), "compute copy {} holds {} tensors, its masters {} hold {}", copy.name(),
             dst.size(), masters.name(), src.size());
  for (size_t i = 0; i < src.size(); ++i) {
    HPCT_CHECK(dst[i].numel() == src[i].numel(), "compute copy {}: tensor {} has {} elements, its master {} has {}",
               copy.name(), dst[i].name, dst[i].numel(), src[i].name, src[i].numel());
    with_activation_type(dst[i].dtype, [&](auto type) {
      using A = typename decltype(type)::type;
      if constexpr (std::is_same_v<A, float>)
        HPCT_FAIL("compute copy {}: tensor {} is f32; fp32 storage reads the masters and keeps no copy", copy.name(),
                  dst[i].name);
      else
        kernels::cast(ctx, dst[i].as<A>(), src[i].f32(), src[i].numel());
    });
  }
}

}  // namespace hpct::models
