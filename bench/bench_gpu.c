/* GPU benchmark (needs a CUDA device; run by tests/gpu/run.sh): ns per allocate+free pair,
 * 256 B ... 64 MiB, for raw cudaMalloc/cudaFree, cuda.device, raw cudaMallocAsync/cudaFreeAsync
 * on the default pool and cuda.async over it, all measured in the same run. Stream-ordered
 * pairs are issued on one stream and synchronised once at the end of each timed loop.
 * Targets: cuda.async <= 1.15x raw cudaMallocAsync; >= 10x faster than cudaMalloc <= 1 MiB. */
#include <devmm/devmm.h>

#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

#define CHECK(x)                                                                                   \
  do {                                                                                             \
    cudaError_t e_ = (x);                                                                          \
    if (e_ != cudaSuccess) {                                                                       \
      fprintf(stderr, "bench-gpu: %s: %s\n", #x, cudaGetErrorString(e_));                          \
      exit(1);                                                                                     \
    }                                                                                              \
  } while (0)

enum { RAW_MALLOC, DEVMM_DEVICE, RAW_ASYNC, DEVMM_ASYNC };

static double pair_ns(int mode, devmm_resource *r, size_t n, int iters, cudaStream_t s) {
  double best = 1e30;
  for (int rep = 0; rep < 5; rep++) {
    CHECK(cudaStreamSynchronize(s));
    double t0 = now();
    for (int i = 0; i < iters; i++) {
      void *p = NULL;
      switch (mode) {
      case RAW_MALLOC:
        CHECK(cudaMalloc(&p, n));
        CHECK(cudaFree(p));
        break;
      case RAW_ASYNC:
        CHECK(cudaMallocAsync(&p, n, s));
        CHECK(cudaFreeAsync(p, s));
        break;
      default:
        if (devmm_allocate(r, n, 0, s, &p) != DEVMM_OK) {
          fprintf(stderr, "bench-gpu: %s\n", devmm_last_error());
          exit(1);
        }
        devmm_deallocate(r, p, n, 0, s);
      }
    }
    CHECK(cudaStreamSynchronize(s));
    double dt = (now() - t0) / iters * 1e9;
    if (dt < best)
      best = dt;
  }
  return best;
}

int main(void) {
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
    fprintf(stderr, "bench-gpu: no CUDA device\n");
    return 1;
  }
  CHECK(cudaSetDevice(0));
  cudaStream_t s;
  CHECK(cudaStreamCreate(&s));
  devmm_resource *dev, *async;
  if (devmm_resource_create_kind("cuda.device", 0, NULL, 0, &dev) ||
      devmm_resource_create_kind("cuda.async", 0, NULL, 0, &async)) {
    fprintf(stderr, "bench-gpu: %s\n", devmm_last_error());
    return 1;
  }
  /* keep freed memory in the default pool, as a caching allocator would */
  cudaMemPool_t pool;
  CHECK(cudaDeviceGetDefaultMemPool(&pool, 0));
  unsigned long long threshold = ~0ull;
  CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold));
  size_t sizes[] = {256, 4096, 65536, 1 << 20, 16 << 20, 64 << 20};
  printf("GPU benchmark: ns per allocate+free pair (best of 5), device 0\n");
  printf("%10s %12s %12s %12s %12s %10s %10s\n", "size", "cudaMalloc", "cuda.device", "MallocAsync",
         "cuda.async", "async/raw", "malloc/async");
  int met_overhead = 1, met_speedup = 1;
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    size_t n = sizes[i];
    int iters = n >= (16 << 20) ? 200 : 2000;
    double rm = pair_ns(RAW_MALLOC, NULL, n, iters / 4, s);
    double dd = pair_ns(DEVMM_DEVICE, dev, n, iters / 4, s);
    double ra = pair_ns(RAW_ASYNC, NULL, n, iters, s);
    double da = pair_ns(DEVMM_ASYNC, async, n, iters, s);
    printf("%10zu %12.0f %12.0f %12.0f %12.0f %9.2fx %9.1fx\n", n, rm, dd, ra, da, da / ra,
           rm / da);
    met_overhead &= da / ra <= 1.15;
    if (n <= (1 << 20))
      met_speedup &= rm / da >= 10;
  }
  printf("target cuda.async <= 1.15x raw cudaMallocAsync: %s\n", met_overhead ? "MET" : "MISSED");
  printf("target cuda.async >= 10x faster than cudaMalloc (<= 1 MiB): %s\n",
         met_speedup ? "MET" : "MISSED");
  devmm_resource_release(dev);
  devmm_resource_release(async);
  return 0;
}
