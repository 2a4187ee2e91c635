#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "core/device_peaks.hpp"
#include "core/error.hpp"

// The names nvidia-smi / cudaDeviceProp report, mapped to the dense datasheet figures (docs/performance.md).
TEST(DevicePeaks, NamesAsTheDriverReportsThem) {
  EXPECT_EQ(hpct::peak_tflops("NVIDIA H100 80GB HBM3", "bf16"), 989.5);
  EXPECT_EQ(hpct::peak_tflops("NVIDIA H100 80GB HBM3", "fp16"), 989.5);
  EXPECT_EQ(hpct::peak_tflops("NVIDIA H100 80GB HBM3", "tf32"), 494.5);
  EXPECT_EQ(hpct::peak_tflops("NVIDIA H100 80GB HBM3", "fp32"), 67.0);
  EXPECT_EQ(hpct::peak_tflops("NVIDIA H200", "bf16"), 989.5);
  EXPECT_EQ(hpct::peak_tflops("NVIDIA GH200 480GB", "bf16"), 989.5);
  EXPECT_EQ(hpct::peak_tflops("NVIDIA H100 PCIe", "bf16"), 756.5);
  EXPECT_EQ(hpct::peak_tflops("NVIDIA H100 NVL", "bf16"), 835.5);
  EXPECT_EQ(hpct::peak_tflops("NVIDIA H200 NVL", "fp32"), 60.0);
  EXPECT_EQ(hpct::peak_tflops("NVIDIA A100-SXM4-80GB", "bf16"), 312.0);
  EXPECT_EQ(hpct::peak_tflops("NVIDIA A100 80GB PCIe", "tf32"), 156.0);
  EXPECT_EQ(hpct::peak_tflops("NVIDIA A100-SXM4-40GB", "fp32"), 19.5);
}

TEST(DevicePeaks, CaseInsensitiveAndMostSpecificFirst) {
  EXPECT_EQ(hpct::peak_tflops("nvidia h100 nvl", "bf16"), 835.5);  // not the generic H100 entry
  const hpct::DevicePeaks* p = hpct::find_device_peaks("H100 SXM");
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p->label, "H100/H200 SXM");
  EXPECT_FALSE(p->source.empty());
}

TEST(DevicePeaks, UnknownDeviceIsNotAnError) {
  EXPECT_EQ(hpct::find_device_peaks(""), nullptr);
  EXPECT_EQ(hpct::find_device_peaks("Tesla V100-SXM2-16GB"), nullptr);
  EXPECT_FALSE(hpct::peak_tflops("AMD EPYC 7B13", "fp32").has_value());
  EXPECT_FALSE(hpct::peak_tflops("", "bf16").has_value());
}

TEST(DevicePeaks, UnknownPrecisionIsAUsageError) {
  EXPECT_THROW(hpct::peak_tflops("NVIDIA H100 80GB HBM3", "int8"), hpct::UsageError);
  EXPECT_THROW(hpct::peak_tflops("", "BF16"), hpct::UsageError);
}

TEST(DevicePeaks, TableIsConsistent) {
  // every entry: positive figures, fp32 < tf32 < bf16 = fp16 (dense tensor-core rates), a label and a source
  ASSERT_FALSE(hpct::device_peak_table().empty());
  for (const hpct::DevicePeaks& p : hpct::device_peak_table()) {
    EXPECT_GT(p.fp32, 0.0) << p.label;
    EXPECT_LT(p.fp32, p.tf32) << p.label;
    EXPECT_LT(p.tf32, p.bf16) << p.label;
    EXPECT_EQ(p.bf16, p.fp16) << p.label;
    EXPECT_FALSE(p.match.empty()) << p.label;
    EXPECT_FALSE(p.source.empty()) << p.label;
    // each of its own name patterns finds this entry: no earlier entry shadows it
    for (size_t start = 0; start <= p.match.size();) {
      const size_t bar = std::min(p.match.find('|', start), p.match.size());
      EXPECT_EQ(hpct::find_device_peaks(p.match.substr(start, bar - start)), &p) << p.match;
      start = bar + 1;
    }
  }
}

TEST(DevicePeaks, JsonMembers) {
  EXPECT_EQ(hpct::peak_json_members("", "fp32"), R"("device_name":null,"device_peaks":null,"peak_tflops":null)");
  const std::string j = hpct::peak_json_members("NVIDIA H100 80GB HBM3", "bf16");
  EXPECT_EQ(j.rfind(R"("device_name":"NVIDIA H100 80GB HBM3","device_peaks":{"label":"H100/H200 SXM","fp32":67,)"
                    R"("tf32":494.5,"bf16":989.5,"fp16":989.5,"source":")",
                    0),
            0u)
      << j;
  EXPECT_NE(j.find(R"(},"peak_tflops":989.5)"), std::string::npos) << j;
  EXPECT_EQ(hpct::json_quote("a\"b\\c\n\x01"), R"("a\"b\\c\n\u0001")");
}
