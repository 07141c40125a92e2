// A CPU emulation of the CUDA execution model, enough for hybrid.cu: blocks run one at a time,
// each block's threads are fibers (ucontext) on one OS thread, switched only at the block
// barrier (__syncthreads) and the per-warp barriers (__shfl_xor_sync); __shared__ variables are
// function statics (one block at a time). Fibers, not OS threads: with 256 threads a block the
// kernel's scheduler did the work (6.5 million context switches, 30 s of system time for one
// run), and every fiber still waits at each barrier until all of its block or warp arrived.
#pragma once
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <ucontext.h>
#include <vector>

#define __global__
#define __device__
#define __forceinline__ inline
#define __shared__ static

struct dim3e { unsigned x = 1, y = 1, z = 1; };
// One OS thread runs every fiber: the scheduler sets these before it resumes a fiber.
inline dim3e threadIdx, blockIdx;
inline dim3e blockDim, gridDim;

struct Fiber {
    ucontext_t context;
    bool done = false;
};

struct Barrier {
    unsigned expected = 0, arrived = 0;
    unsigned long generation = 0;
    void arrive_and_wait();
    void arrive_and_drop();
};

struct BlockCtx {
    Barrier block;
    std::vector<Barrier> warps;
    std::vector<double> lanes; // exchange buffer, blockDim.x entries
    std::vector<Fiber> fibers;
    ucontext_t scheduler;
    unsigned current = 0;
    unsigned long progress = 0; // arrivals and exits: a round without any is a deadlock
};
inline BlockCtx* ctx;
inline std::vector<float> dyn_shared;
inline std::function<void()> running_kernel;

inline void yield_to_scheduler() { swapcontext(&ctx->fibers[ctx->current].context, &ctx->scheduler); }

inline void Barrier::arrive_and_wait() {
    unsigned long mine = generation;
    ++ctx->progress;
    if (++arrived == expected) {
        arrived = 0;
        ++generation;
        return;
    }
    while (generation == mine) yield_to_scheduler();
}

// Counts as this phase's arrival and leaves every later phase (std::barrier's meaning).
inline void Barrier::arrive_and_drop() {
    ++ctx->progress;
    if (--expected == arrived && arrived > 0) {
        arrived = 0;
        ++generation;
    }
}

inline void __syncthreads() { ctx->block.arrive_and_wait(); }

template <typename T> T __shfl_xor_sync(unsigned, T v, int o) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    auto& b = ctx->warps[warp];
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

inline void fiber_main() {
    unsigned t = ctx->current;
    running_kernel();
    ctx->block.arrive_and_drop();
    ctx->warps[t >> 5].arrive_and_drop();
    ctx->fibers[t].done = true;
    ++ctx->progress;
} // returns to uc_link: the scheduler

template <typename F> void launch(unsigned grid, unsigned block, size_t shared_bytes, F kernel) {
    constexpr size_t stack_bytes = 128 * 1024;
    static std::unique_ptr<char[]> stacks;
    static unsigned stacks_for = 0;
    if (stacks_for < block) {
        stacks.reset(new char[stack_bytes * block]);
        stacks_for = block;
    }
    gridDim.x = grid;
    blockDim.x = block;
    dyn_shared.assign(shared_bytes / 4 + 1, 0.0f);
    running_kernel = kernel;
    for (unsigned b = 0; b < grid; ++b) {
        BlockCtx c;
        c.block.expected = block;
        c.warps.resize((block + 31) / 32);
        for (unsigned w = 0; w < c.warps.size(); ++w) c.warps[w].expected = std::min(32u, block - w * 32);
        c.lanes.assign(block, 0.0);
        c.fibers.resize(block);
        ctx = &c;
        for (unsigned t = 0; t < block; ++t) {
            ucontext_t& u = c.fibers[t].context;
            getcontext(&u);
            u.uc_stack.ss_sp = stacks.get() + stack_bytes * t;
            u.uc_stack.ss_size = stack_bytes;
            u.uc_link = &c.scheduler;
            makecontext(&u, fiber_main, 0);
        }
        blockIdx.x = b;
        unsigned left = block;
        while (left > 0) {
            unsigned long before = c.progress;
            for (unsigned t = 0; t < block; ++t) {
                if (c.fibers[t].done) continue;
                c.current = t;
                threadIdx.x = t;
                swapcontext(&c.scheduler, &c.fibers[t].context);
                if (c.fibers[t].done) --left;
            }
            if (left > 0 && c.progress == before) {
                std::fprintf(stderr, "deadlock: block %u has %u threads waiting at a barrier none can pass\n", b, left);
                std::exit(2);
            }
        }
    }
}
