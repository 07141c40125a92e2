// Skinny matrix products for decode (a few rows): y[r, :] (+)= x[r, :] · Wᵀ with W [out, in]
// stored bf16 or f32 and f32 accumulation, and the Punica-style LoRA shrink/expand over all
// adapters stacked on device, picked per row by an adapter index (-1 = none).

#define GEMV_MAX_ROWS 8

// One warp per output feature; the weight row is read once for all (≤ 8) activation rows.
// grid: ceil(out / 8); block: 256 (8 warps).
template <typename W>
__device__ void gemv_impl(const W* w, const float* x, float* y, int out_dim, int in_dim, int rows, int accumulate) {
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int j = blockIdx.x * (blockDim.x >> 5) + warp;
    if (j >= out_dim) return;
    const W* wr = w + (long long)j * in_dim;
    float acc[GEMV_MAX_ROWS];
    for (int r = 0; r < GEMV_MAX_ROWS; ++r) acc[r] = 0.0f;
    for (int k = lane; k < in_dim; k += 32) {
        float wv = load_w(wr, k);
        for (int r = 0; r < GEMV_MAX_ROWS; ++r)
            if (r < rows) acc[r] += wv * x[(long long)r * in_dim + k];
    }
    for (int r = 0; r < GEMV_MAX_ROWS; ++r) {
        if (r >= rows) break;
        float s = warp_sum(acc[r]);
        if (lane == 0) {
            long long at = (long long)r * out_dim + j;
            y[at] = accumulate ? y[at] + s : s;
        }
    }
}

// The bf16 path reads 8 weights (16 bytes) per lane per step when in_dim % 8 == 0, which is
// what keeps decode at memory bandwidth.
__device__ void gemv_bf16_vec8(const bf16_t* w, const float* x, float* y, int out_dim, int in_dim, int rows,
                               int accumulate) {
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int j = blockIdx.x * (blockDim.x >> 5) + warp;
    if (j >= out_dim) return;
    const uint4* wr = (const uint4*)(w + (long long)j * in_dim);
    int groups = in_dim / 8;
    float acc[GEMV_MAX_ROWS];
    for (int r = 0; r < GEMV_MAX_ROWS; ++r) acc[r] = 0.0f;
    for (int g = lane; g < groups; g += 32) {
        uint4 packed = wr[g];
        u32 words[4] = {packed.x, packed.y, packed.z, packed.w};
        float wv[8];
        for (int t = 0; t < 4; ++t) {
            wv[2 * t] = __uint_as_float(words[t] << 16);
            wv[2 * t + 1] = __uint_as_float(words[t] & 0xffff0000u);
        }
        for (int r = 0; r < GEMV_MAX_ROWS; ++r) {
            if (r >= rows) break;
            const float4* xr = (const float4*)(x + (long long)r * in_dim) + 2 * g;
            float4 a = xr[0], b = xr[1];
            acc[r] += wv[0] * a.x + wv[1] * a.y + wv[2] * a.z + wv[3] * a.w + wv[4] * b.x + wv[5] * b.y +
                      wv[6] * b.z + wv[7] * b.w;
        }
    }
    for (int r = 0; r < GEMV_MAX_ROWS; ++r) {
        if (r >= rows) break;
        float s = warp_sum(acc[r]);
        if (lane == 0) {
            long long at = (long long)r * out_dim + j;
            y[at] = accumulate ? y[at] + s : s;
        }
    }
}

extern "C" __global__ void gemv_bf16(const bf16_t* w, const float* x, float* y, int out_dim, int in_dim, int rows,
                                     int accumulate) {
    if ((in_dim & 7) == 0) gemv_bf16_vec8(w, x, y, out_dim, in_dim, rows, accumulate);
    else gemv_impl(w, x, y, out_dim, in_dim, rows, accumulate);
}

extern "C" __global__ void gemv_f32(const float* w, const float* x, float* y, int out_dim, int in_dim, int rows,
                                    int accumulate) {
    gemv_impl(w, x, y, out_dim, in_dim, rows, accumulate);
}

// LoRA shrink: t[row, r] = x[row, :] · A[a, r, :] for a = adapter_of_row[row]; A is stacked
// [n_adapters, r_max, in] with ranks padded by zero rows; a < 0 gives t = 0.
// One warp per (row, r). grid: ceil(rows * r_max / 8); block: 256.
template <typename W>
__device__ void lora_shrink_impl(const float* x, const W* a_stack, float* t, const int* adapter_of_row, int rows,
                                 int in_dim, int r_max) {
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    long long item = (long long)blockIdx.x * (blockDim.x >> 5) + warp;
    if (item >= (long long)rows * r_max) return;
    int row = (int)(item / r_max), r = (int)(item % r_max);
    int adapter = adapter_of_row[row];
    float acc = 0.0f;
    if (adapter >= 0) {
        const W* ar = a_stack + ((long long)adapter * r_max + r) * in_dim;
        const float* xr = x + (long long)row * in_dim;
        for (int k = lane; k < in_dim; k += 32) acc += load_w(ar, k) * xr[k];
    }
    acc = warp_sum(acc);
    if (lane == 0) t[(long long)row * r_max + r] = acc;
}

// LoRA expand: out[row, j] += scale[a] * t[row, :] · B[a, j, :]; B stacked [n_adapters, out, r_max].
// One thread per (row, j). grid: ceil(rows * out / 256); block: 256.
template <typename W>
__device__ void lora_expand_impl(const float* t, const W* b_stack, float* out, const int* adapter_of_row,
                                 const float* scale, int rows, int out_dim, int r_max) {
    long long item = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (item >= (long long)rows * out_dim) return;
    int row = (int)(item / out_dim), j = (int)(item % out_dim);
    int adapter = adapter_of_row[row];
    if (adapter < 0) return;
    const W* br = b_stack + ((long long)adapter * out_dim + j) * r_max;
    const float* tr = t + (long long)row * r_max;
    float acc = 0.0f;
    for (int r = 0; r < r_max; ++r) acc += load_w(br, r) * tr[r];
    out[item] += scale[adapter] * acc;
}

extern "C" __global__ void lora_shrink_bf16(const float* x, const bf16_t* a, float* t, const int* adapter_of_row,
                                            int rows, int in_dim, int r_max) {
    lora_shrink_impl(x, a, t, adapter_of_row, rows, in_dim, r_max);
}
extern "C" __global__ void lora_shrink_f32(const float* x, const float* a, float* t, const int* adapter_of_row,
                                           int rows, int in_dim, int r_max) {
    lora_shrink_impl(x, a, t, adapter_of_row, rows, in_dim, r_max);
}
extern "C" __global__ void lora_expand_bf16(const float* t, const bf16_t* b, float* out, const int* adapter_of_row,
                                            const float* scale, int rows, int out_dim, int r_max) {
    lora_expand_impl(t, b, out, adapter_of_row, scale, rows, out_dim, r_max);
}
extern "C" __global__ void lora_expand_f32(const float* t, const float* b, float* out, const int* adapter_of_row,
                                           const float* scale, int rows, int out_dim, int r_max) {
    lora_expand_impl(t, b, out, adapter_of_row, scale, rows, out_dim, r_max);
}
