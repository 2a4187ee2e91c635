#include "kernels/op_checks.hpp"

#include "core/error.hpp"

namespace hpct::kernels::checks {

void count(const char* op, int64_t n) { HPCT_CHECK(n >= 0, "kernels::{}: a count of {} (negative)", op, n); }

void given(const char* op, const void* p, const char* name) {
  HPCT_CHECK(p != nullptr, "kernels::{}: {} is null", op, name);
}

void encoder(const char* op, int B, int T, int C) {
  HPCT_CHECK(B >= 0 && T > 0 && C > 0, "kernels::{}: bad shape B={} T={} C={}", op, B, T, C);
}

void vocab_slice(const char* op, int v0, int Vl) {
  HPCT_CHECK(v0 >= 0 && Vl > 0, "kernels::{}: bad vocabulary slice [v0={}, v0+Vl={})", op, v0,
             static_cast<int64_t>(v0) + Vl);
}

void rows(const char* op, int N, int C) { HPCT_CHECK(N >= 0 && C > 0, "kernels::{}: bad shape N={} C={}", op, N, C); }

void linear(const char* op, int N, int C, int OC) {
  HPCT_CHECK(N >= 0 && C > 0 && OC > 0, "kernels::{}: bad shape N={} C={} OC={}", op, N, C, OC);
}

void attention(const char* op, int B, int T, int C, int NH) {
  HPCT_CHECK(B > 0 && T > 0 && C > 0 && NH > 0, "kernels::{}: bad shape B={} T={} C={} NH={}", op, B, T, C, NH);
  HPCT_CHECK(C % NH == 0, "kernels::{}: C={} is not a multiple of NH={}", op, C, NH);
}

void vocabulary(const char* op, int N, int V, int Vp) {
  HPCT_CHECK(N >= 0 && V > 0 && V <= Vp, "kernels::{}: bad shape N={} V={} Vp={} (the vocabulary V lies in [1, Vp])",
             op, N, V, Vp);
}

void classes(const char* op, int N, int K) {
  HPCT_CHECK(N >= 0 && K > 0, "kernels::{}: bad shape N={} K={}", op, N, K);
}

void vp_slice(const char* op, int v0, int Vl, int V, int N) {
  HPCT_CHECK(V > 0 && v0 >= 0 && Vl > 0 && N >= 0, "kernels::{}: bad vocabulary slice [v0={}, v0+Vl={}) of V={}, N={}",
             op, v0, static_cast<int64_t>(v0) + Vl, V, N);
}

void conv(const char* op, int N, int C, int H, int W, int OC, int KH, int KW, int stride, int pad) {
  HPCT_CHECK(N > 0 && C > 0 && H > 0 && W > 0 && OC > 0 && KH > 0 && KW > 0 && stride > 0 && pad >= 0,
             "kernels::{}: bad shape N={} C={} H={} W={} OC={} KH={} KW={} stride={} pad={}", op, N, C, H, W, OC, KH,
             KW, stride, pad);
  HPCT_CHECK(H + 2 * pad >= KH && W + 2 * pad >= KW, "kernels::{}: kernel {}x{} larger than the padded input {}x{}", op,
             KH, KW, H + 2 * pad, W + 2 * pad);
}

void batchnorm(const char* op, int N, int C, int HW) {
  HPCT_CHECK(N > 0 && C > 0 && HW > 0, "kernels::{}: bad shape N={} C={} HW={}", op, N, C, HW);
}

void statistics(const char* op, int R, int C) {
  HPCT_CHECK(R > 0 && C > 0, "kernels::{}: bad shape R={} C={}", op, R, C);
}

void global_count(const char* op, int64_t count, int N, int HW) {
  HPCT_CHECK(count >= static_cast<int64_t>(N) * HW,
             "kernels::{}: global count {} is smaller than this rank's {} values per channel", op, count,
             static_cast<int64_t>(N) * HW);
}

void pool(const char* op, int N, int C, int H, int W, int K, int stride, int pad) {
  HPCT_CHECK(N > 0 && C > 0 && H > 0 && W > 0 && K > 0 && stride > 0 && pad >= 0 && 2 * pad <= K && H + 2 * pad >= K &&
                 W + 2 * pad >= K,
             "kernels::{}: bad shape N={} C={} H={} W={} K={} stride={} pad={} (torch needs pad <= K/2)", op, N, C, H,
             W, K, stride, pad);
}

void avgpool(const char* op, int N, int C, int HW) {
  HPCT_CHECK(N >= 0 && C >= 0 && HW > 0, "kernels::{}: bad shape N={} C={} HW={}", op, N, C, HW);
}

void images(const char* op, int N, int C, int HW) {
  HPCT_CHECK(N >= 0 && C > 0 && HW > 0, "kernels::{}: bad shape N={} C={} HW={}", op, N, C, HW);
}

void adam_step(const char* op, int t) { HPCT_CHECK(t >= 1, "kernels::{}: the step t={} must be 1-based", op, t); }

void sgd(const char* op, int64_t n, float momentum, float dampening, bool nesterov, const float* momentum_buf) {
  count(op, n);
  HPCT_CHECK(!nesterov || (momentum > 0.0f && dampening == 0.0f),
             "kernels::{}: nesterov needs momentum > 0 and dampening = 0 (momentum={}, dampening={})", op, momentum,
             dampening);
  HPCT_CHECK(momentum == 0.0f || momentum_buf != nullptr || n == 0, "kernels::{}: momentum={} needs a momentum buffer",
             op, momentum);
}

void host_range(const char* op, const void* host, int64_t bytes) {
  HPCT_CHECK(host != nullptr && bytes > 0, "kernels::{} of {} bytes at {}: give a non-empty host range", op, bytes,
             host);
}

}  // namespace hpct::kernels::checks
