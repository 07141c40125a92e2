// Causal GQA attention over a contiguous per-sequence f32 KV cache, for prefill (many query
// rows) and decode (one row) alike: one block per (head, query row), its warps splitting the
// key positions, each keeping an online softmax; the partial results merge in shared memory.
// No score buffer, so any context length fits.

#define ATT_WARPS 8
#define ATT_MAX_DIMS_PER_LANE 8 // head_dim ≤ 256

// q, out: [rows, heads * head_dim]; k, v: one layer of the cache, [capacity, kv_heads * head_dim].
// Query row i sits at position start + i and sees positions 0..=start + i.
// grid: (heads, rows); block: ATT_WARPS * 32.
extern "C" __global__ void attention_causal(const float* q, const float* k, const float* v, float* out, int rows,
                                            int heads, int kv_heads, int head_dim, int start, float scale) {
    __shared__ float m_s[ATT_WARPS];
    __shared__ float l_s[ATT_WARPS];
    __shared__ float acc_s[ATT_WARPS][ATT_MAX_DIMS_PER_LANE * 32];
    int head = blockIdx.x, row = blockIdx.y;
    if (head >= heads || row >= rows) return;
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
    int last = start + row;
    for (int p = warp; p <= last; p += ATT_WARPS) {
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
        m_s[warp] = m;
        l_s[warp] = l;
    }
    for (int t = 0; t < ATT_MAX_DIMS_PER_LANE; ++t) acc_s[warp][lane + 32 * t] = acc[t];
    __syncthreads();
    // Warp 0 always saw position 0, so the merged maximum is finite.
    float m_all = m_s[0];
    for (int w = 1; w < ATT_WARPS; ++w) m_all = fmaxf(m_all, m_s[w]);
    float l_all = 0.0f;
    for (int w = 0; w < ATT_WARPS; ++w) l_all += l_s[w] * expf(m_s[w] - m_all);
    float* oh = out + ((long long)row * heads + head) * head_dim;
    for (int d = threadIdx.x; d < head_dim; d += blockDim.x) {
        float sum = 0.0f;
        for (int w = 0; w < ATT_WARPS; ++w) sum += acc_s[w][d] * expf(m_s[w] - m_all);
        oh[d] = sum / l_all;
    }
}
