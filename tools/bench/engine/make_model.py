#!/usr/bin/env python3
"""Writes a random Qwen3-0.6B-shaped model (bf16 safetensors, real dimensions) and rank-64 PEFT
adapters on all seven linear modules, in the engine's ROOT/base + ROOT/loras/Lk layout.

Needs numpy only (safetensors files are written by hand: numpy has no bf16).
Usage: make_model.py OUT_DIR [--layers N] [--adapters K] [--rank R] [--seed S]
"""
import argparse, json, os, struct

import numpy as np

SHAPE = dict(vocab=151936, hidden=1024, inter=3072, layers=28, heads=16, kv=8, head_dim=128)
MODULES = {  # name: (block, fan_in, fan_out) as functions of the shape
    "q_proj": ("self_attn", "hidden", "q"), "k_proj": ("self_attn", "hidden", "kv"),
    "v_proj": ("self_attn", "hidden", "kv"), "o_proj": ("self_attn", "q", "hidden"),
    "gate_proj": ("mlp", "hidden", "inter"), "up_proj": ("mlp", "hidden", "inter"),
    "down_proj": ("mlp", "inter", "hidden"),
}


def to_bf16(a):
    """float32 -> bf16 bits, round to nearest even."""
    bits = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)
    rounded = bits + 0x7FFF + ((bits >> 16) & 1)
    return (rounded >> 16).astype(np.uint16)


def write_safetensors(path, tensors):
    """tensors: name -> (dtype string, shape, bytes)."""
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    for name, (dtype, shape, data) in tensors.items():
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
    blob = json.dumps(header, separators=(",", ":")).encode()
    blob += b" " * (-len(blob) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(blob)))
        f.write(blob)
        for _, (_, _, data) in tensors.items():
            f.write(data)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--layers", type=int, default=SHAPE["layers"])
    ap.add_argument("--adapters", type=int, default=1)
    ap.add_argument("--rank", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    s = dict(SHAPE, layers=a.layers)
    dims = {"hidden": s["hidden"], "inter": s["inter"], "q": s["heads"] * s["head_dim"], "kv": s["kv"] * s["head_dim"]}
    rng = np.random.default_rng(a.seed)
    base = os.path.join(a.out, "base")
    os.makedirs(base, exist_ok=True)

    def normal(shape, std):
        return (rng.standard_normal(shape, dtype=np.float32) * std)

    def bf16(shape, std, mean=0.0):
        return ("BF16", shape, to_bf16(normal(shape, std) + mean).tobytes())

    t = {"model.embed_tokens.weight": bf16((s["vocab"], s["hidden"]), 0.02), "model.norm.weight": bf16((s["hidden"],), 0.1, 1.0)}
    for l in range(s["layers"]):
        p = f"model.layers.{l}"
        t[f"{p}.input_layernorm.weight"] = bf16((s["hidden"],), 0.1, 1.0)
        t[f"{p}.post_attention_layernorm.weight"] = bf16((s["hidden"],), 0.1, 1.0)
        t[f"{p}.self_attn.q_norm.weight"] = bf16((s["head_dim"],), 0.1, 1.0)
        t[f"{p}.self_attn.k_norm.weight"] = bf16((s["head_dim"],), 0.1, 1.0)
        for m, (block, fi, fo) in MODULES.items():
            t[f"{p}.{block}.{m}.weight"] = bf16((dims[fo], dims[fi]), 0.02)
    write_safetensors(os.path.join(base, "model.safetensors"), t)
    del t
    config = {
        "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "attention_bias": False,
        "attention_dropout": 0.0, "bos_token_id": 151643, "eos_token_id": 151645, "head_dim": s["head_dim"],
        "hidden_act": "silu", "hidden_size": s["hidden"], "initializer_range": 0.02,
        "intermediate_size": s["inter"], "max_position_embeddings": 40960, "max_window_layers": s["layers"],
        "num_attention_heads": s["heads"], "num_hidden_layers": s["layers"], "num_key_value_heads": s["kv"],
        "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "rope_scaling": None, "sliding_window": None,
        "tie_word_embeddings": True, "torch_dtype": "bfloat16", "use_cache": True, "use_sliding_window": False,
        "vocab_size": s["vocab"],
    }
    with open(os.path.join(base, "config.json"), "w") as f:
        json.dump(config, f, indent=1)
    with open(os.path.join(base, "generation_config.json"), "w") as f:
        json.dump({"eos_token_id": [151645, 151643], "do_sample": False}, f)

    r = a.rank
    for k in range(a.adapters):
        d = os.path.join(a.out, "loras", f"L{k}")
        os.makedirs(d, exist_ok=True)
        t = {}
        for l in range(s["layers"]):
            for m, (block, fi, fo) in MODULES.items():
                key = f"base_model.model.model.layers.{l}.{block}.{m}"
                t[f"{key}.lora_A.weight"] = bf16((r, dims[fi]), 1.0 / np.sqrt(dims[fi]))
                t[f"{key}.lora_B.weight"] = bf16((dims[fo], r), 0.01)
        write_safetensors(os.path.join(d, "adapter_model.safetensors"), t)
        with open(os.path.join(d, "adapter_config.json"), "w") as f:
            json.dump({"peft_type": "LORA", "task_type": "CAUSAL_LM", "r": r, "lora_alpha": 2 * r,
                       "lora_dropout": 0.0, "bias": "none", "use_rslora": False, "use_dora": False,
                       "target_modules": list(MODULES), "base_model_name_or_path": "../../base",
                       "fan_in_fan_out": False, "inference_mode": True}, f, indent=1)
    print("wrote", a.out)


if __name__ == "__main__":
    main()
