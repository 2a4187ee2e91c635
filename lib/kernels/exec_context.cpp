#include "kernels/exec_context.hpp"

#include "core/error.hpp"

namespace hpct {

const char* precision_name(Precision p) {
  switch (p) {
    case Precision::FP32: return "fp32";
    case Precision::TF32: return "tf32";
    case Precision::BF16: return "bf16";
    case Precision::FP16: return "fp16";
  }
  return "?";
}

Precision parse_precision(const std::string& s) {
  for (Precision p : {Precision::FP32, Precision::TF32, Precision::BF16, Precision::FP16})
    if (s == precision_name(p)) return p;
  HPCT_USAGE_FAIL("unknown precision \"{}\": use one of fp32, tf32, bf16, fp16", s);
}

}  // namespace hpct
