// Token choice on device: argmax (lowest index on ties) and temperature / top-p sampling with a
// counter-based Philox4x32-10 generator, so a (seed, step) pair always draws the same token.
// Both run as one block of 1024 threads over the vocabulary and write one int.

struct philox_state { u32 c0, c1, c2, c3; };

__device__ philox_state philox4x32_10(philox_state c, u32 k0, u32 k1) {
    for (int round = 0; round < 10; ++round) {
        u32 hi0 = __umulhi(0xD2511F53u, c.c0), lo0 = 0xD2511F53u * c.c0;
        u32 hi1 = __umulhi(0xCD9E8D57u, c.c2), lo1 = 0xCD9E8D57u * c.c2;
        philox_state n;
        n.c0 = hi1 ^ c.c1 ^ k0;
        n.c1 = lo1;
        n.c2 = hi0 ^ c.c3 ^ k1;
        n.c3 = lo0;
        c = n;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    return c;
}

// A uniform float in [0, 1) from (seed, counter): 24 random bits.
__device__ float philox_uniform(u64 seed, u64 counter) {
    philox_state c;
    c.c0 = (u32)counter;
    c.c1 = (u32)(counter >> 32);
    c.c2 = 0u;
    c.c3 = 0u;
    philox_state r = philox4x32_10(c, (u32)seed, (u32)(seed >> 32));
    return (float)(r.c0 >> 8) * (1.0f / 16777216.0f);
}

// Block-wide argmax; every thread gets the winning index.
__device__ int block_argmax(const float* logits, int n) {
    __shared__ float best_v[1024];
    __shared__ int best_i[1024];
    float bv = -__int_as_float(0x7f800000);
    int bi = n;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        float v = logits[i];
        if (v > bv || (v == bv && i < bi)) { bv = v; bi = i; }
    }
    best_v[threadIdx.x] = bv;
    best_i[threadIdx.x] = bi;
    __syncthreads();
    for (int stride = blockDim.x / 2; stride > 0; stride >>= 1) {
        if (threadIdx.x < stride) {
            float ov = best_v[threadIdx.x + stride];
            int oi = best_i[threadIdx.x + stride];
            if (ov > best_v[threadIdx.x] || (ov == best_v[threadIdx.x] && oi < best_i[threadIdx.x])) {
                best_v[threadIdx.x] = ov;
                best_i[threadIdx.x] = oi;
            }
        }
        __syncthreads();
    }
    int winner = best_i[0];
    __syncthreads();
    return winner < n ? winner : 0;
}

// grid: 1; block: 1024 (a power of two).
extern "C" __global__ void argmax_f32(const float* logits, int n, int* out) {
    int winner = block_argmax(logits, n);
    if (threadIdx.x == 0) *out = winner;
}

__device__ __forceinline__ float softmax_weight(float logit, float max_logit, float inv_temperature) {
    return expf((logit - max_logit) * inv_temperature);
}

// Samples from softmax(logits / temperature) restricted to the smallest set of most likely
// tokens whose mass reaches top_p (the nucleus threshold is found by bisection on the
// unnormalised weight, 30 steps: ties at the threshold are kept). temperature ≤ 0 = argmax.
// grid: 1; block: 1024.
extern "C" __global__ void sample_top_p(const float* logits, int n, float temperature, float top_p, u64 seed,
                                        u64 counter, int* out) {
    __shared__ float prefix[1024];
    __shared__ int chosen;
    if (temperature <= 0.0f) {
        int winner = block_argmax(logits, n);
        if (threadIdx.x == 0) *out = winner;
        return;
    }
    float inv_t = 1.0f / temperature;
    float local_max = -__int_as_float(0x7f800000);
    for (int i = threadIdx.x; i < n; i += blockDim.x) local_max = fmaxf(local_max, logits[i]);
    float max_logit = block_max(local_max);

    float local = 0.0f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) local += softmax_weight(logits[i], max_logit, inv_t);
    float total = block_sum(local);
    float target = fminf(fmaxf(top_p, 0.0f), 1.0f) * total;

    // The largest weight is exactly 1 (the max logit); find the largest threshold whose kept
    // mass still reaches the target.
    float lo = 0.0f, hi = 1.0f;
    for (int step = 0; step < 30; ++step) {
        float mid = 0.5f * (lo + hi);
        float mass = 0.0f;
        for (int i = threadIdx.x; i < n; i += blockDim.x) {
            float w = softmax_weight(logits[i], max_logit, inv_t);
            if (w >= mid) mass += w;
        }
        if (block_sum(mass) >= target) lo = mid; else hi = mid;
    }

    // Contiguous chunks per thread so a prefix scan over threads orders the tokens by id.
    int chunk = (n + blockDim.x - 1) / blockDim.x;
    int begin = threadIdx.x * chunk, end = min(n, begin + chunk);
    float kept = 0.0f;
    for (int i = begin; i < end; ++i) {
        float w = softmax_weight(logits[i], max_logit, inv_t);
        if (w >= lo) kept += w;
    }
    prefix[threadIdx.x] = kept;
    if (threadIdx.x == 0) chosen = -1;
    __syncthreads();
    if (threadIdx.x == 0) {
        float run = 0.0f;
        for (int t = 0; t < blockDim.x; ++t) {
            float v = prefix[t];
            prefix[t] = run;
            run += v;
        }
    }
    __syncthreads();
    float kept_total = prefix[blockDim.x - 1] + (threadIdx.x == blockDim.x - 1 ? kept : 0.0f);
    __shared__ float kept_total_s;
    if (threadIdx.x == blockDim.x - 1) kept_total_s = kept_total;
    __syncthreads();
    float u = philox_uniform(seed, counter) * kept_total_s;
    float run = prefix[threadIdx.x];
    if (kept > 0.0f && u >= run && u < run + kept) {
        int pick = -1;
        for (int i = begin; i < end; ++i) {
            float w = softmax_weight(logits[i], max_logit, inv_t);
            if (w >= lo) {
                pick = i;
                run += w;
                if (u < run) break;
            }
        }
        chosen = pick;
    }
    __syncthreads();
    if (chosen < 0) {
        // u landed past the last kept weight through rounding: the most likely token.
        int winner = block_argmax(logits, n);
        if (threadIdx.x == 0) *out = winner;
    } else if (threadIdx.x == 0) {
        *out = chosen;
    }
}
