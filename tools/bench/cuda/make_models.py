#!/usr/bin/env python3
"""Writes random-weight Qwen3 models with the real shapes (bf16 safetensors, HF names) and a
rank-64 PEFT adapter on all seven linear modules, for the CUDA benchmark. Only the standard
library and numpy: nothing big travels to the GPU machine, the files are made there.

    make_models.py OUT_DIR 0.6B 1.7B 4B      ->  OUT_DIR/<size>/{base,loras/L0}/...
    make_models.py OUT_DIR Tall              ->  a Qwen3.5-MoE (qwen3_5_moe_text) with
        Macaron-V1-Tall's dimensions (Qwen3.6-35B-A3B: hidden 2048, 256 experts top-8 of
        dim 512 + a shared expert of 512, Gated DeltaNet 16 key / 32 value heads x 128, gated
        attention 16 / 2 heads x 256 with 64 rotary dims, vocab 248320) but
        TALL_LAYERS (default 8) layers, 3 of 4 linear attention, ~15 GB; the rank-64 adapter
        covers attention, linear attention and the shared expert.
"""
import json
import os
import struct
import sys

import numpy as np

SHAPES = {  # hidden, intermediate, layers, heads, kv_heads (head_dim 128, vocab 151936, tied)
    "0.6B": (1024, 3072, 28, 16, 8),
    "1.7B": (2048, 6144, 28, 16, 8),
    "4B": (2560, 9728, 36, 32, 8),
    "8B": (4096, 12288, 36, 32, 8),
}
VOCAB, HEAD_DIM, RANK, ALPHA = 151936, 128, 64, 128
RNG = np.random.default_rng(1234)


def random_bf16(count, exponent=0x3C00):
    """bf16 bit patterns with a random sign and mantissa and a fixed small exponent
    (|x| in [2^-7, 2^-6)): cheap to make and numerically tame through RMSNorm."""
    bits = RNG.integers(0, 1 << 16, size=count, dtype=np.uint16)
    return (bits & np.uint16(0x807F)) | np.uint16(exponent)


def ones_bf16(count):
    return np.full(count, 0x3F80, dtype=np.uint16)


def f32_small(count):
    """f32 values in [-1, 0): an A_log as real checkpoints store it (f32 among bf16)."""
    return -RNG.random(count, dtype=np.float32)


def write_safetensors(path, tensors):
    """tensors: list of (name, shape, maker[, dtype]) where maker(n) returns n values: a uint16
    bf16 array (dtype BF16, the default) or float32 (F32). Written in slices so a 1.6 GB
    expert stack never sits in memory whole."""
    header, offset = {}, 0
    for t in tensors:
        name, shape, dtype = t[0], t[1], (t[3] if len(t) > 3 else "BF16")
        size = int(np.prod(shape)) * (4 if dtype == "F32" else 2)
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + size]}
        offset += size
    blob = json.dumps(header, separators=(",", ":")).encode()
    blob += b" " * (-len(blob) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(blob)))
        f.write(blob)
        for t in tensors:
            n, maker = int(np.prod(t[1])), t[2]
            for start in range(0, n, 1 << 26):
                f.write(maker(min(1 << 26, n - start)).tobytes())


def make(out, size):
    hidden, inter, layers, heads, kv_heads = SHAPES[size]
    q_dim, kv_dim = heads * HEAD_DIM, kv_heads * HEAD_DIM
    base = os.path.join(out, size, "base")
    lora = os.path.join(out, size, "loras", "L0")
    os.makedirs(base, exist_ok=True)
    os.makedirs(lora, exist_ok=True)
    config = {
        "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": hidden,
        "intermediate_size": inter, "num_hidden_layers": layers, "num_attention_heads": heads,
        "num_key_value_heads": kv_heads, "head_dim": HEAD_DIM, "vocab_size": VOCAB,
        "max_position_embeddings": 40960, "rope_theta": 1000000.0, "rms_norm_eps": 1e-6,
        "hidden_act": "silu", "attention_bias": False, "tie_word_embeddings": True,
        "torch_dtype": "bfloat16", "bos_token_id": 151643, "eos_token_id": 151645,
        "use_cache": True, "sliding_window": None, "use_sliding_window": False,
    }
    with open(os.path.join(base, "config.json"), "w") as f:
        json.dump(config, f, indent=1)
    with open(os.path.join(base, "generation_config.json"), "w") as f:
        json.dump({"eos_token_id": [151645, 151643]}, f)
    modules = {  # name -> (out, in)
        "self_attn.q_proj": (q_dim, hidden), "self_attn.k_proj": (kv_dim, hidden),
        "self_attn.v_proj": (kv_dim, hidden), "self_attn.o_proj": (hidden, q_dim),
        "mlp.gate_proj": (inter, hidden), "mlp.up_proj": (inter, hidden), "mlp.down_proj": (hidden, inter),
    }
    tensors = [("model.embed_tokens.weight", (VOCAB, hidden), random_bf16),
               ("model.norm.weight", (hidden,), ones_bf16)]
    adapter = []
    for l in range(layers):
        p = f"model.layers.{l}"
        tensors += [(f"{p}.input_layernorm.weight", (hidden,), ones_bf16),
                    (f"{p}.post_attention_layernorm.weight", (hidden,), ones_bf16),
                    (f"{p}.self_attn.q_norm.weight", (HEAD_DIM,), ones_bf16),
                    (f"{p}.self_attn.k_norm.weight", (HEAD_DIM,), ones_bf16)]
        for m, (o, i) in modules.items():
            tensors.append((f"{p}.{m}.weight", (o, i), random_bf16))
            key = f"base_model.model.{p}.{m}"
            adapter.append((f"{key}.lora_A.weight", (RANK, i), random_bf16))
            adapter.append((f"{key}.lora_B.weight", (o, RANK), lambda n: random_bf16(n, 0x3A00)))
    write_safetensors(os.path.join(base, "model.safetensors"), tensors)
    write_safetensors(os.path.join(lora, "adapter_model.safetensors"), adapter)
    with open(os.path.join(lora, "adapter_config.json"), "w") as f:
        json.dump({"peft_type": "LORA", "r": RANK, "lora_alpha": ALPHA, "use_rslora": False,
                   "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
                   "base_model_name_or_path": base, "task_type": "CAUSAL_LM", "bias": "none",
                   "lora_dropout": 0.0, "fan_in_fan_out": False, "inference_mode": True}, f, indent=1)
    print(f"{size}: {os.path.join(out, size)}", flush=True)


TALL = dict(hidden=2048, experts=256, top_k=8, expert_dim=512, shared_dim=512, key_heads=16,
            value_heads=32, linear_dim=128, conv_kernel=4, heads=16, kv_heads=2, head_dim=256,
            rotary_factor=0.25, vocab=248320)


def zeros_bf16(count):
    """A zero-centred RMSNorm weight of 0: the norm multiplies by 1 + 0."""
    return np.zeros(count, dtype=np.uint16)


def make_tall(out, layers):
    t = TALL
    hidden, vocab, hd = t["hidden"], t["vocab"], t["head_dim"]
    kh, vh, ld = t["key_heads"], t["value_heads"], t["linear_dim"]
    conv_dim = 2 * kh * ld + vh * ld
    kinds = ["full_attention" if (l + 1) % 4 == 0 else "linear_attention" for l in range(layers)]
    base = os.path.join(out, "Tall", "base")
    lora = os.path.join(out, "Tall", "loras", "L0")
    os.makedirs(base, exist_ok=True)
    os.makedirs(lora, exist_ok=True)
    config = {
        "architectures": ["Qwen3_5MoeForCausalLM"], "model_type": "qwen3_5_moe_text",
        "hidden_size": hidden, "num_hidden_layers": layers, "layer_types": kinds,
        "num_attention_heads": t["heads"], "num_key_value_heads": t["kv_heads"], "head_dim": hd,
        "linear_num_key_heads": kh, "linear_num_value_heads": vh, "linear_key_head_dim": ld,
        "linear_value_head_dim": ld, "linear_conv_kernel_dim": t["conv_kernel"],
        "num_experts": t["experts"], "num_experts_per_tok": t["top_k"],
        "moe_intermediate_size": t["expert_dim"], "shared_expert_intermediate_size": t["shared_dim"],
        "vocab_size": vocab, "max_position_embeddings": 262144, "rms_norm_eps": 1e-6,
        "rope_parameters": {"rope_type": "default", "rope_theta": 10000000.0,
                            "partial_rotary_factor": t["rotary_factor"]},
        "hidden_act": "silu", "attention_bias": False, "tie_word_embeddings": False,
        "torch_dtype": "bfloat16", "eos_token_id": 248044, "pad_token_id": 248044,
        "router_aux_loss_coef": 0.001, "output_router_logits": False, "use_cache": True,
    }
    with open(os.path.join(base, "config.json"), "w") as f:
        json.dump(config, f, indent=1)
    with open(os.path.join(base, "generation_config.json"), "w") as f:
        json.dump({"eos_token_id": [248044]}, f)
    e, inter, shared = t["experts"], t["expert_dim"], t["shared_dim"]
    tensors = [("model.embed_tokens.weight", (vocab, hidden), random_bf16),
               ("model.norm.weight", (hidden,), zeros_bf16),
               ("lm_head.weight", (vocab, hidden), random_bf16)]
    adapted = {}  # module path -> (out, in)
    for l, kind in enumerate(kinds):
        p = f"model.layers.{l}"
        tensors += [(f"{p}.input_layernorm.weight", (hidden,), zeros_bf16),
                    (f"{p}.post_attention_layernorm.weight", (hidden,), zeros_bf16)]
        if kind == "full_attention":
            mods = {"self_attn.q_proj": (2 * t["heads"] * hd, hidden),
                    "self_attn.k_proj": (t["kv_heads"] * hd, hidden),
                    "self_attn.v_proj": (t["kv_heads"] * hd, hidden),
                    "self_attn.o_proj": (hidden, t["heads"] * hd)}
            tensors += [(f"{p}.self_attn.q_norm.weight", (hd,), zeros_bf16),
                        (f"{p}.self_attn.k_norm.weight", (hd,), zeros_bf16)]
        else:
            a = "linear_attn"
            mods = {f"{a}.in_proj_qkv": (conv_dim, hidden), f"{a}.in_proj_z": (vh * ld, hidden),
                    f"{a}.in_proj_b": (vh, hidden), f"{a}.in_proj_a": (vh, hidden),
                    f"{a}.out_proj": (hidden, vh * ld)}
            tensors += [(f"{p}.{a}.conv1d.weight", (conv_dim, 1, t["conv_kernel"]), random_bf16),
                        (f"{p}.{a}.A_log", (vh,), f32_small, "F32"),
                        (f"{p}.{a}.dt_bias", (vh,), random_bf16),
                        (f"{p}.{a}.norm.weight", (ld,), ones_bf16)]
        mods.update({"mlp.shared_expert.gate_proj": (shared, hidden),
                     "mlp.shared_expert.up_proj": (shared, hidden),
                     "mlp.shared_expert.down_proj": (hidden, shared)})
        for m, shape in mods.items():
            tensors.append((f"{p}.{m}.weight", shape, random_bf16))
            adapted[f"{p}.{m}"] = shape
        tensors += [(f"{p}.mlp.gate.weight", (e, hidden), random_bf16),
                    (f"{p}.mlp.shared_expert_gate.weight", (1, hidden), random_bf16),
                    (f"{p}.mlp.experts.gate_up_proj", (e, 2 * inter, hidden), random_bf16),
                    (f"{p}.mlp.experts.down_proj", (e, hidden, inter), random_bf16)]
    write_safetensors(os.path.join(base, "model.safetensors"), tensors)
    adapter = []
    for key, (o, i) in adapted.items():
        adapter.append((f"base_model.model.{key}.lora_A.weight", (RANK, i), random_bf16))
        adapter.append((f"base_model.model.{key}.lora_B.weight", (o, RANK), lambda n: random_bf16(n, 0x3A00)))
    write_safetensors(os.path.join(lora, "adapter_model.safetensors"), adapter)
    targets = sorted({k.rsplit(".", 1)[1] for k in adapted})
    with open(os.path.join(lora, "adapter_config.json"), "w") as f:
        json.dump({"peft_type": "LORA", "r": RANK, "lora_alpha": ALPHA, "use_rslora": False,
                   "target_modules": targets, "base_model_name_or_path": base,
                   "task_type": "CAUSAL_LM", "bias": "none", "lora_dropout": 0.0,
                   "fan_in_fan_out": False, "inference_mode": True}, f, indent=1)
    print(f"Tall ({layers} layers): {os.path.join(out, 'Tall')}", flush=True)


if __name__ == "__main__":
    known = list(SHAPES) + ["Tall"]
    if len(sys.argv) < 3 or any(s not in known for s in sys.argv[2:]):
        sys.exit(f"usage: {sys.argv[0]} OUT_DIR SIZE... (sizes: {' '.join(known)})")
    for s in sys.argv[2:]:
        if s == "Tall":
            make_tall(sys.argv[1], int(os.environ.get("TALL_LAYERS", "8")))
        else:
            make(sys.argv[1], s)
