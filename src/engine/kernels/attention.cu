// Causal GQA attention over a contiguous per-sequence f32 KV cache. Each block attends one
// (head, query row) over a range of key positions: its warps split the positions, each keeps
// an online softmax, and the partial results merge in shared memory; no score buffer, so any
// context length fits. Prefill (many rows) uses one block per (head, row) over all positions;
// decode (few rows) splits the positions over many blocks (flash-decoding) and merges the
// partial results in a second kernel, so a long context still spreads over every SM.

#define ATT_WARPS 8
#define ATT_MAX_DIMS_PER_LANE 8 // head_dim ≤ 256

struct att_block {
    float m[ATT_WARPS];
    float l[ATT_WARPS];
    float acc[ATT_WARPS][ATT_MAX_DIMS_PER_LANE * 32];
};

// Attends query row `row`, head `head` over key positions begin..=last (begin ≤ last) and
// leaves each warp's (max, denominator, unnormalised accumulator) in `s`; returns the merged
// maximum (finite: warp 0 always sees position `begin`).
// q: [rows, heads * head_dim]; k, v: one layer of the cache, [capacity, kv_heads * head_dim].
__device__ float attend_range(att_block* s, const float* q, const float* k, const float* v, int row, int head,
                              int heads, int kv_heads, int head_dim, int begin, int last, float scale) {
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int group = heads / kv_heads;
    int kv_dim = kv_heads * head_dim;
    int kv_offset = (head / group) * head_dim;
    const float* qh = q + ((long long)row * heads + head) * head_dim;
    float qv[ATT_MAX_DIMS_PER_LANE], acc[ATT_MAX_DIMS_PER_LANE];
    for (int t = 0; t < ATT_MAX_DIMS_PER_LANE; ++t) {
        int d = lane + 32 * t;
        qv[t] = d < head_dim ? qh[d] : 0.0f;
        acc[t] = 0.0f;
    }
    float m = -__int_as_float(0x7f800000), l = 0.0f;
    int p = begin + warp;
    // Four positions per step: their loads are independent, so a warp keeps four K rows and
    // four V rows in flight instead of waiting on one at a time.
    for (; p + 3 * ATT_WARPS <= last; p += 4 * ATT_WARPS) {
        float sc[4];
        for (int u = 0; u < 4; ++u) {
            const float* kp = k + (long long)(p + u * ATT_WARPS) * kv_dim + kv_offset;
            float partial = 0.0f;
            for (int t = 0; t < ATT_MAX_DIMS_PER_LANE; ++t) {
                int d = lane + 32 * t;
                if (d < head_dim) partial += qv[t] * kp[d];
            }
            sc[u] = partial;
        }
        for (int u = 0; u < 4; ++u) sc[u] = warp_sum(sc[u]) * scale;
        float m_new = fmaxf(fmaxf(m, fmaxf(sc[0], sc[1])), fmaxf(sc[2], sc[3]));
        float rescale = expf(m - m_new);
        float w[4];
        for (int u = 0; u < 4; ++u) w[u] = expf(sc[u] - m_new);
        l = l * rescale + ((w[0] + w[1]) + (w[2] + w[3]));
        for (int t = 0; t < ATT_MAX_DIMS_PER_LANE; ++t) {
            int d = lane + 32 * t;
            float add = 0.0f;
            if (d < head_dim) {
                for (int u = 0; u < 4; ++u) add += w[u] * v[(long long)(p + u * ATT_WARPS) * kv_dim + kv_offset + d];
            }
            acc[t] = acc[t] * rescale + add;
        }
        m = m_new;
    }
    for (; p <= last; p += ATT_WARPS) {
        const float* kp = k + (long long)p * kv_dim + kv_offset;
        const float* vp = v + (long long)p * kv_dim + kv_offset;
        float partial = 0.0f;
        for (int t = 0; t < ATT_MAX_DIMS_PER_LANE; ++t) {
            int d = lane + 32 * t;
            if (d < head_dim) partial += qv[t] * kp[d];
        }
        float score = warp_sum(partial) * scale;
        float m_new = fmaxf(m, score);
        float rescale = expf(m - m_new);
        float weight = expf(score - m_new);
        l = l * rescale + weight;
        for (int t = 0; t < ATT_MAX_DIMS_PER_LANE; ++t) {
            int d = lane + 32 * t;
            acc[t] = acc[t] * rescale + (d < head_dim ? weight * vp[d] : 0.0f);
        }
        m = m_new;
    }
    if (lane == 0) {
        s->m[warp] = m;
        s->l[warp] = l;
    }
    for (int t = 0; t < ATT_MAX_DIMS_PER_LANE; ++t) s->acc[warp][lane + 32 * t] = acc[t];
    __syncthreads();
    float m_all = s->m[0];
    for (int w = 1; w < ATT_WARPS; ++w) m_all = fmaxf(m_all, s->m[w]);
    return m_all;
}

// The block's merged denominator and accumulator for dimension d, relative to m_all.
__device__ float merged_l(const att_block* s, float m_all) {
    float l = 0.0f;
    for (int w = 0; w < ATT_WARPS; ++w) l += s->l[w] * expf(s->m[w] - m_all);
    return l;
}
__device__ float merged_acc(const att_block* s, float m_all, int d) {
    float sum = 0.0f;
    for (int w = 0; w < ATT_WARPS; ++w) sum += s->acc[w][d] * expf(s->m[w] - m_all);
    return sum;
}

// Query row i sits at position start + i and sees positions 0..=start + i.
// out: [rows, heads * head_dim]. grid: (heads, rows); block: ATT_WARPS * 32.
extern "C" __global__ void attention_causal(const float* q, const float* k, const float* v, float* out, int rows,
                                            int heads, int kv_heads, int head_dim, int start, float scale) {
    __shared__ att_block s;
    int head = blockIdx.x, row = blockIdx.y;
    if (head >= heads || row >= rows) return;
    float m_all = attend_range(&s, q, k, v, row, head, heads, kv_heads, head_dim, 0, start + row, scale);
    float l_all = merged_l(&s, m_all);
    float* oh = out + ((long long)row * heads + head) * head_dim;
    for (int d = threadIdx.x; d < head_dim; d += blockDim.x) oh[d] = merged_acc(&s, m_all, d) / l_all;
}

// Split-K pass: block (head, row, split) attends positions split * per_split .. (clipped to
// the row's causal end) and writes (max, denominator, accumulator[head_dim]) to
// part[((row * heads + head) * splits + split) * (head_dim + 2) ...]; an empty range writes
// (-inf, 0, 0). grid: (heads, rows, splits); block: ATT_WARPS * 32.
extern "C" __global__ void attention_split(const float* q, const float* k, const float* v, float* part, int rows,
                                           int heads, int kv_heads, int head_dim, int start, float scale,
                                           int splits, int per_split) {
    __shared__ att_block s;
    int head = blockIdx.x, row = blockIdx.y, split = blockIdx.z;
    if (head >= heads || row >= rows || split >= splits) return;
    int last = start + row;
    int begin = split * per_split;
    int end = min(last, begin + per_split - 1);
    float* dst = part + (((long long)row * heads + head) * splits + split) * (head_dim + 2);
    if (begin > last) {
        for (int d = threadIdx.x; d < head_dim + 2; d += blockDim.x)
            dst[d] = d == 0 ? -__int_as_float(0x7f800000) : 0.0f;
        return;
    }
    float m_all = attend_range(&s, q, k, v, row, head, heads, kv_heads, head_dim, begin, end, scale);
    if (threadIdx.x == 0) {
        dst[0] = m_all;
        dst[1] = merged_l(&s, m_all);
    }
    for (int d = threadIdx.x; d < head_dim; d += blockDim.x) dst[2 + d] = merged_acc(&s, m_all, d);
}

// Merges the split results of attention_split into out: [rows, heads * head_dim].
// grid: (heads, rows); block: 128.
extern "C" __global__ void attention_merge(const float* part, float* out, int rows, int heads, int head_dim,
                                           int splits) {
    int head = blockIdx.x, row = blockIdx.y;
    if (head >= heads || row >= rows) return;
    const float* src = part + ((long long)row * heads + head) * splits * (head_dim + 2);
    // Split 0 always holds position 0, so m_all is finite.
    float m_all = src[0];
    for (int s = 1; s < splits; ++s) m_all = fmaxf(m_all, src[s * (head_dim + 2)]);
    float l_all = 0.0f;
    for (int s = 0; s < splits; ++s) {
        const float* p = src + s * (head_dim + 2);
        l_all += p[1] * expf(p[0] - m_all);
    }
    float* oh = out + ((long long)row * heads + head) * head_dim;
    for (int d = threadIdx.x; d < head_dim; d += blockDim.x) {
        float sum = 0.0f;
        for (int s = 0; s < splits; ++s) {
            const float* p = src + s * (head_dim + 2);
            sum += p[2 + d] * expf(p[0] - m_all);
        }
        oh[d] = sum / l_all;
    }
}
