#include "core/shared_object.hpp"

#include <dlfcn.h>

#include <fmt/format.h>

namespace hpct {

std::string shared_object_of(const void* symbol) {
  Dl_info info{};
  if (dladdr(symbol, &info) != 0 && info.dli_fname != nullptr && info.dli_fname[0] != '\0')
    return fmt::format("({})", info.dli_fname);
  return "(statically linked)";
}

}  // namespace hpct
