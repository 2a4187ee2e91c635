// The minimal CUDA translation unit: device count, and a self-test of one kernel and one cuBLAS GEMM against the
// host. Everything on the default stream; errors throw hpct::Error through CUDA_CHECK / CUBLAS_CHECK.
#include <cmath>
#include <vector>

#include "core/cuda_check.hpp"
#include "kernels/cuda/cuda_probe.hpp"

namespace hpct::kernels {
namespace {

// y[i] = a * x[i] + y[i], one thread per element
__global__ void saxpy_kernel(int n, float a, const float* __restrict__ x, float* __restrict__ y) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}

// Owns device buffers for the duration of the self-test, so that a throwing check frees them.
struct DeviceBuffer {
  float* ptr = nullptr;
  explicit DeviceBuffer(size_t n) { CUDA_CHECK(cudaMalloc(&ptr, n * sizeof(float))); }
  ~DeviceBuffer() { cudaFree(ptr); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

struct CublasHandle {
  cublasHandle_t h = nullptr;
  CublasHandle() { CUBLAS_CHECK(cublasCreate(&h)); }
  ~CublasHandle() { cublasDestroy(h); }
  CublasHandle(const CublasHandle&) = delete;
  CublasHandle& operator=(const CublasHandle&) = delete;
};

// deterministic, never-zero test values in [-1, 1]
float test_value(int i, int salt) {
  return std::sin(0.37f * static_cast<float>(i) + 1.3f * static_cast<float>(salt)) + 0.01f;
}

void expect_close(const char* what, const std::vector<float>& got, const std::vector<float>& want, float tol) {
  for (size_t i = 0; i < want.size(); i++) {
    if (!(std::fabs(got[i] - want[i]) <= tol * (1.0f + std::fabs(want[i]))))
      HPCT_FAIL("cuda_selftest: {} mismatch at element {}: device {} vs host {} (tolerance {})", what, i, got[i],
                want[i], tol);
  }
}

}  // namespace

int cuda_device_count() {
  int count = 0;
  const cudaError_t rc = cudaGetDeviceCount(&count);
  if (rc != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky error so later runtime calls do not report it
    return 0;
  }
  return count;
}

void cuda_selftest() {
  // ---- a kernel of ours: saxpy on 10007 elements (not a multiple of the block size) ----
  {
    const int n = 10007;
    const float a = 1.75f;
    std::vector<float> x(n), y(n), want(n), got(n);
    for (int i = 0; i < n; i++) {
      x[i] = test_value(i, 1);
      y[i] = test_value(i, 2);
      want[i] = a * x[i] + y[i];
    }
    DeviceBuffer dx(n), dy(n);
    CUDA_CHECK(cudaMemcpy(dx.ptr, x.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(dy.ptr, y.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    const int block = 256;
    saxpy_kernel<<<(n + block - 1) / block, block>>>(n, a, dx.ptr, dy.ptr);
    CUDA_CHECK_LAUNCH();
    CUDA_CHECK(cudaMemcpy(got.data(), dy.ptr, n * sizeof(float), cudaMemcpyDeviceToHost));
    expect_close("saxpy", got, want, 1e-6f);  // one fma per element: at most an ulp or two apart
  }
  // ---- one cuBLAS call: C (M,N) = A (M,K) @ B (K,N), row-major on the host ----
  {
    const int M = 64, N = 48, K = 80;
    std::vector<float> A(M * K), B(K * N), want(M * N), got(M * N);
    for (int i = 0; i < M * K; i++) A[i] = test_value(i, 3);
    for (int i = 0; i < K * N; i++) B[i] = test_value(i, 4);
    for (int m = 0; m < M; m++)
      for (int n = 0; n < N; n++) {
        double acc = 0;
        for (int k = 0; k < K; k++) acc += static_cast<double>(A[m * K + k]) * B[k * N + n];
        want[m * N + n] = static_cast<float>(acc);
      }
    DeviceBuffer dA(A.size()), dB(B.size()), dC(want.size());
    CUDA_CHECK(cudaMemcpy(dA.ptr, A.data(), A.size() * sizeof(float), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(dB.ptr, B.data(), B.size() * sizeof(float), cudaMemcpyHostToDevice));
    CublasHandle handle;
    // fp32 on purpose: the default math mode may not use TF32 for cublasSgemm, so the tolerance can be tight
    CUBLAS_CHECK(cublasSetMathMode(handle.h, CUBLAS_PEDANTIC_MATH));
    // cuBLAS is column-major: row-major C = A B is column-major C^T = B^T A^T, i.e. sgemm(N, N, N, M, K, B, A)
    const float alpha = 1.0f, beta = 0.0f;
    CUBLAS_CHECK(
        cublasSgemm(handle.h, CUBLAS_OP_N, CUBLAS_OP_N, N, M, K, &alpha, dB.ptr, N, dA.ptr, K, &beta, dC.ptr, N));
    CUDA_CHECK(cudaMemcpy(got.data(), dC.ptr, got.size() * sizeof(float), cudaMemcpyDeviceToHost));
    // fp32 sums of K = 80 products of |values| <= 1.01: rounding stays below ~K * 6e-8 * 1 = 5e-6
    expect_close("cublasSgemm", got, want, 1e-5f);
  }
  CUDA_CHECK(cudaDeviceSynchronize());
}

}  // namespace hpct::kernels
