// Runs hybrid.cu's kernels under emu.h and compares them with a line-by-line port of the CPU
// device (src/engine/device/cpu_hybrid.rs). Prints the largest difference per kernel.
#include "emu.h"
#include <array>
#include <cstdio>
#include <string>
#include <cstdint>
#include <algorithm>
#include "kernels.inc"

static uint64_t rs = 88172645463325252ull;
static std::vector<float> rnd(size_t n, float scale) {
    std::vector<float> v(n);
    for (auto& x : v) { rs ^= rs << 13; rs ^= rs >> 7; rs ^= rs << 17; x = ((rs >> 40) / float(1 << 24) * 2 - 1) * scale; }
    return v;
}
static int failures = 0;
static void cmp(const char* what, const std::vector<float>& got, const std::vector<float>& want, size_t n) {
    double worst = 0;
    for (size_t i = 0; i < n; ++i) {
        double d = std::fabs(got[i] - want[i]);
        worst = std::max(worst, d);
        if (!(d <= 2e-3 + 2e-3 * std::fabs(want[i]))) { printf("FAIL %s[%zu]: emu %g cpu %g\n", what, i, got[i], want[i]); failures++; return; }
    }
    printf("ok   %-60s max |emu - cpu| = %.3g\n", what, worst);
}
static float sig(float x) { return 1.0f / (1.0f + std::exp(-x)); }
static float silu(float x) { return x / (1.0f + std::exp(-x)); }
static float sp(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }

struct Shape { int kh, vh, dk, dv; };

// cpu_hybrid.rs gated_delta_rule
static void cpu_gdr(const std::vector<float>& qkv, const std::vector<float>& b, const std::vector<float>& a, int rows, Shape s,
                    const std::vector<float>& alog, const std::vector<float>& dtb, std::vector<float>& st, std::vector<float>& out) {
    int kw = s.kh * s.dk, width = 2 * kw + s.vh * s.dv, group = s.vh / s.kh, ow = s.vh * s.dv;
    float scale = 1.0f / std::sqrt((float)s.dk);
    std::vector<float> qn(rows * kw), kn(rows * kw);
    for (int t = 0; t < rows; ++t) {
        for (int i = 0; i < kw; ++i) { qn[t * kw + i] = qkv[t * width + i]; kn[t * kw + i] = qkv[t * width + kw + i]; }
        for (int h = 0; h < s.kh; ++h) {
            for (auto* v : {&qn, &kn}) {
                float sum = 0; for (int i = 0; i < s.dk; ++i) sum += (*v)[t * kw + h * s.dk + i] * (*v)[t * kw + h * s.dk + i];
                float inv = 1.0f / std::sqrt(sum + 1e-6f);
                for (int i = 0; i < s.dk; ++i) (*v)[t * kw + h * s.dk + i] *= inv;
            }
            for (int i = 0; i < s.dk; ++i) qn[t * kw + h * s.dk + i] *= scale;
        }
    }
    for (int h = 0; h < s.vh; ++h) {
        float* S = &st[(size_t)h * s.dk * s.dv];
        int kh = h / group;
        float neg_a = -std::exp(alog[h]);
        std::vector<float> mem(s.dv);
        for (int t = 0; t < rows; ++t) {
            const float* q = &qn[t * kw + kh * s.dk]; const float* k = &kn[t * kw + kh * s.dk];
            const float* v = &qkv[t * width + 2 * kw + h * s.dv];
            float decay = std::exp(neg_a * sp(a[t * s.vh + h] + dtb[h]));
            float beta = sig(b[t * s.vh + h]);
            for (int i = 0; i < s.dk * s.dv; ++i) S[i] *= decay;
            std::fill(mem.begin(), mem.end(), 0.0f);
            for (int i = 0; i < s.dk; ++i) for (int j = 0; j < s.dv; ++j) mem[j] += S[i * s.dv + j] * k[i];
            for (int j = 0; j < s.dv; ++j) mem[j] = (v[j] - mem[j]) * beta;
            for (int i = 0; i < s.dk; ++i) for (int j = 0; j < s.dv; ++j) S[i * s.dv + j] += k[i] * mem[j];
            for (int j = 0; j < s.dv; ++j) { float o = 0; for (int i = 0; i < s.dk; ++i) o += S[i * s.dv + j] * q[i]; out[t * ow + h * s.dv + j] = o; }
        }
    }
}

static void cpu_conv(const std::vector<float>& x, int rows, int ch, int K, const std::vector<float>& w, std::vector<float>& st, std::vector<float>& out) {
    int hist = K - 1;
    std::vector<float> win(hist + rows);
    for (int c = 0; c < ch; ++c) {
        for (int p = 0; p < hist; ++p) win[p] = st[c * hist + p];
        for (int t = 0; t < rows; ++t) win[hist + t] = x[t * ch + c];
        for (int t = 0; t < rows; ++t) { float acc = 0; for (int j = 0; j < K; ++j) acc += w[c * K + j] * win[t + j]; out[t * ch + c] = silu(acc); }
        for (int p = 0; p < hist; ++p) st[c * hist + p] = win[rows + p];
    }
}

static void delta_case(Shape s, std::vector<int> steps) {
    int ch = 2 * s.kh * s.dk + s.vh * s.dv, K = 4, ow = s.vh * s.dv;
    auto w = rnd(ch * K, 0.5f), alog = rnd(s.vh, 1), dtb = rnd(s.vh, 1), nw = rnd(s.dv, 1);
    std::vector<float> cst(ch * (K - 1)), gst(ch * (K - 1)), crec((size_t)s.vh * s.dk * s.dv), grec(crec.size());
    for (size_t si = 0; si < steps.size(); ++si) {
        int rows = steps[si];
        char what[200];
        snprintf(what, sizeof what, "kh%d vh%d dk%d dv%d step %zu rows %d", s.kh, s.vh, s.dk, s.dv, si, rows);
        auto x = rnd(rows * ch, 1);
        std::vector<float> co(rows * ch), go(rows * ch);
        cpu_conv(x, rows, ch, K, w, cst, co);
        launch((ch + 255) / 256, 256, 0, [&] { conv1d_silu(x.data(), rows, ch, K, w.data(), gst.data(), go.data()); });
        cmp((std::string("conv1d_silu ") + what).c_str(), go, co, co.size());
        cmp((std::string("conv state ") + what).c_str(), gst, cst, cst.size());
        auto b = rnd(rows * s.vh, 2), a = rnd(rows * s.vh, 2);
        std::vector<float> ca(rows * ow), ga(rows * ow);
        cpu_gdr(co, b, a, rows, s, alog, dtb, crec, ca);
        if (s.dk <= 128 && s.dv <= 1024)
            launch(s.vh, (s.dv + 31) / 32 * 32, 0, [&] { gated_delta_rule(go.data(), b.data(), a.data(), rows, s.kh, s.vh, s.dk, s.dv, alog.data(), dtb.data(), grec.data(), ga.data()); });
        else
            launch(s.vh, 256, 2 * s.dk * 4, [&] { gated_delta_rule_wide(go.data(), b.data(), a.data(), rows, s.kh, s.vh, s.dk, s.dv, alog.data(), dtb.data(), grec.data(), ga.data()); });
        cmp((std::string("gated_delta_rule ") + what).c_str(), ga, ca, ca.size());
        cmp((std::string("recurrent state ") + what).c_str(), grec, crec, crec.size());
        auto z = rnd(rows * ow, 2);
        int nrows = rows * s.vh;
        for (int r = 0; r < nrows; ++r) {
            double ms = 0; for (int i = 0; i < s.dv; ++i) ms += (double)ca[r * s.dv + i] * ca[r * s.dv + i];
            float inv = 1.0f / std::sqrt((float)(ms / s.dv) + 1e-6f);
            for (int i = 0; i < s.dv; ++i) ca[r * s.dv + i] = nw[i] * (ca[r * s.dv + i] * inv) * silu(z[r * s.dv + i]);
        }
        launch(nrows, s.dv <= 128 ? 128 : 256, 0, [&] { gated_rms_norm(ga.data(), z.data(), nw.data(), nrows, s.dv, 1e-6f); });
        cmp((std::string("gated_rms_norm ") + what).c_str(), ga, ca, ca.size());
    }
}

int main() {
    // Gated attention pieces.
    for (auto [rows, heads, hd, rot, start] : std::vector<std::array<int, 5>>{{7, 4, 32, 8, 0}, {1, 16, 256, 64, 4093}, {3, 2, 256, 64, 17}}) {
        int n = rows * heads * hd;
        auto x = rnd(2 * n, 1);
        std::vector<float> ca(n), cb(n), ga(n), gb(n);
        for (int r = 0; r < rows * heads; ++r) for (int d = 0; d < hd; ++d) { ca[r * hd + d] = x[r * 2 * hd + d]; cb[r * hd + d] = x[r * 2 * hd + hd + d]; }
        launch(std::min((n + 255) / 256, 65535), 256, 0, [&] { split_halves(x.data(), ga.data(), gb.data(), n, hd); });
        cmp("split_halves a", ga, ca, n); cmp("split_halves b", gb, cb, n);
        std::vector<float> inv(rot / 2);
        for (int i = 0; i < rot / 2; ++i) inv[i] = 1.0f / std::pow(1e7f, (float)(2 * i) / rot);
        int half = rot / 2;
        for (int i = 0; i < rows; ++i) {
            float pos = (float)(start + i);
            for (int j = 0; j < half; ++j) {
                double ang = (double)(pos * inv[j]); float s = (float)std::sin(ang), c = (float)std::cos(ang);
                for (int h = 0; h < heads; ++h) { float* base = &ca[(i * heads + h) * hd]; float x1 = base[j], x2 = base[j + half]; base[j] = x1 * c - x2 * s; base[j + half] = x2 * c + x1 * s; }
            }
        }
        launch(rows, 256, 0, [&] { rope_partial(ga.data(), inv.data(), rows, heads, hd, rot, start); });
        cmp("rope_partial", ga, ca, n);
        for (int i = 0; i < n; ++i) ca[i] *= sig(cb[i]);
        launch(std::min((n + 255) / 256, 65535), 256, 0, [&] { sigmoid_mul(ga.data(), gb.data(), n); });
        cmp("sigmoid_mul", ga, ca, n);
    }
    delta_case({2, 4, 16, 24}, {5, 1, 1, 40, 256}); // up to a whole prefill chunk
    delta_case({16, 32, 128, 128}, {6, 1, 1});
    delta_case({1, 3, 160, 40}, {20, 1, 2});
    // Experts.
    for (auto [tokens, width, inter, count, repeat] : std::vector<std::array<int, 5>>{{5, 48, 16, 3, 0}, {1, 2048, 512, 1, 0}, {40, 64, 24, 18, 1}, {300, 96, 20, 43, 1}}) {
        std::vector<unsigned> rows(count);
        for (int i = 0; i < count; ++i) rows[i] = repeat ? (i * 7 + (i % 3 == 0 ? 0 : 3)) % tokens : (i * 2) % tokens;
        auto x = rnd(tokens * width, 1);
        std::vector<float> cin(count * width), gin(count * width);
        for (int i = 0; i < count; ++i) for (int j = 0; j < width; ++j) cin[i * width + j] = x[rows[i] * width + j];
        rows_inline ri{}; weights_inline wi{};
        bool inl = count <= ROWS_INLINE;
        if (inl) for (int i = 0; i < count; ++i) ri.v[i] = rows[i];
        launch(count, 256, 0, [&] { gather_rows(x.data(), gin.data(), inl ? nullptr : rows.data(), ri, count, width); });
        cmp(inl ? "gather_rows (inline)" : "gather_rows (uploaded)", gin, cin, cin.size());
        auto gu = rnd(count * 2 * inter, 3);
        std::vector<float> cact(count * inter), gact(count * inter);
        for (int r = 0; r < count; ++r) for (int j = 0; j < inter; ++j) cact[r * inter + j] = silu(gu[r * 2 * inter + j]) * gu[r * 2 * inter + inter + j];
        launch(std::min((count * inter + 255) / 256, 65535), 256, 0, [&] { silu_mul_halves(gu.data(), gact.data(), (long long)count * inter, inter); });
        cmp("silu_mul_halves", gact, cact, cact.size());
        auto wts = rnd(count, 1); auto y = rnd(count * width, 1);
        auto cout_ = rnd(tokens * width, 1); auto gout = cout_;
        for (int i = 0; i < count; ++i) for (int j = 0; j < width; ++j) cout_[rows[i] * width + j] += y[i * width + j] * wts[i];
        if (inl) for (int i = 0; i < count; ++i) wi.v[i] = wts[i];
        launch((width + 255) / 256, 256, 0, [&] { scatter_add_rows(y.data(), gout.data(), inl ? nullptr : rows.data(), inl ? nullptr : wts.data(), ri, wi, count, width); });
        cmp(inl ? "scatter_add_rows (inline)" : "scatter_add_rows (uploaded, repeated rows)", gout, cout_, cout_.size());
        auto g = rnd(tokens, 4); auto sh = rnd(tokens * width, 1);
        for (int r = 0; r < tokens; ++r) for (int j = 0; j < width; ++j) cout_[r * width + j] += sig(g[r]) * sh[r * width + j];
        launch(std::min((tokens * width + 255) / 256, 65535), 256, 0, [&] { add_sigmoid_scaled(gout.data(), sh.data(), g.data(), (long long)tokens * width, width); });
        cmp("add_sigmoid_scaled", gout, cout_, cout_.size());
    }
    printf(failures ? "FAILED: %d\n" : "all kernels match\n", failures);
    return failures != 0;
}
