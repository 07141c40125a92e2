// Row-wise and element-wise kernels of the Qwen3 forward: embedding gather, RMSNorm (also the
// per-head q/k norm), NeoX RoPE, SwiGLU, residual add, and the bf16 hi/lo split that feeds
// cuBLAS. Activations are f32 row-major [rows, width].

template <typename W>
__device__ void embed_impl(const W* table, const u32* tokens, float* out, int rows, int width) {
    int row = blockIdx.x;
    if (row >= rows) return;
    long long src = (long long)tokens[row] * width;
    for (int i = threadIdx.x; i < width; i += blockDim.x)
        out[(long long)row * width + i] = load_w(table, src + i);
}

// grid: rows; block: 256.
extern "C" __global__ void embed_bf16(const bf16_t* table, const u32* tokens, float* out, int rows, int width) {
    embed_impl(table, tokens, out, rows, width);
}
extern "C" __global__ void embed_f32(const float* table, const u32* tokens, float* out, int rows, int width) {
    embed_impl(table, tokens, out, rows, width);
}

// out[r, :] = x[r, :] / rms(x[r, :]) * w. In place when out == x: each element is read and
// written by the same thread. The mean square is summed in f64 like the CPU device.
// grid: rows; block: 128 (per-head norms) or 256.
extern "C" __global__ void rms_norm(const float* x, const float* w, float* out, int rows, int width, float eps) {
    int row = blockIdx.x;
    if (row >= rows) return;
    const float* xr = x + (long long)row * width;
    float* orow = out + (long long)row * width;
    double acc = 0.0;
    for (int i = threadIdx.x; i < width; i += blockDim.x) acc += (double)xr[i] * (double)xr[i];
    double mean_square = block_sum_f64(acc) / (double)width;
    float inv = 1.0f / sqrtf((float)mean_square + eps);
    for (int i = threadIdx.x; i < width; i += blockDim.x) orow[i] = w[i] * (xr[i] * inv);
}

// NeoX rotate-half RoPE in place on [rows, heads, head_dim]. Row i sits at positions[i] when a
// positions array is given, else at start + i. The angle is rounded to f32 (as the reference
// computes it) and its sine and cosine taken in f64.
// grid: rows; block: 256.
extern "C" __global__ void rope_neox(float* x, const float* inv_freq, const int* positions, int rows, int heads,
                                     int head_dim, int start) {
    int row = blockIdx.x;
    if (row >= rows) return;
    int half = head_dim / 2;
    float position = (float)(positions ? positions[row] : start + row);
    float* xr = x + (long long)row * heads * head_dim;
    for (int idx = threadIdx.x; idx < heads * half; idx += blockDim.x) {
        int h = idx / half, j = idx % half;
        double angle = (double)(position * inv_freq[j]);
        float s = (float)sin(angle), c = (float)cos(angle);
        float* base = xr + h * head_dim;
        float x1 = base[j], x2 = base[j + half];
        base[j] = x1 * c - x2 * s;
        base[j + half] = x2 * c + x1 * s;
    }
}

// gate[i] = silu(gate[i]) * up[i].
extern "C" __global__ void silu_mul(float* gate, const float* up, long long n) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        float g = gate[i];
        gate[i] = g / (1.0f + expf(-g)) * up[i];
    }
}

// x[i] += y[i].
extern "C" __global__ void add_in_place(float* x, const float* y, long long n) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        x[i] += y[i];
}

// x = hi + lo with hi, lo bf16: two bf16 GEMMs over (hi, lo) reproduce an f32 activation to
// about 2^-17 relative, so bf16 tensor cores keep the f32 reference's accuracy.
extern "C" __global__ void split_bf16(const float* x, bf16_t* hi, bf16_t* lo, long long n) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        float v = x[i];
        bf16_t h = f32_to_bf16(v);
        hi[i] = h;
        lo[i] = f32_to_bf16(v - bf16_to_f32(h));
    }
}

// bf16 → f32 widening (weights read back, tests).
extern "C" __global__ void bf16_to_f32_kernel(const bf16_t* in, float* out, long long n) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        out[i] = bf16_to_f32(in[i]);
}

// f32 → bf16 narrowing, round to nearest even.
extern "C" __global__ void f32_to_bf16_kernel(const float* in, bf16_t* out, long long n) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        out[i] = f32_to_bf16(in[i]);
}
