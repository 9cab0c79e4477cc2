// Optional CUDA path for issue 8 (never built by `make test`): the NVFP4
// kernel on the GPU, checked byte for byte against fp4forge's scalar CPU
// kernel and timed against it. One thread per 16-wide group; the arithmetic
// repeats the CPU kernel's IEEE operations in the same order (round-to-
// nearest divisions: do NOT build with --use_fast_math).
//
//   nvcc -O3 -arch=sm_90 bench/cuda/nvfp4_cuda.cu build/libfp4forge.a \
//        -ljansson -lcurl -lpthread -o build/nvfp4_cuda
//   build/nvfp4_cuda [ROWS COLS]      (default 21504 x 5376, one MLP matrix)
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

// fp4forge's C API, declared here because its headers are C11 (not C++);
// the dtype enum is passed as int and looked up by name.
extern "C" {
int ff_dtype_parse(const char *name);
int nvfp4_absmax(const void *data, int t, uint64_t n, float *amax, uint64_t *bad);
float nvfp4_global_scale(float amax, int observed);
typedef void (*nvfp4_rows_fn)(const void *w, int t, uint64_t cols, uint64_t row0, uint64_t nrows, float gs,
                              uint8_t *packed, uint8_t *scales);
nvfp4_rows_fn nvfp4_best_kernel(const char **name);
}

static uint16_t f32_to_bf16(float f)   // RNE, finite inputs only
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

__device__ __forceinline__ unsigned fp4_code(float y)
{
    unsigned sign = y < 0.0f ? 8u : 0u;
    float a = fabsf(y);
    unsigned m;
    if (a <= 0.25f) m = 0;
    else if (a < 0.75f) m = 1;
    else if (a <= 1.25f) m = 2;
    else if (a < 1.75f) m = 3;
    else if (a <= 2.5f) m = 4;
    else if (a < 3.5f) m = 5;
    else if (a <= 5.0f) m = 6;
    else m = 7;
    return sign | m;
}

__global__ void nvfp4_bf16(const __nv_bfloat16 *w, unsigned long long groups, float gs, unsigned char *packed,
                           unsigned char *scales)
{
    unsigned long long g = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
    if (g >= groups)
        return;
    const uint4 *src = reinterpret_cast<const uint4 *>(w + g * 16);
    uint4 v[2] = {src[0], src[1]};
    const __nv_bfloat16 *h = reinterpret_cast<const __nv_bfloat16 *>(v);
    float x[16], amax = 0.0f;
    for (int i = 0; i < 16; i++) {
        x[i] = __bfloat162float(h[i]);
        float a = fabsf(x[i]);
        amax = a > amax ? a : amax;
    }
    float s = __bfloat162float(__float2bfloat16_rn(__fdiv_rn(amax, 6.0f)));
    s = __fmul_rn(s, gs);
    if (s > 448.0f)
        s = 448.0f;
    __nv_fp8_e4m3 s8(s);                      // RNE, saturating
    float s8f = float(s8);
    if (s8f == 0.0f) {
        s8 = __nv_fp8_e4m3(0.125f);
        s8f = 0.125f;
    }
    scales[g] = *reinterpret_cast<unsigned char *>(&s8);
    float eff = __fdiv_rn(s8f, gs);
    unsigned long long out = 0;
    for (int i = 0; i < 16; i++)
        out |= (unsigned long long)fp4_code(__fdiv_rn(x[i], eff)) << (4 * i);
    reinterpret_cast<unsigned long long *>(packed)[g] = out;
}

static double secs()
{
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

int main(int argc, char **argv)
{
    unsigned long long rows = argc > 2 ? strtoull(argv[1], 0, 10) : 21504, cols = argc > 2 ? strtoull(argv[2], 0, 10) : 5376;
    unsigned long long n = rows * cols, groups = n / 16;
    std::vector<uint16_t> w(n);
    unsigned long long r = 88172645463325252ull;
    for (auto &e : w) {
        r ^= r << 13, r ^= r >> 7, r ^= r << 17;
        float f = ((float)(r >> 40) / 16777216.0f - 0.5f) * 0.05f;
        e = f32_to_bf16(f);
    }
    const int bf16 = ff_dtype_parse("BF16");
    float amax;
    uint64_t bad;
    nvfp4_absmax(w.data(), bf16, n, &amax, &bad);
    float gs = nvfp4_global_scale(amax, bf16);

    std::vector<uint8_t> p0(n / 2), s0(groups), p1(n / 2), s1(groups);
    const char *kname;
    nvfp4_rows_fn cpu = nvfp4_best_kernel(&kname);
    double t0 = secs();
    cpu(w.data(), bf16, cols, 0, rows, gs, p0.data(), s0.data());
    double cpu_s = secs() - t0;

    __nv_bfloat16 *dw;
    unsigned char *dp, *ds;
    cudaMalloc(&dw, n * 2);
    cudaMalloc(&dp, n / 2);
    cudaMalloc(&ds, groups);
    t0 = secs();
    cudaMemcpy(dw, w.data(), n * 2, cudaMemcpyHostToDevice);
    double h2d = secs() - t0;
    cudaEvent_t a, b;
    cudaEventCreate(&a);
    cudaEventCreate(&b);
    unsigned threads = 256, blocks = (unsigned)((groups + threads - 1) / threads);
    nvfp4_bf16<<<blocks, threads>>>(dw, groups, gs, dp, ds);   // warm-up
    cudaEventRecord(a);
    const int reps = 20;
    for (int i = 0; i < reps; i++)
        nvfp4_bf16<<<blocks, threads>>>(dw, groups, gs, dp, ds);
    cudaEventRecord(b);
    cudaEventSynchronize(b);
    float ms;
    cudaEventElapsedTime(&ms, a, b);
    cudaMemcpy(p1.data(), dp, n / 2, cudaMemcpyDeviceToHost);
    cudaMemcpy(s1.data(), ds, groups, cudaMemcpyDeviceToHost);
    cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) {
        fprintf(stderr, "cuda: %s\n", cudaGetErrorString(err));
        return 1;
    }
    int same = p0 == p1 && s0 == s1;
    double gpu_s = ms / 1e3 / reps, gb = n * 2 / 1e9;
    printf("matrix %llux%llu bf16 (%.3f GB)\n", rows, cols, gb);
    printf("cpu %-7s 1 thread  %8.3f s  %8.2f GB/s\n", kname, cpu_s, gb / cpu_s);
    printf("gpu kernel          %8.5f s  %8.2f GB/s (host->device copy %.2f GB/s)\n", gpu_s, gb / gpu_s, gb / h2d);
    printf("%s bytes gpu vs cpu\n", same ? "PASS identical" : "FAIL different");
    return same ? 0 : 1;
}
