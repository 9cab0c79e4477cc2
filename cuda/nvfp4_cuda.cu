// NVFP4 quantization on the GPU, bit-identical to src/nvfp4.c: each thread
// owns one 16-wide group. Built with -fmad=false and IEEE division (nvcc's
// default -prec-div=true) so no product is fused and no quotient approximated.
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nvfp4_cuda.h"

struct nvfp4_gpu {
    uint16_t *x;
    uint8_t *packed, *scales;
    unsigned *amax;        // max |x| as bf16 bits (non-negative: bits order as values)
    unsigned *bad;         // NaN/Inf seen
    size_t cap;
    cudaEvent_t t0, t1;
    double ms;
};

__device__ __forceinline__ float bf16_to_f32(uint16_t h) { return __uint_as_float((unsigned)h << 16); }

// Round-to-nearest-even to bf16 and back, as torch rounds a bf16 op's result.
__device__ __forceinline__ float round_bf16(float f)
{
    unsigned u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return f;
    u += 0x7fffu + ((u >> 16) & 1u);
    return __uint_as_float(u & 0xffff0000u);
}

// f32 -> e4m3fn code, round to nearest even, saturating at 448 (the CPU code's
// algorithm, line for line).
__device__ __forceinline__ unsigned char to_e4m3(float f)
{
    unsigned char sign = signbit(f) ? 0x80 : 0;
    float a = fabsf(f);
    if (a >= 448.0f)
        return sign | 0x7e;
    if (a < 0x1p-6f)
        return sign | (unsigned char)(int)rintf(a * 0x1p9f);
    int e;
    float m = frexpf(a, &e);
    int q = (int)rintf(m * 16.0f);
    e -= 1;
    if (q == 16) { q = 8; e += 1; }
    int be = e + 7;
    if (be > 15 || (be == 15 && q - 8 == 7))
        return sign | 0x7e;
    return sign | (unsigned char)(be << 3) | (unsigned char)(q - 8);
}

__device__ __forceinline__ float from_e4m3(unsigned char b)
{
    int exp = (b >> 3) & 0xf, man = b & 7;
    float f = exp == 0 ? (float)man * 0x1p-9f : ldexpf(1.0f + (float)man / 8.0f, exp - 7);
    return (b & 0x80) ? -f : f;
}

__device__ __forceinline__ unsigned fp4_code(float y)
{
    unsigned sign = y < 0.0f ? 8u : 0u;
    float a = fabsf(y);
    unsigned m = a <= 0.25f ? 0 : a < 0.75f ? 1 : a <= 1.25f ? 2 : a < 1.75f ? 3
               : a <= 2.5f ? 4 : a < 3.5f ? 5 : a <= 5.0f ? 6 : 7;
    return sign | m;
}

__global__ void absmax_kernel(const uint16_t *__restrict__ x, size_t n, unsigned *amax, unsigned *bad)
{
    unsigned m = 0, b = 0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        unsigned a = x[i] & 0x7fffu;
        b |= a >= 0x7f80u;
        m = a > m ? a : m;
    }
    for (int o = 16; o > 0; o >>= 1) {
        m = max(m, __shfl_xor_sync(0xffffffffu, m, o));
        b |= __shfl_xor_sync(0xffffffffu, b, o);
    }
    if ((threadIdx.x & 31) == 0) {
        atomicMax(amax, m);
        if (b)
            atomicOr(bad, 1u);
    }
}

__global__ void quant_kernel(const uint16_t *__restrict__ x, size_t groups, float gs,
                             uint8_t *__restrict__ packed, uint8_t *__restrict__ scales)
{
    size_t g = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (g >= groups)
        return;
    const uint4 *src = reinterpret_cast<const uint4 *>(x + g * 16);
    uint4 lo = src[0], hi = src[1];
    unsigned w[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
    float v[16], amax = 0.0f;
#pragma unroll
    for (int i = 0; i < 8; i++) {
        v[2 * i] = bf16_to_f32((uint16_t)(w[i] & 0xffffu));
        v[2 * i + 1] = bf16_to_f32((uint16_t)(w[i] >> 16));
    }
#pragma unroll
    for (int i = 0; i < 16; i++)
        amax = fmaxf(amax, fabsf(v[i]));
    float s = round_bf16(amax / 6.0f) * gs;
    s = s > 448.0f ? 448.0f : s;
    unsigned char code = to_e4m3(s);
    float s8 = from_e4m3(code);
    if (s8 == 0.0f) {
        code = to_e4m3(0.125f);
        s8 = 0.125f;
    }
    float eff = s8 / gs;
    unsigned out[2] = {0, 0};
#pragma unroll
    for (int i = 0; i < 16; i++)
        out[i / 8] |= fp4_code(v[i] / eff) << (4 * (i % 8));
    reinterpret_cast<uint2 *>(packed)[g] = make_uint2(out[0], out[1]);
    scales[g] = code;
}

#define CK(call) do { cudaError_t _e = (call); if (_e != cudaSuccess) { \
    snprintf(err, errlen, "%s: %s", #call, cudaGetErrorString(_e)); return 1; } } while (0)

extern "C" int nvfp4_gpu_create(nvfp4_gpu **out, size_t max_elems, char *err, size_t errlen)
{
    nvfp4_gpu *g = (nvfp4_gpu *)calloc(1, sizeof *g);
    *out = g;
    g->cap = max_elems;
    CK(cudaMalloc(&g->x, max_elems * 2 + 64));
    CK(cudaMalloc(&g->packed, max_elems / 2 + 64));
    CK(cudaMalloc(&g->scales, max_elems / 16 + 64));
    CK(cudaMalloc(&g->amax, 2 * sizeof(unsigned)));
    g->bad = g->amax + 1;
    CK(cudaEventCreate(&g->t0));
    CK(cudaEventCreate(&g->t1));
    return 0;
}

extern "C" void nvfp4_gpu_destroy(nvfp4_gpu *g)
{
    if (!g)
        return;
    cudaFree(g->x);
    cudaFree(g->packed);
    cudaFree(g->scales);
    cudaFree(g->amax);
    free(g);
}

static void timed_start(nvfp4_gpu *g) { cudaEventRecord(g->t0); }
static void timed_stop(nvfp4_gpu *g)
{
    float ms = 0;
    cudaEventRecord(g->t1);
    cudaEventSynchronize(g->t1);
    cudaEventElapsedTime(&ms, g->t0, g->t1);
    g->ms += ms;
}

extern "C" int nvfp4_gpu_upload(nvfp4_gpu *g, size_t at, const uint16_t *host, size_t n)
{
    if (at + n > g->cap)
        return 1;
    return cudaMemcpy(g->x + at, host, n * 2, cudaMemcpyHostToDevice) != cudaSuccess;
}

extern "C" float nvfp4_gpu_absmax(nvfp4_gpu *g, size_t n)
{
    unsigned h[2] = {0, 0};
    cudaMemset(g->amax, 0, 2 * sizeof(unsigned));
    timed_start(g);
    size_t b = (n + 255) / 256;
    absmax_kernel<<<(unsigned)(b < 4096 ? (b ? b : 1) : 4096), 256>>>(g->x, n, g->amax, g->bad);
    timed_stop(g);
    cudaMemcpy(h, g->amax, sizeof h, cudaMemcpyDeviceToHost);
    if (h[1])
        return -1.0f;
    unsigned bits = h[0] << 16;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

extern "C" int nvfp4_gpu_quantize(nvfp4_gpu *g, size_t first, size_t rows, size_t cols, float gs,
                                  uint8_t *packed, uint8_t *scales)
{
    size_t groups = rows * cols / 16;
    timed_start(g);
    quant_kernel<<<(unsigned)((groups + 255) / 256), 256>>>(g->x + first, groups, gs, g->packed, g->scales);
    timed_stop(g);
    cudaMemcpy(packed, g->packed, groups * 8, cudaMemcpyDeviceToHost);
    cudaMemcpy(scales, g->scales, groups, cudaMemcpyDeviceToHost);
    return cudaGetLastError() != cudaSuccess;
}

extern "C" double nvfp4_gpu_kernel_ms(const nvfp4_gpu *g) { return g->ms; }
