#!/usr/bin/env python3
"""Writes random-weight Qwen3 models with the real shapes (bf16 safetensors, HF names) and a
rank-64 PEFT adapter on all seven linear modules, for the CUDA benchmark. Only the standard
library and numpy: nothing big travels to the GPU machine, the files are made there.

    make_models.py OUT_DIR 0.6B 1.7B 4B      ->  OUT_DIR/<size>/{base,loras/L0}/...
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


def write_safetensors(path, tensors):
    """tensors: list of (name, shape, maker) where maker() returns a uint16 bf16 array."""
    header, offset = {}, 0
    for name, shape, _ in tensors:
        size = int(np.prod(shape)) * 2
        header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [offset, offset + size]}
        offset += size
    blob = json.dumps(header, separators=(",", ":")).encode()
    blob += b" " * (-len(blob) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(blob)))
        f.write(blob)
        for _, shape, maker in tensors:
            f.write(maker(int(np.prod(shape))).tobytes())


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


if __name__ == "__main__":
    if len(sys.argv) < 3 or any(s not in SHAPES for s in sys.argv[2:]):
        sys.exit(f"usage: {sys.argv[0]} OUT_DIR SIZE... (sizes: {' '.join(SHAPES)})")
    for s in sys.argv[2:]:
        make(sys.argv[1], s)
