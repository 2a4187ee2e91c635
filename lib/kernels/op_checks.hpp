#pragma once
// The shape and argument checks of the kernel ops (kernels/ops.inc names one or more per op), run by kernels.cpp's
// dispatch before either backend, so that the CPU and CUDA refuse the same calls with the same message. Each throws
// hpct::Error naming the op ("kernels::<op>: ...") and the offending values. Legend as in kernels.hpp.
#include <cstdint>

namespace hpct::kernels::checks {

void count(const char* op, int64_t n);                        // n >= 0 (elements or bytes)
void given(const char* op, const void* p, const char* name);  // p is not null
void encoder(const char* op, int B, int T, int C);            // B >= 0, T > 0, C > 0
void vocab_slice(const char* op, int v0, int Vl);             // v0 >= 0, Vl > 0
void rows(const char* op, int N, int C);                      // N >= 0, C > 0
void linear(const char* op, int N, int C, int OC);            // N >= 0, C > 0, OC > 0
void attention(const char* op, int B, int T, int C, int NH);  // all > 0, C a multiple of NH
void vocabulary(const char* op, int N, int V, int Vp);        // N >= 0, 0 < V <= Vp
void classes(const char* op, int N, int K);                   // N >= 0, K > 0
void vp_slice(const char* op, int v0, int Vl, int V, int N);  // V > 0, v0 >= 0, Vl > 0, N >= 0
void conv(const char* op, int N, int C, int H, int W, int OC, int KH, int KW, int stride, int pad);  // torch's Conv2d
void batchnorm(const char* op, int N, int C, int HW);                                                // all > 0
void statistics(const char* op, int R, int C);                    // R > 0 rows of C > 0 channels' statistics
void global_count(const char* op, int64_t count, int N, int HW);  // count >= N * HW (this rank's share is in it)
void pool(const char* op, int N, int C, int H, int W, int K, int stride, int pad);  // torch's MaxPool2d, pad <= K/2
void avgpool(const char* op, int N, int C, int HW);                                 // N >= 0, C >= 0, HW > 0
void images(const char* op, int N, int C, int HW);                                  // N >= 0, C > 0, HW > 0
void adam_step(const char* op, int t);                                              // t >= 1
void sgd(const char* op, int64_t n, float momentum, float dampening, bool nesterov, const float* momentum_buf);
void host_range(const char* op, const void* host, int64_t bytes);  // a non-empty host range

}  // namespace hpct::kernels::checks
