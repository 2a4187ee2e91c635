#include "core/device_peaks.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cctype>

#include "core/error.hpp"

namespace hpct {

namespace {

// Dense figures. NVIDIA's datasheets give the tensor-core rates (tf32, bf16, fp16) "with sparsity" (2:4 structured
// sparsity); the dense rate, which training uses, is half of it. fp32 is the non-tensor-core rate.
constexpr std::array<DevicePeaks, 4> kTable{{
    // NVIDIA H100 NVL and H200 NVL datasheets (per GPU): FP32 60; TF32 835, BF16 / FP16 1,671 with sparsity.
    {"H100/H200 NVL", "H100 NVL|H200 NVL", 60.0, 417.5, 835.5, 835.5,
     "NVIDIA H100 NVL / H200 NVL datasheets, dense = half the sparsity figures"},
    // NVIDIA H100 datasheet, H100 PCIe: FP32 51; TF32 756, BF16 / FP16 1,513 with sparsity.
    {"H100 PCIe", "H100 PCIe", 51.0, 378.0, 756.5, 756.5,
     "NVIDIA H100 datasheet (PCIe), dense = half the sparsity figures"},
    // NVIDIA H100 datasheet (H100 SXM), H200 datasheet (H200 SXM), GH200 datasheet: FP32 67; TF32 989,
    // BF16 / FP16 1,979 with sparsity. nvidia-smi names the SXM parts "NVIDIA H100 80GB HBM3", "NVIDIA H200".
    {"H100/H200 SXM", "H100|H200", 67.0, 494.5, 989.5, 989.5,
     "NVIDIA H100 / H200 SXM datasheets, dense = half the sparsity figures"},
    // NVIDIA A100 datasheet (SXM4 and PCIe alike): FP32 19.5; TF32 156, BF16 / FP16 312 dense.
    {"A100", "A100", 19.5, 156.0, 312.0, 312.0, "NVIDIA A100 datasheet, dense figures"},
}};

std::string upper(std::string_view s) {
  std::string u(s);
  std::transform(u.begin(), u.end(), u.begin(), [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
  return u;
}

bool matches(std::string_view pattern_list, const std::string& name_upper) {
  size_t start = 0;
  while (start <= pattern_list.size()) {
    const size_t bar = std::min(pattern_list.find('|', start), pattern_list.size());
    const std::string pattern = upper(pattern_list.substr(start, bar - start));
    if (!pattern.empty() && name_upper.find(pattern) != std::string::npos) return true;
    start = bar + 1;
  }
  return false;
}

std::string json_number(double v) { return fmt::format("{}", v); }

}  // namespace

double DevicePeaks::tflops(std::string_view precision) const {
  if (precision == "fp32") return fp32;
  if (precision == "tf32") return tf32;
  if (precision == "bf16") return bf16;
  if (precision == "fp16") return fp16;
  HPCT_USAGE_FAIL("unknown precision '{}' for a peak lookup (fp32, tf32, bf16 or fp16)", precision);
}

std::span<const DevicePeaks> device_peak_table() { return kTable; }

const DevicePeaks* find_device_peaks(std::string_view device_name) {
  const std::string name = upper(device_name);
  if (name.empty()) return nullptr;
  for (const DevicePeaks& p : kTable)
    if (matches(p.match, name)) return &p;
  return nullptr;
}

std::optional<double> peak_tflops(std::string_view device_name, std::string_view precision) {
  const DevicePeaks* p = find_device_peaks(device_name);
  if (p == nullptr) {
    DevicePeaks{}.tflops(precision);  // an unknown precision is an error even for an unknown device
    return std::nullopt;
  }
  return p->tflops(precision);
}

std::string json_quote(std::string_view s) {
  std::string out = "\"";
  for (const char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (u < 0x20) {
      out += fmt::format("\\u{:04x}", u);
    } else {
      out += c;
    }
  }
  return out + "\"";
}

std::string peak_json_members(std::string_view device_name, std::string_view precision) {
  const std::optional<double> peak = peak_tflops(device_name, precision);
  const DevicePeaks* p = find_device_peaks(device_name);
  const std::string entry = p == nullptr
                                ? std::string("null")
                                : fmt::format(R"({{"label":{},"fp32":{},"tf32":{},"bf16":{},"fp16":{},"source":{}}})",
                                              json_quote(p->label), json_number(p->fp32), json_number(p->tf32),
                                              json_number(p->bf16), json_number(p->fp16), json_quote(p->source));
  return fmt::format(R"("device_name":{},"device_peaks":{},"peak_tflops":{})",
                     device_name.empty() ? std::string("null") : json_quote(device_name), entry,
                     peak ? json_number(*peak) : std::string("null"));
}

}  // namespace hpct
