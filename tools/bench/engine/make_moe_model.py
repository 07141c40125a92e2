#!/usr/bin/env python3
"""Writes a random model with Qwen3.5-MoE proportions (bf16 safetensors, causal-LM key layout
`model.layers.N…`, model_type "qwen3_5_moe_text") and a rank-64 PEFT adapter on every linear
of attention, linear attention and the shared expert, in the engine's ROOT/base + ROOT/loras/L0
layout. Default shape: 8 layers (linear attention 3 of 4), hidden 2048, 64 routed experts top-8
of width 512, a shared expert of 512, linear attention 16 key / 32 value heads of 128, full
attention 16 heads / 2 KV heads of 256 with a quarter of each head rotated; vocabulary 32768
(smaller than the real 248320 so torch's f32 copy fits a 24 GB machine).

Needs numpy only (writes the files with make_model.py's helpers).
Usage: make_moe_model.py OUT_DIR [--layers N] [--experts E] [--vocab V] [--rank R] [--seed S]
"""
import argparse, json, os, sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_model import to_bf16, write_safetensors  # noqa: E402

SHAPE = dict(vocab=32768, hidden=2048, layers=8, experts=64, top_k=8, moe=512, shared=512,
             lin_k_heads=16, lin_v_heads=32, lin_k_dim=128, lin_v_dim=128, conv=4,
             heads=16, kv=2, head_dim=256)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--layers", type=int, default=SHAPE["layers"])
    ap.add_argument("--experts", type=int, default=SHAPE["experts"])
    ap.add_argument("--vocab", type=int, default=SHAPE["vocab"])
    ap.add_argument("--rank", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    s = dict(SHAPE, layers=a.layers, experts=a.experts, vocab=a.vocab)
    H = s["hidden"]
    types = ["full_attention" if (l + 1) % 4 == 0 else "linear_attention" for l in range(s["layers"])]
    key_dim, value_dim = s["lin_k_heads"] * s["lin_k_dim"], s["lin_v_heads"] * s["lin_v_dim"]
    conv_dim = 2 * key_dim + value_dim
    q_dim, kv_dim = s["heads"] * s["head_dim"], s["kv"] * s["head_dim"]
    rng = np.random.default_rng(a.seed)

    def bf16(shape, std, mean=0.0):
        return ("BF16", shape, to_bf16(rng.standard_normal(shape, dtype=np.float32) * std + mean).tobytes())

    # Linear modules per layer kind: name -> (fan_in, fan_out); the adapter targets all of them.
    linear = {"linear_attn.in_proj_qkv": (H, conv_dim), "linear_attn.in_proj_z": (H, value_dim),
              "linear_attn.in_proj_b": (H, s["lin_v_heads"]), "linear_attn.in_proj_a": (H, s["lin_v_heads"]),
              "linear_attn.out_proj": (value_dim, H)}
    full = {"self_attn.q_proj": (H, 2 * q_dim), "self_attn.k_proj": (H, kv_dim),
            "self_attn.v_proj": (H, kv_dim), "self_attn.o_proj": (q_dim, H)}
    shared = {"mlp.shared_expert.gate_proj": (H, s["shared"]), "mlp.shared_expert.up_proj": (H, s["shared"]),
              "mlp.shared_expert.down_proj": (s["shared"], H)}
    base = os.path.join(a.out, "base")
    os.makedirs(base, exist_ok=True)
    # One shard per layer keeps each file (and the writer's memory) small.
    shards, index = [], {}
    head = {"model.embed_tokens.weight": bf16((s["vocab"], H), 0.02),
            "model.norm.weight": bf16((H,), 0.1), "lm_head.weight": bf16((s["vocab"], H), 0.02)}
    shards.append(head)
    for l, kind in enumerate(types):
        p = f"model.layers.{l}"
        t = {f"{p}.input_layernorm.weight": bf16((H,), 0.1), f"{p}.post_attention_layernorm.weight": bf16((H,), 0.1)}
        mods = linear if kind == "linear_attention" else full
        for m, (fi, fo) in {**mods, **shared}.items():
            t[f"{p}.{m}.weight"] = bf16((fo, fi), 1.0 / np.sqrt(fi))
        if kind == "linear_attention":
            t[f"{p}.linear_attn.conv1d.weight"] = bf16((conv_dim, 1, s["conv"]), 0.5)
            t[f"{p}.linear_attn.dt_bias"] = bf16((s["lin_v_heads"],), 0.1, 1.0)
            a_log = np.log(rng.uniform(1, 16, s["lin_v_heads"])).astype("<f4")
            t[f"{p}.linear_attn.A_log"] = ("F32", (s["lin_v_heads"],), a_log.tobytes())
            t[f"{p}.linear_attn.norm.weight"] = bf16((s["lin_v_dim"],), 0.1, 1.0)
        else:
            t[f"{p}.self_attn.q_norm.weight"] = bf16((s["head_dim"],), 0.1)
            t[f"{p}.self_attn.k_norm.weight"] = bf16((s["head_dim"],), 0.1)
        t[f"{p}.mlp.gate.weight"] = bf16((s["experts"], H), 0.02)
        t[f"{p}.mlp.shared_expert_gate.weight"] = bf16((1, H), 0.02)
        t[f"{p}.mlp.experts.gate_up_proj"] = bf16((s["experts"], 2 * s["moe"], H), 1.0 / np.sqrt(H))
        t[f"{p}.mlp.experts.down_proj"] = bf16((s["experts"], H, s["moe"]), 1.0 / np.sqrt(s["moe"]))
        shards.append(t)
    total = 0
    for i, t in enumerate(shards):
        name = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        write_safetensors(os.path.join(base, name), t)
        for k, (_, _, data) in t.items():
            index[k] = name
            total += len(data)
    shards.clear()
    with open(os.path.join(base, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": index}, f, indent=1)
    config = {
        "architectures": ["Qwen3_5MoeForCausalLM"], "model_type": "qwen3_5_moe_text",
        "vocab_size": s["vocab"], "hidden_size": H, "num_hidden_layers": s["layers"], "layer_types": types,
        "num_attention_heads": s["heads"], "num_key_value_heads": s["kv"], "head_dim": s["head_dim"],
        "linear_conv_kernel_dim": s["conv"], "linear_key_head_dim": s["lin_k_dim"],
        "linear_value_head_dim": s["lin_v_dim"], "linear_num_key_heads": s["lin_k_heads"],
        "linear_num_value_heads": s["lin_v_heads"], "num_experts": s["experts"],
        "num_experts_per_tok": s["top_k"], "moe_intermediate_size": s["moe"],
        "shared_expert_intermediate_size": s["shared"], "hidden_act": "silu", "rms_norm_eps": 1e-6,
        "max_position_embeddings": 32768, "attention_bias": False, "attention_dropout": 0.0,
        "rope_parameters": {"rope_type": "default", "rope_theta": 10000000.0, "partial_rotary_factor": 0.25,
                            "mrope_section": [11, 11, 10], "mrope_interleaved": True},
        "tie_word_embeddings": False, "eos_token_id": s["vocab"] - 1, "pad_token_id": s["vocab"] - 2,
        "router_aux_loss_coef": 0.001, "output_router_logits": False, "use_cache": True,
        "torch_dtype": "bfloat16", "initializer_range": 0.02,
    }
    with open(os.path.join(base, "config.json"), "w") as f:
        json.dump(config, f, indent=1)
    with open(os.path.join(base, "generation_config.json"), "w") as f:
        json.dump({"eos_token_id": s["vocab"] - 1, "do_sample": False}, f)

    r = a.rank
    d = os.path.join(a.out, "loras", "L0")
    os.makedirs(d, exist_ok=True)
    t = {}
    for l, kind in enumerate(types):
        mods = linear if kind == "linear_attention" else full
        for m, (fi, fo) in {**mods, **shared}.items():
            key = f"base_model.model.model.layers.{l}.{m}"
            t[f"{key}.lora_A.weight"] = bf16((r, fi), 1.0 / np.sqrt(fi))
            t[f"{key}.lora_B.weight"] = bf16((fo, r), 0.01)
    write_safetensors(os.path.join(d, "adapter_model.safetensors"), t)
    targets = sorted({m.split(".", 1)[1] if m.startswith("mlp.") else m.split(".")[-1]
                      for m in {**linear, **full, **shared}})
    with open(os.path.join(d, "adapter_config.json"), "w") as f:
        json.dump({"peft_type": "LORA", "task_type": "CAUSAL_LM", "r": r, "lora_alpha": 2 * r,
                   "lora_dropout": 0.0, "bias": "none", "use_rslora": False, "use_dora": False,
                   "target_modules": targets, "base_model_name_or_path": "../../base",
                   "fan_in_fan_out": False, "inference_mode": True}, f, indent=1)
    print("wrote", a.out, f"({total / 2**30:.2f} GiB of bf16 base weights)")


if __name__ == "__main__":
    main()
