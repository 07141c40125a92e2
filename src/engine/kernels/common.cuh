// Shared prelude of every engine kernel: bf16 by hand (the NVRTC wheel ships no CUDA headers),
// warp and block reductions, weight loads for bf16 or f32 storage. Prepended to each .cu file.

typedef unsigned short bf16_t;
typedef unsigned int u32;
typedef unsigned long long u64;

// bf16 is the top half of an f32: widening is exact.
__device__ __forceinline__ float bf16_to_f32(bf16_t h) { return __uint_as_float(((u32)h) << 16); }

// Round to nearest, ties to even; NaN stays a quiet NaN; overflow rounds to infinity.
// The same bit logic as half::bf16::from_f32 (tests/cuda_kernels.rs checks a Rust port of it).
__device__ __forceinline__ bf16_t f32_to_bf16(float f) {
    u32 u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (bf16_t)((u >> 16) | 0x40u);
    u32 rounding = 0x7fffu + ((u >> 16) & 1u);
    return (bf16_t)((u + rounding) >> 16);
}

__device__ __forceinline__ float load_w(const float* p, long long i) { return p[i]; }
__device__ __forceinline__ float load_w(const bf16_t* p, long long i) { return bf16_to_f32(p[i]); }

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ double warp_sum_f64(double v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// Sum over the whole block (blockDim.x a multiple of 32, at most 1024); every thread gets it.
__device__ double block_sum_f64(double v) {
    __shared__ double partial[32];
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    v = warp_sum_f64(v);
    __syncthreads();
    if (lane == 0) partial[warp] = v;
    __syncthreads();
    double total = 0.0;
    for (int w = 0; w < warps; ++w) total += partial[w];
    return total;
}

__device__ float block_sum(float v) {
    __shared__ float partial_f[32];
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    v = warp_sum(v);
    __syncthreads();
    if (lane == 0) partial_f[warp] = v;
    __syncthreads();
    float total = 0.0f;
    for (int w = 0; w < warps; ++w) total += partial_f[w];
    return total;
}

__device__ float block_max(float v) {
    __shared__ float partial_m[32];
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    v = warp_max(v);
    __syncthreads();
    if (lane == 0) partial_m[warp] = v;
    __syncthreads();
    float m = -__int_as_float(0x7f800000);
    for (int w = 0; w < warps; ++w) m = fmaxf(m, partial_m[w]);
    return m;
}
