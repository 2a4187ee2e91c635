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

const char* attention_impl_name(AttentionImpl a) {
  switch (a) {
    case AttentionImpl::Own: return "own";
    case AttentionImpl::Cudnn: return "cudnn";
  }
  return "?";
}

AttentionImpl parse_attention_impl(const std::string& s) {
  for (AttentionImpl a : {AttentionImpl::Own, AttentionImpl::Cudnn})
    if (s == attention_impl_name(a)) return a;
  HPCT_USAGE_FAIL("unknown attention implementation \"{}\": use one of own, cudnn", s);
}

}  // namespace hpct
