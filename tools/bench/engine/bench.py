#!/usr/bin/env python3
"""Engine benchmark, side by side in one run: baton's CPU engine against HF transformers + PEFT
(PyTorch CPU, f32 math, the same files), on a random Qwen3-0.6B-shaped model (default) or a
random Qwen3.5-MoE-proportioned one (--moe), each with a rank-64 adapter. Baton runs once per
configuration asked for (--weights bf16,f32; --delta-rule chunked,recurrent), torch after them,
--repeats times interleaved; every figure is the median of its runs (the machine is shared).

Usage: bench.py [--moe] [--root DIR] [--prefill 512] [--decode 32] [--steps 40] [--repeats 3]
                [--weights bf16,f32] [--delta-rule chunked] [--threads 2] [--no-torch]
  --root: the model (made with make_model.py / make_moe_model.py when missing).
  baton side: `cargo bench --bench engine` (release; BATON_CPU_WEIGHTS / BATON_CPU_DELTA_RULE
  set per configuration); torch side: this script with --torch-only.
Needs: numpy (model), torch + transformers + peft for the reference side (skipped with a
printed reason when they cannot be imported).
"""
import argparse, json, os, resource, statistics, subprocess, sys, tempfile, time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
SPEED = ["base_prefill_tok_s", "adapter_prefill_tok_s", "base_decode_tok_s", "adapter_decode_tok_s"]


def token_bound(root):
    """The same bound as engine_bench.rs: below Qwen's special ids and inside the vocabulary."""
    with open(os.path.join(root, "base", "config.json")) as f:
        config = json.load(f)
    vocab = config.get("text_config", config)["vocab_size"]
    return min(150000, max(vocab - 64, 1))


def tokens(n, seed, bound):
    """The same xorshift ids as engine_bench.rs."""
    mask = (1 << 64) - 1
    x = ((seed * 0x9E3779B97F4A7C15) & mask) | 1
    out = []
    for _ in range(n):
        x ^= (x << 13) & mask
        x ^= x >> 7
        x ^= (x << 17) & mask
        out.append(x % bound)
    return out


def torch_side(root, prefill, decode, dump_dir, threads):
    import torch
    from transformers import AutoModelForCausalLM
    from peft import PeftModel

    torch.set_num_threads(threads)
    torch.set_grad_enabled(False)
    bound = token_bound(root)
    res = {"torch": torch.__version__, "threads": torch.get_num_threads()}
    t0 = time.perf_counter()
    model = AutoModelForCausalLM.from_pretrained(os.path.join(root, "base"), dtype=torch.float32).eval()
    res["load_s"] = time.perf_counter() - t0

    def measure(m, label):
        m(input_ids=torch.tensor([tokens(16, 1, bound)]))  # warm-up
        ids = torch.tensor([tokens(prefill, 2, bound)])
        t = time.perf_counter()
        m(input_ids=ids, use_cache=True)
        res[f"{label}_prefill_tok_s"] = prefill / (time.perf_counter() - t)
        out = m(input_ids=torch.tensor([tokens(32, 3, bound)]), use_cache=True)
        past, nxt = out.past_key_values, out.logits[:, -1].argmax(-1, keepdim=True)
        t = time.perf_counter()
        for _ in range(decode):
            out = m(input_ids=nxt, past_key_values=past, use_cache=True)
            past, nxt = out.past_key_values, out.logits[:, -1].argmax(-1, keepdim=True)
        res[f"{label}_decode_tok_s"] = decode / (time.perf_counter() - t)

    def dump(m, label):
        if dump_dir:
            logits = m(input_ids=torch.tensor([tokens(16, 1, bound)])).logits[0, -1].float().numpy()
            logits.astype("<f4").tofile(os.path.join(dump_dir, f"torch_{label}.f32"))

    measure(model, "base")
    dump(model, "base")
    loras = os.path.join(root, "loras", "L0")
    if os.path.isdir(loras):
        peft = PeftModel.from_pretrained(model, loras).eval()
        measure(peft, "adapter")
        dump(peft, "adapter")
    res["peak_rss_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return res


def median_of(runs):
    """Per key, the median of the numeric values over runs (other values from the first run)."""
    out = dict(runs[0])
    for key, value in runs[0].items():
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            out[key] = statistics.median(r[key] for r in runs if key in r)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--moe", action="store_true", help="the Qwen3.5-MoE-proportioned model")
    ap.add_argument("--root", default=None)
    ap.add_argument("--prefill", type=int, default=512)
    ap.add_argument("--decode", type=int, default=32)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--weights", default="bf16", help="comma-separated: bf16,f32")
    ap.add_argument("--delta-rule", default="chunked", help="comma-separated: chunked,recurrent")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--torch-only", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--dump", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args()
    root = a.root or ("/tmp/baton-bench-moe" if a.moe else "/tmp/baton-bench-qwen06b")
    if a.torch_only:
        print(json.dumps(torch_side(root, a.prefill, a.decode, a.dump, a.threads)))
        return
    if not os.path.exists(os.path.join(root, "base", "config.json")):
        maker = "make_moe_model.py" if a.moe else "make_model.py"
        subprocess.run([sys.executable, os.path.join(HERE, maker), root], check=True)

    dump = tempfile.mkdtemp(prefix="baton-bench-")
    configs = [(w, d) for w in a.weights.split(",") for d in a.delta_rule.split(",")]
    baton = {c: [] for c in configs}
    ref, why = [], None
    for run in range(a.repeats):
        for weights, delta in configs:
            steps = a.steps if run == 0 else 0
            cmd = ["cargo", "bench", "--bench", "engine", "--", root, "--prefill", str(a.prefill),
                   "--decode", str(a.decode), "--steps", str(steps), "--dump", dump]
            env = dict(os.environ, BATON_CPU_WEIGHTS=weights, BATON_CPU_DELTA_RULE=delta,
                       RAYON_NUM_THREADS=str(a.threads), MATMUL_NUM_THREADS=str(a.threads))
            print(f"$ BATON_CPU_WEIGHTS={weights} BATON_CPU_DELTA_RULE={delta}", " ".join(cmd), flush=True)
            out = subprocess.run(cmd, cwd=REPO, env=env, check=True, stdout=subprocess.PIPE, text=True).stdout
            this = json.loads(out.strip().splitlines()[-1])
            print(f"  baton {weights}/{delta}:", {k: round(this[k], 2) for k in SPEED if k in this},
                  f"peak RSS {this['peak_rss_bytes'] / 2**30:.2f} GiB", flush=True)
            baton[(weights, delta)].append(this)
            os.replace(os.path.join(dump, "base.f32"), os.path.join(dump, f"{weights}_base.f32"))
            if os.path.exists(os.path.join(dump, "adapter.f32")):
                os.replace(os.path.join(dump, "adapter.f32"), os.path.join(dump, f"{weights}_adapter.f32"))
        if a.no_torch or why:
            why = why or "--no-torch"
            continue
        try:
            out = subprocess.run([sys.executable, __file__, "--torch-only", "--root", root, "--prefill",
                                  str(a.prefill), "--decode", str(a.decode), "--dump", dump,
                                  "--threads", str(a.threads)],
                                 check=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            this = json.loads(out.stdout.strip().splitlines()[-1])
            print("  torch:", {k: round(this[k], 2) for k in SPEED if k in this},
                  f"peak RSS {this['peak_rss_bytes'] / 2**30:.2f} GiB", flush=True)
            ref.append(this)
        except subprocess.CalledProcessError as e:
            why = ((e.stderr or "").strip().splitlines()[-1:] or ["torch side failed"])[0]

    med = {c: median_of(runs) for c, runs in baton.items()}
    tref = median_of(ref) if ref else None
    first = med[configs[0]]
    print(f"\nmodel: {root}; baton device: {first['device']}; reference: "
          + (f"torch {tref['torch']} ({tref['threads']} threads, f32)" if tref else f"none ({why})"))
    names = [f"{w}/{d}" for w, d in configs]
    print(f"{'figure (median of ' + str(a.repeats) + ')':30}" + "".join(f"{n:>18}" for n in names)
          + f"{'torch+peft':>12}" + "".join(f"{n + ' ÷ torch':>22}" for n in names))
    kernel = [k for k in ("delta_rule_chunked_tok_s", "delta_rule_recurrent_tok_s") if k in first]
    for key in SPEED + kernel + ["peak_rss_bytes", "peak_rss_during_load_bytes", "rss_after_load_bytes"]:
        scale = 2**30 if key.endswith("bytes") else 1
        unit = " GiB" if scale > 1 else ""
        vals = [med[c].get(key) for c in configs]
        r = tref.get(key) if tref else None
        line = f"{key + unit:30}" + "".join(f"{(v or 0) / scale:18.2f}" for v in vals) + f"{(r or 0) / scale:12.2f}"
        line += "".join(f"{v / r:22.2f}" if v and r else " " * 22 for v in vals)
        print(line)
    if len(configs) > 1:
        base = med[configs[0]]
        print(f"\nratios to {names[0]}:")
        for c, n in zip(configs[1:], names[1:]):
            m = med[c]
            print(f"  {n}: " + ", ".join(
                f"{k} {base[k] / m[k]:.2f}x" for k in SPEED + ["peak_rss_bytes", "rss_after_load_bytes",
                                                             "peak_rss_during_load_bytes", "weights_bytes"]
                if base.get(k) and m.get(k)) + f" ({names[0]} ÷ {n})")
    for c, n in zip(configs, names):
        m = med[c]
        kv = m["kv_cache_bytes"]
        overhead = m["base_decode_tok_s"] / m["adapter_decode_tok_s"] - 1 if m.get("adapter_decode_tok_s") else None
        print(f"\n{n}: weights {m['weights_bytes'] / 2**30:.2f} GiB, adapters {m['adapters_bytes'] / 2**30:.2f} GiB,"
              f" KV {kv / 2**30:.2f} GiB; peak RSS {m['peak_rss_bytes'] / 2**30:.2f} GiB ="
              f" {m['peak_rss_bytes'] / m['weights_bytes']:.2f}x the weight bytes"
              f" ({m['peak_rss_bytes'] / (m['weights_bytes'] + m['adapters_bytes'] + kv):.2f}x with adapters + KV);"
              f" peak during load {m['peak_rss_during_load_bytes'] / 2**30:.2f} GiB")
        if overhead is not None:
            print(f"  adapter overhead on decode time: {overhead * 100:.1f}%")
        print("  heap allocations per decode step (base, adapter):",
              m.get("base_decode_allocations_per_token"), m.get("adapter_decode_allocations_per_token"))
        if "agent_steps" in m and m["agent_steps"]:
            print(f"  agent loop, {m['agent_steps']} steps: prefilled {m['agent_prefilled_tokens']} tokens for "
                  f"{m['agent_new_tokens']} new tokens = {m['agent_prefill_ratio']:.3f}x, {m['agent_loop_s']:.1f} s")
    if tref:
        print(f"torch peak RSS {tref['peak_rss_bytes'] / 2**30:.2f} GiB")
        import numpy as np
        for weights in dict.fromkeys(w for w, _ in configs):
            for label in ["base", "adapter"]:
                mine, theirs = (os.path.join(dump, f) for f in (f"{weights}_{label}.f32", f"torch_{label}.f32"))
                if os.path.exists(mine) and os.path.exists(theirs):
                    x, y = np.fromfile(mine, "<f4"), np.fromfile(theirs, "<f4")
                    print(f"exactness ({weights} weights, {label}, 16-token prompt): max |baton - torch| logit ="
                          f" {np.abs(x - y).max():.2e} (logit scale {np.abs(y).max():.2f}),"
                          f" same argmax: {int(x.argmax()) == int(y.argmax())}")
    print("\nraw:", json.dumps({"baton": {f"{w}/{d}": runs for (w, d), runs in baton.items()}, "torch": ref}))


if __name__ == "__main__":
    main()
