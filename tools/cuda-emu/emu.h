// A CPU emulation of the CUDA execution model, enough for hybrid.cu: blocks run one at a time,
// each block's threads are std::threads with a block barrier (__syncthreads) and per-warp
// barriers (__shfl_xor_sync); __shared__ variables are function statics (one block at a time).
#pragma once
#include <barrier>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#define __global__
#define __device__
#define __forceinline__ inline
#define __shared__ static

struct dim3e { unsigned x = 1, y = 1, z = 1; };
inline thread_local dim3e threadIdx, blockIdx;
inline dim3e blockDim, gridDim;

struct BlockCtx {
    std::unique_ptr<std::barrier<>> block;
    std::vector<std::unique_ptr<std::barrier<>>> warps;
    std::vector<double> lanes; // exchange buffer, blockDim.x entries
};
inline BlockCtx* ctx;
inline std::vector<float> dyn_shared;

inline void __syncthreads() { ctx->block->arrive_and_wait(); }

template <typename T> T __shfl_xor_sync(unsigned, T v, int o) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    auto& b = *ctx->warps[warp];
    ctx->lanes[threadIdx.x] = (double)v;
    b.arrive_and_wait();
    T other = (T)ctx->lanes[(warp << 5) | (lane ^ o)];
    b.arrive_and_wait();
    return other;
}
inline float __uint_as_float(unsigned u) { float f; std::memcpy(&f, &u, 4); return f; }
inline unsigned __float_as_uint(float f) { unsigned u; std::memcpy(&u, &f, 4); return u; }
inline float __int_as_float(int u) { float f; std::memcpy(&f, &u, 4); return f; }
#include <math.h>

template <typename F> void launch(unsigned grid, unsigned block, size_t shared_bytes, F kernel) {
    gridDim.x = grid;
    blockDim.x = block;
    dyn_shared.assign(shared_bytes / 4 + 1, 0.0f);
    for (unsigned b = 0; b < grid; ++b) {
        BlockCtx c;
        c.block = std::make_unique<std::barrier<>>(block);
        for (unsigned w = 0; w < (block + 31) / 32; ++w) c.warps.push_back(std::make_unique<std::barrier<>>(32));
        c.lanes.assign(block, 0.0);
        ctx = &c;
        std::vector<std::thread> threads;
        for (unsigned t = 0; t < block; ++t)
            threads.emplace_back([&, b, t] {
                blockIdx.x = b;
                threadIdx.x = t;
                kernel();
                ctx->block->arrive_and_drop();
                ctx->warps[t >> 5]->arrive_and_drop();
            });
        for (auto& th : threads) th.join();
    }
}
