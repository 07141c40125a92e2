// The kernels a Qwen3.5-MoE (hybrid) model adds: the gated attention's q/gate split, sigmoid
// gates and partial RoPE; the Gated DeltaNet's conv1d + SiLU, gated delta rule and gated
// RMSNorm; the routed experts' fused-gate/up SiLU and row gather / scatter-add. Semantics are
// the CPU device's (src/engine/device/cpu_hybrid.rs), in the same summation order where one
// thread owns a sum. Activations and recurrent state f32, row-major.

__device__ __forceinline__ float sigmoid_f(float x) { return 1.0f / (1.0f + expf(-x)); }
__device__ __forceinline__ float silu_f(float x) { return x / (1.0f + expf(-x)); }
// PyTorch's softplus (beta 1, threshold 20).
__device__ __forceinline__ float softplus_f(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

// x: [rows·heads, 2·head_dim] (query then gate per head) → a (queries), b (gates), each
// [rows·heads, head_dim]. n = rows·heads·head_dim. Grid-stride.
extern "C" __global__ void split_halves(const float* x, float* a, float* b, long long n, int head_dim) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        long long r = i / head_dim, d = i % head_dim;
        const float* src = x + r * 2 * head_dim;
        a[i] = src[d];
        b[i] = src[head_dim + d];
    }
}

// x[i] *= sigmoid(gate[i]).
extern "C" __global__ void sigmoid_mul(float* x, const float* gate, long long n) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        x[i] *= sigmoid_f(gate[i]);
}

// out[i] += sigmoid(g[i / width]) · y[i] (the shared expert's gate, one per row).
extern "C" __global__ void add_sigmoid_scaled(float* out, const float* y, const float* g, long long n, int width) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        out[i] += sigmoid_f(g[i / width]) * y[i];
}

// out[r, j] = silu(x[r, j]) · x[r, half + j] for x: [rows, 2·half] (fused gate|up).
// n = rows·half. Grid-stride.
extern "C" __global__ void silu_mul_halves(const float* x, float* out, long long n, int half) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        long long r = i / half, j = i % half;
        const float* src = x + r * 2 * half;
        out[i] = silu_f(src[j]) * src[half + j];
    }
}

// Rotate-half RoPE on the first rotary_dim dimensions of each head_dim-wide head, in place on
// [rows, heads, head_dim]; row i at position start + i; inv_freq has rotary_dim / 2 entries.
// The angle is rounded to f32, its sine and cosine taken in f64 (as the CPU device does).
// grid: rows; block: 256.
extern "C" __global__ void rope_partial(float* x, const float* inv_freq, int rows, int heads, int head_dim,
                                        int rotary_dim, int start) {
    int row = blockIdx.x;
    if (row >= rows) return;
    int half = rotary_dim / 2;
    float position = (float)(start + row);
    float* xr = x + (long long)row * heads * head_dim;
    for (int idx = threadIdx.x; idx < heads * half; idx += blockDim.x) {
        int h = idx / half, j = idx % half;
        double angle = (double)(position * inv_freq[j]);
        float s = (float)sin(angle), c = (float)cos(angle);
        float* base = xr + (long long)h * head_dim;
        float x1 = base[j], x2 = base[j + half];
        base[j] = x1 * c - x2 * s;
        base[j + half] = x2 * c + x1 * s;
    }
}

// Causal depthwise conv1d then SiLU, one thread per channel walking its rows in order:
// x, out: [rows, channels]; w: [channels, kernel]; state: [channels, kernel − 1], the previous
// inputs oldest first, replaced by the last kernel − 1 inputs of (state ++ x).
// grid: ceil(channels / 256); block: 256.
extern "C" __global__ void conv1d_silu(const float* x, int rows, int channels, int kernel, const float* w,
                                       float* state, float* out) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= channels) return;
    int hist = kernel - 1;
    const float* wc = w + (long long)c * kernel;
    float* st = state + (long long)c * hist;
    for (int t = 0; t < rows; ++t) {
        float acc = 0.0f;
        for (int j = 0; j < kernel; ++j) {
            int p = t + j; // index into the window state ++ x
            float v = p < hist ? st[p] : x[(long long)(p - hist) * channels + c];
            acc += wc[j] * v;
        }
        out[(long long)t * channels + c] = silu_f(acc);
    }
    // Ascending p reads st[rows + p] (p < rows + p) before anything writes it.
    for (int p = 0; p < hist; ++p) {
        int q = rows + p;
        st[p] = q < hist ? st[q] : x[(long long)(q - hist) * channels + c];
    }
}

// Loads token t's q and k rows of key head kh into shared memory and returns their inverse L2
// norms (eps added to the sum of squares) through qinv, kinv. Every thread of the block calls
// it; the block_sum barriers make the shared rows visible to all threads on return.
__device__ void gdr_load_qk(const float* row, int key_width, int kh, int dk, float* qs, float* ks, float* qinv,
                            float* kinv) {
    float sq = 0.0f, sk = 0.0f;
    for (int i = threadIdx.x; i < dk; i += blockDim.x) {
        float q = row[kh * dk + i], k = row[key_width + kh * dk + i];
        qs[i] = q;
        ks[i] = k;
        sq += q * q;
        sk += k * k;
    }
    sq = block_sum(sq);
    sk = block_sum(sk);
    *qinv = 1.0f / sqrtf(sq + 1e-6f);
    *kinv = 1.0f / sqrtf(sk + 1e-6f);
}

#define GDR_MAX_DK 128

// The gated delta rule, recurrent form, over `rows` tokens in order. One block per value head
// h (key head h / (value_heads / key_heads)); thread j owns column j of the head's state
// S[dk, dv] (in registers), so S·k and S·q are per-thread sums in the CPU device's order.
// Per token: S *= exp(g); delta = (v − Sᵀk)·β; S += k ⊗ delta; o = Sᵀq, with q, k L2-normed,
// q scaled by 1/√dk, β = sigmoid(b), g = −exp(A_log)·softplus(a + dt_bias).
// qkv: [rows, 2·key_heads·dk + value_heads·dv]; b, a: [rows, value_heads];
// state: [value_heads, dk, dv]; out: [rows, value_heads·dv].
// grid: value_heads; block: dv rounded up to 32 (≤ 1024); dk ≤ GDR_MAX_DK.
extern "C" __global__ void gated_delta_rule(const float* qkv, const float* b, const float* a, int rows, int key_heads,
                                            int value_heads, int dk, int dv, const float* a_log,
                                            const float* dt_bias, float* state, float* out) {
    __shared__ float qs[GDR_MAX_DK], ks[GDR_MAX_DK];
    int h = blockIdx.x, j = threadIdx.x;
    if (h >= value_heads || dk > GDR_MAX_DK) return;
    int kh = h / (value_heads / key_heads);
    int key_width = key_heads * dk, width = 2 * key_width + value_heads * dv;
    bool owner = j < dv;
    float* sh = state + (long long)h * dk * dv;
    float s[GDR_MAX_DK];
#pragma unroll
    for (int i = 0; i < GDR_MAX_DK; ++i) s[i] = (owner && i < dk) ? sh[(long long)i * dv + j] : 0.0f;
    float scale = 1.0f / sqrtf((float)dk);
    float neg_a = -expf(a_log[h]);
    float bias = dt_bias[h];
    for (int t = 0; t < rows; ++t) {
        const float* row = qkv + (long long)t * width;
        float qinv, kinv;
        gdr_load_qk(row, key_width, kh, dk, qs, ks, &qinv, &kinv);
        float decay = expf(neg_a * softplus_f(a[(long long)t * value_heads + h] + bias));
        float beta = sigmoid_f(b[(long long)t * value_heads + h]);
        if (owner) {
            float mem = 0.0f;
#pragma unroll
            for (int i = 0; i < GDR_MAX_DK; ++i)
                if (i < dk) {
                    s[i] *= decay;
                    mem += s[i] * (ks[i] * kinv);
                }
            float delta = (row[2 * key_width + h * dv + j] - mem) * beta;
            float o = 0.0f;
#pragma unroll
            for (int i = 0; i < GDR_MAX_DK; ++i)
                if (i < dk) {
                    s[i] += (ks[i] * kinv) * delta;
                    o += s[i] * ((qs[i] * qinv) * scale);
                }
            out[(long long)t * value_heads * dv + h * dv + j] = o;
        }
        __syncthreads(); // every thread is done with qs, ks before the next token's load
    }
    if (owner) {
#pragma unroll
        for (int i = 0; i < GDR_MAX_DK; ++i)
            if (i < dk) sh[(long long)i * dv + j] = s[i];
    }
}

// The same rule for any dk and dv: the state stays in global memory (each thread still owns
// whole columns, so no two threads touch one entry); q and k in dynamic shared memory
// (2·dk floats). grid: value_heads; block: 256; shared: 8·dk bytes.
extern "C" __global__ void gated_delta_rule_wide(const float* qkv, const float* b, const float* a, int rows,
                                                 int key_heads, int value_heads, int dk, int dv, const float* a_log,
                                                 const float* dt_bias, float* state, float* out) {
    extern __shared__ float gdr_shared[];
    float* qs = gdr_shared;
    float* ks = gdr_shared + dk;
    int h = blockIdx.x;
    if (h >= value_heads) return;
    int kh = h / (value_heads / key_heads);
    int key_width = key_heads * dk, width = 2 * key_width + value_heads * dv;
    float* sh = state + (long long)h * dk * dv;
    float scale = 1.0f / sqrtf((float)dk);
    float neg_a = -expf(a_log[h]);
    float bias = dt_bias[h];
    for (int t = 0; t < rows; ++t) {
        const float* row = qkv + (long long)t * width;
        float qinv, kinv;
        gdr_load_qk(row, key_width, kh, dk, qs, ks, &qinv, &kinv);
        float decay = expf(neg_a * softplus_f(a[(long long)t * value_heads + h] + bias));
        float beta = sigmoid_f(b[(long long)t * value_heads + h]);
        for (int j = threadIdx.x; j < dv; j += blockDim.x) {
            float mem = 0.0f;
            for (int i = 0; i < dk; ++i) {
                float v = sh[(long long)i * dv + j] * decay;
                sh[(long long)i * dv + j] = v;
                mem += v * (ks[i] * kinv);
            }
            float delta = (row[2 * key_width + h * dv + j] - mem) * beta;
            float o = 0.0f;
            for (int i = 0; i < dk; ++i) {
                float v = sh[(long long)i * dv + j] + (ks[i] * kinv) * delta;
                sh[(long long)i * dv + j] = v;
                o += v * ((qs[i] * qinv) * scale);
            }
            out[(long long)t * value_heads * dv + h * dv + j] = o;
        }
        __syncthreads();
    }
}

// In place over rows of width: x ← w · x/rms(x) · silu(z), the mean square summed in f64 like
// the CPU device. grid: rows; block: 128 or 256.
extern "C" __global__ void gated_rms_norm(float* x, const float* z, const float* w, int rows, int width, float eps) {
    int row = blockIdx.x;
    if (row >= rows) return;
    float* xr = x + (long long)row * width;
    const float* zr = z + (long long)row * width;
    double acc = 0.0;
    for (int i = threadIdx.x; i < width; i += blockDim.x) acc += (double)xr[i] * (double)xr[i];
    double mean_square = block_sum_f64(acc) / (double)width;
    float inv = 1.0f / sqrtf((float)mean_square + eps);
    for (int i = threadIdx.x; i < width; i += blockDim.x) xr[i] = w[i] * (xr[i] * inv) * silu_f(zr[i]);
}

// Routing lists of up to ROWS_INLINE entries travel in the launch itself (no upload per
// expert in decode); longer ones come as a device array (`list` non-null).
#define ROWS_INLINE 16
struct rows_inline {
    u32 v[ROWS_INLINE];
};
struct weights_inline {
    float v[ROWS_INLINE];
};

// out[i, :] = x[rows[i], :] over rows of width. grid: count; block: 256.
extern "C" __global__ void gather_rows(const float* x, float* out, const u32* list, rows_inline inline_rows, int count,
                                       int width) {
    int i = blockIdx.x;
    if (i >= count) return;
    long long src = (long long)(list ? list[i] : inline_rows.v[i]) * width;
    for (int j = threadIdx.x; j < width; j += blockDim.x) out[(long long)i * width + j] = x[src + j];
}

// out[rows[i], :] += weights[i] · y[i, :] over rows of width. One thread per column walks the
// list in order, so repeated rows add up in the CPU device's order with no race.
// grid: ceil(width / 256); block: 256.
extern "C" __global__ void scatter_add_rows(const float* y, float* out, const u32* list, const float* list_weights,
                                            rows_inline inline_rows, weights_inline inline_weights, int count,
                                            int width) {
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= width) return;
    for (int i = 0; i < count; ++i) {
        u32 r = list ? list[i] : inline_rows.v[i];
        float wt = list ? list_weights[i] : inline_weights.v[i];
        long long at = (long long)r * width + j;
        out[at] += y[(long long)i * width + j] * wt;
    }
}
