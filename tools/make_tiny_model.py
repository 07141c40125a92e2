#!/usr/bin/env python3
"""Build a tiny, random Qwen3-family model with four LoRA adapters (L0-L3),
a byte-level BPE tokenizer with a ChatML template, and golden outputs computed
by the reference implementation (HF transformers + PEFT, float32 math over the
saved bf16 weights).

The result is test data for a local inference engine: its loader must read the
same files, and its logits and greedy tokens must match golden.safetensors /
golden.json.

The `tiny-qwen3-5-moe` variant builds a Qwen3.5-MoE model instead (hybrid Gated DeltaNet
linear attention + gated full attention, routed experts with a shared expert), saved the way
real `Qwen3_5MoeForConditionalGeneration` checkpoints are (text weights under
`model.language_model.`, vision and MTP tensors beside them, A_log in f32, a padded vocabulary),
with four PEFT adapters that differ in rank, alpha, rsLoRA, targets (fused experts and the
router through `target_parameters`), `layers_to_transform` and key layout.

Needs: torch, transformers (>=5; the MoE goldens were made with 5.24), peft (>=0.21),
tokenizers, safetensors.
Usage: make_tiny_model.py OUT_DIR [--variant NAME] [--seed N]
"""
import argparse, glob, json, os, shutil, sys

import torch
from safetensors.torch import save_file
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
         r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>",
            "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"]

# ChatML with tool calls; kept to the Jinja subset that minijinja also renders.
CHAT_TEMPLATE = (
    "{%- if tools %}"
    "{{- '<|im_start|>system\\n' }}"
    "{%- if messages[0].role == 'system' %}{{- messages[0].content + '\\n\\n' }}{%- endif %}"
    "{{- '# Tools\\n\\nYou may call one or more functions. Signatures:\\n<tools>' }}"
    "{%- for tool in tools %}{{- '\\n' + (tool | tojson) }}{%- endfor %}"
    "{{- '\\n</tools>\\n\\nReturn each call as <tool_call>{\\\"name\\\": ..., \\\"arguments\\\": ...}</tool_call>.<|im_end|>\\n' }}"
    "{%- elif messages[0].role == 'system' %}"
    "{{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- for message in messages %}"
    "{%- if message.role == 'user' %}"
    "{{- '<|im_start|>user\\n' + message.content + '<|im_end|>\\n' }}"
    "{%- elif message.role == 'assistant' %}"
    "{{- '<|im_start|>assistant\\n' }}"
    "{%- if message.content %}{{- message.content }}{%- endif %}"
    "{%- if message.tool_calls %}{%- for call in message.tool_calls %}"
    "{{- '\\n<tool_call>\\n{\\\"name\\\": \\\"' + call.function.name + '\\\", \\\"arguments\\\": ' + call.function.arguments + '}\\n</tool_call>' }}"
    "{%- endfor %}{%- endif %}"
    "{%- if not (loop.last and continue_final_message) %}{{- '<|im_end|>\\n' }}{%- endif %}"
    "{%- elif message.role == 'tool' %}"
    "{{- '<|im_start|>user\\n<tool_response>\\n' + message.content + '\\n</tool_response><|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)

VARIANTS = {
    # Seen by everyone: tied embeddings, head_dim != hidden/heads, GQA 2:1.
    "tiny": dict(vocab=2048, hidden=64, inter=160, layers=2, heads=4, kv=2, head_dim=32,
                 tie=True, std=0.08,
                 loras={"L0": (8, 16, "all"), "L1": (8, 16, "all"), "L2": (8, 16, "all"),
                        "L3": (16, 8, "attn")}),
}
ALL = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
ATTN = ["q_proj", "k_proj", "v_proj", "o_proj"]


def corpus():
    paths = sorted(glob.glob(os.path.join(os.path.dirname(os.__file__), "*.py")))[:120]
    for p in paths:
        with open(p, encoding="utf-8", errors="ignore") as f:
            yield f.read()
    yield ("L0 L1 L2 L3 model_id=L0 model_id=L1 model_id=L2 model_id=L3 "
           "fix the failing test, run cargo build, open the file, commit the change ") * 50


def build_tokenizer(vocab):
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(SPLIT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab - len(SPECIALS), min_frequency=2,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(corpus(), trainer)
    tok.add_special_tokens(SPECIALS)
    return tok


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--variant", default="tiny")
    ap.add_argument("--seed", type=int, default=1234)
    a = ap.parse_args()
    if a.variant in MOE_VARIANTS:
        return build_moe(a)
    v = VARIANTS[a.variant]
    torch.manual_seed(a.seed)
    out = a.out
    if os.path.exists(out):
        shutil.rmtree(out)
    base = os.path.join(out, "base")
    os.makedirs(base)

    tok = build_tokenizer(v["vocab"])
    tok.save(os.path.join(base, "tokenizer.json"))
    im_end = tok.token_to_id("<|im_end|>")
    eot = tok.token_to_id("<|endoftext|>")
    with open(os.path.join(base, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "chat_template": CHAT_TEMPLATE,
                   "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "bos_token": None,
                   "model_max_length": 4096}, f, indent=1)

    from transformers import PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM
    hf_tok = PreTrainedTokenizerFast(tokenizer_file=os.path.join(base, "tokenizer.json"),
                                     eos_token="<|im_end|>", pad_token="<|endoftext|>")
    hf_tok.chat_template = CHAT_TEMPLATE
    cfg = Qwen3Config(vocab_size=tok.get_vocab_size(), hidden_size=v["hidden"],
                      intermediate_size=v["inter"], num_hidden_layers=v["layers"],
                      num_attention_heads=v["heads"], num_key_value_heads=v["kv"],
                      head_dim=v["head_dim"], max_position_embeddings=4096,
                      rope_theta=1000000.0, rms_norm_eps=1e-6, tie_word_embeddings=v["tie"],
                      initializer_range=v["std"], eos_token_id=im_end, pad_token_id=eot,
                      bos_token_id=None, torch_dtype="bfloat16")
    model = Qwen3ForCausalLM(cfg)
    with torch.no_grad():  # norms away from 1 so a missing norm weight is caught
        for n, p in model.named_parameters():
            if "norm" in n:
                p.copy_(1.0 + 0.3 * torch.randn_like(p))
    model = model.to(torch.bfloat16)
    model.save_pretrained(base, safe_serialization=True)
    with open(os.path.join(base, "generation_config.json"), "w") as f:
        json.dump({"eos_token_id": [im_end, eot], "do_sample": False}, f)

    from peft import LoraConfig, PeftModel, get_peft_model
    for i, (name, (r, alpha, targets)) in enumerate(v["loras"].items()):
        torch.manual_seed(a.seed + 100 + i)
        m = Qwen3ForCausalLM.from_pretrained(base, torch_dtype=torch.float32)
        lc = LoraConfig(r=r, lora_alpha=alpha, lora_dropout=0.0, bias="none",
                        target_modules=ALL if targets == "all" else ATTN,
                        init_lora_weights=False, task_type="CAUSAL_LM")
        pm = get_peft_model(m, lc)
        with torch.no_grad():
            for n, p in pm.named_parameters():
                if "lora_" in n:
                    p.mul_(0.5)
        pm.save_pretrained(os.path.join(out, "loras", name), safe_serialization=True)
        acfg = os.path.join(out, "loras", name, "adapter_config.json")
        with open(acfg) as f:
            d = json.load(f)
        d["base_model_name_or_path"] = "../../base"  # relative: the fixture must not name a machine path
        with open(acfg, "w") as f:
            json.dump(d, f, indent=2)
        readme = os.path.join(out, "loras", name, "README.md")
        if os.path.exists(readme):
            os.remove(readme)

    # ---- golden outputs, float32 math over the saved bf16 weights ----
    ref = Qwen3ForCausalLM.from_pretrained(base, torch_dtype=torch.float32).eval()
    prompts = {
        "chat": hf_tok.apply_chat_template(
            [{"role": "system", "content": "You are a coding agent."},
             {"role": "user", "content": "The test in src/lib.rs fails. Fix it and run cargo test."}],
            add_generation_prompt=True, tokenize=False),
        "route": hf_tok.apply_chat_template(
            [{"role": "user", "content": "Refactor the parser module and run the tests.\n\n"
                                         "Classify the request above. Return one label from: L0 L1 L2 L3.\nmodel_id="},
             {"role": "assistant", "content": "model_id="}],
            continue_final_message=True, tokenize=False),
        "plain": "def fibonacci(n):\n    if n < 2:\n        return n\n",
    }
    labels = ["L0", "L1", "L2", "L3"]
    label_ids = {l: hf_tok.encode(l, add_special_tokens=False) for l in labels}
    tensors, meta = {}, {"variant": a.variant, "seed": a.seed, "prompts": {}, "label_token_ids": label_ids,
                         "greedy_new_tokens": 16, "note": "logits are float32; compare with atol 2e-3 + rtol 2e-3"}
    variants = [("base", ref)]
    for name in labels:
        variants.append((name, PeftModel.from_pretrained(
            Qwen3ForCausalLM.from_pretrained(base, torch_dtype=torch.float32), os.path.join(out, "loras", name)).eval()))
    for pname, text in prompts.items():
        ids = hf_tok.encode(text, add_special_tokens=False)
        meta["prompts"][pname] = {"text": text, "ids": ids, "by_adapter": {}}
        for vname, m in variants:
            with torch.no_grad():
                x = torch.tensor([ids])
                logits = m(input_ids=x).logits[0].float()
                tensors[f"{pname}.{vname}.last_logits"] = logits[-1].clone().contiguous()
                if pname == "chat":
                    tensors[f"{pname}.{vname}.all_logits"] = logits.contiguous()
                # greedy continuation with the margin of each step
                seq, margins = list(ids), []
                for _ in range(16):
                    lg = m(input_ids=torch.tensor([seq])).logits[0, -1].float()
                    top = torch.topk(lg, 2)
                    margins.append(float(top.values[0] - top.values[1]))
                    seq.append(int(top.indices[0]))
                entry = {"greedy": seq[len(ids):], "greedy_margins": margins}
                if pname == "route":
                    # label log-probability under constrained decoding: sum over the label's tokens
                    scores = {}
                    for l in labels:
                        s, cur = 0.0, list(ids)
                        for t in label_ids[l]:
                            lp = torch.log_softmax(m(input_ids=torch.tensor([cur])).logits[0, -1].float(), -1)
                            s += float(lp[t]); cur.append(t)
                        scores[l] = s
                    entry["label_logprobs"] = scores
                    entry["constrained_label"] = max(scores, key=scores.get)
                meta["prompts"][pname]["by_adapter"][vname] = entry
    # tokenizer and chat-template cases: the engine must reproduce these exactly
    texts = ["hello world", "  leading spaces and\ttabs\n\n\nnewlines", "fn main() { println!(\"{}\", 42); }",
             "数据结构与算法 mixed with English", "emoji 🚀🔥 and accents: café naïve", "model_id=L2",
             "<|im_start|>user\nspecial tokens inline<|im_end|>", "x" * 300, "12345678901234567890", ""]
    meta["tokenizer_cases"] = [{"text": t, "ids": hf_tok.encode(t, add_special_tokens=False),
                                "decoded": hf_tok.decode(hf_tok.encode(t, add_special_tokens=False))} for t in texts]
    convs = [
        ([{"role": "user", "content": "hi"}], None, True, False),
        ([{"role": "system", "content": "sys"}, {"role": "user", "content": "list files"},
          {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "shell", "arguments": "{\"cmd\": \"ls\"}"}}]},
          {"role": "tool", "tool_call_id": "c1", "content": "a.txt\nb.txt"}],
         [{"type": "function", "function": {"name": "shell", "description": "run a command",
                                             "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]}}}],
         True, False),
        ([{"role": "user", "content": "classify"}, {"role": "assistant", "content": "model_id="}], None, False, True),
    ]
    meta["template_cases"] = []
    for msgs, tools, gen, cont in convs:
        text = hf_tok.apply_chat_template(msgs, tools=tools, add_generation_prompt=gen, continue_final_message=cont, tokenize=False)
        meta["template_cases"].append({"messages": msgs, "tools": tools, "add_generation_prompt": gen,
                                       "continue_final_message": cont, "rendered": text})
    save_file(tensors, os.path.join(out, "golden.safetensors"))
    with open(os.path.join(out, "golden.json"), "w") as f:
        json.dump(meta, f, indent=1, ensure_ascii=False)
    print("wrote", out)




# ---------------------------------------------------------------------------------------------
# Qwen3.5-MoE (hybrid linear attention + routed experts)

MOE_VARIANTS = {
    # Both layer kinds, GQA 2:1, head_dim 32 != 48/4, partial RoPE (8 of 32 dims), grouped
    # linear-attention heads (2 key heads, 4 value heads), 8 experts top-2, a shared expert,
    # a vocabulary padded beyond the tokenizer's.
    "tiny-qwen3-5-moe": dict(
        vocab=1024, pad_vocab=1040, hidden=48, heads=4, kv=2, head_dim=32, partial=0.25,
        layer_types=["linear_attention", "full_attention", "linear_attention", "full_attention"],
        lin_k_heads=2, lin_v_heads=4, lin_k_dim=16, lin_v_dim=24, conv=4,
        experts=8, topk=2, moe_inter=16, shared_inter=32, std=0.08),
}
LINEAR_ATTN = ["in_proj_qkv", "in_proj_z", "in_proj_b", "in_proj_a", "out_proj"]
SHARED = ["shared_expert.gate_proj", "shared_expert.up_proj", "shared_expert.down_proj"]
EXPERTS = ["mlp.experts.gate_up_proj", "mlp.experts.down_proj"]
# name: (r, alpha, rslora, target_modules, target_parameters, extra LoraConfig, key layout)
MOE_LORAS = {
    "L0": (8, 16, False, ATTN + LINEAR_ATTN + SHARED, EXPERTS, {}, "causal"),
    "L1": (4, 8, True, ["shared_expert_gate", "in_proj_qkv", "out_proj", "o_proj"],
           ["mlp.gate.weight"], {}, "multimodal"),
    "L2": (12, 16, False, ["q_proj", "v_proj", "in_proj_z", "in_proj_a"] + SHARED, EXPERTS,
           {"layers_to_transform": [1, 2], "rank_pattern": {"in_proj_z": 4},
            "alpha_pattern": {"v_proj": 40}}, "multimodal"),
    "L3": (8, 32, False, ATTN + ["in_proj_qkv"], [], {}, "causal"),
}


def moe_text_config(v, vocab_size, im_end, eot):
    return dict(vocab_size=vocab_size, hidden_size=v["hidden"], num_hidden_layers=len(v["layer_types"]),
                num_attention_heads=v["heads"], num_key_value_heads=v["kv"], head_dim=v["head_dim"],
                linear_conv_kernel_dim=v["conv"], linear_key_head_dim=v["lin_k_dim"],
                linear_value_head_dim=v["lin_v_dim"], linear_num_key_heads=v["lin_k_heads"],
                linear_num_value_heads=v["lin_v_heads"], moe_intermediate_size=v["moe_inter"],
                shared_expert_intermediate_size=v["shared_inter"], num_experts=v["experts"],
                num_experts_per_tok=v["topk"], layer_types=v["layer_types"],
                max_position_embeddings=4096, rms_norm_eps=1e-6, tie_word_embeddings=False,
                rope_parameters={"rope_type": "default", "rope_theta": 10000000.0,
                                 "partial_rotary_factor": v["partial"], "mrope_section": [2, 1, 1],
                                 "mrope_interleaved": True},
                initializer_range=v["std"], eos_token_id=im_end, pad_token_id=eot, bos_token_id=None)


def randomize_moe(model, std):
    """Every parameter random (HF initialises some to zero or one, which would hide a missing
    weight or a misread norm convention)."""
    with torch.no_grad():
        for n, p in model.named_parameters():
            if n.endswith("linear_attn.norm.weight"):  # plain w·norm(x)·silu(z)
                p.copy_(1.0 + 0.3 * torch.randn_like(p))
            elif "norm" in n:  # zero-centred: x·(1 + w)
                p.copy_(0.3 * torch.randn_like(p))
            elif n.endswith("A_log"):
                p.copy_(torch.log(torch.empty_like(p).uniform_(1.0, 16.0)))
            elif n.endswith("dt_bias"):
                p.copy_(0.5 * torch.randn_like(p))
            elif "conv1d" in n:
                p.copy_(0.3 * torch.randn_like(p))
            elif n.endswith("mlp.gate.weight"):  # decisive routing: no near-ties between experts
                p.copy_(0.5 * torch.randn_like(p))
            else:
                p.copy_(std * torch.randn_like(p))


def bf16_state(model):
    """The checkpoint's tensors: bf16, except A_log which real checkpoints keep in f32."""
    out = {}
    for k, t in model.state_dict().items():
        out[k] = t.detach().clone().contiguous() if k.endswith("A_log") else t.detach().to(torch.bfloat16).contiguous()
    return out


def build_moe(a):
    v = MOE_VARIANTS[a.variant]
    torch.manual_seed(a.seed)
    out = a.out
    if os.path.exists(out):
        shutil.rmtree(out)
    base = os.path.join(out, "base")
    os.makedirs(base)
    tok = build_tokenizer(v["vocab"])
    tok.save(os.path.join(base, "tokenizer.json"))
    im_end = tok.token_to_id("<|im_end|>")
    eot = tok.token_to_id("<|endoftext|>")
    with open(os.path.join(base, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "chat_template": CHAT_TEMPLATE,
                   "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "bos_token": None,
                   "model_max_length": 4096}, f, indent=1)
    from transformers import (PreTrainedTokenizerFast, Qwen3_5MoeConfig, Qwen3_5MoeForCausalLM,
                              Qwen3_5MoeTextConfig)
    hf_tok = PreTrainedTokenizerFast(tokenizer_file=os.path.join(base, "tokenizer.json"),
                                     eos_token="<|im_end|>", pad_token="<|endoftext|>")
    hf_tok.chat_template = CHAT_TEMPLATE
    assert tok.get_vocab_size() < v["pad_vocab"]
    tcfg = moe_text_config(v, v["pad_vocab"], im_end, eot)
    text_config = Qwen3_5MoeTextConfig(**tcfg)
    model = Qwen3_5MoeForCausalLM(text_config).float()
    randomize_moe(model, v["std"])
    state = bf16_state(model)

    # The files as a multimodal checkpoint has them: config nesting text_config, text weights
    # under model.language_model., lm_head at the top, vision and MTP tensors to be skipped.
    full_cfg = Qwen3_5MoeConfig(text_config=tcfg, vision_config=dict(
        depth=1, hidden_size=16, intermediate_size=32, num_heads=2, out_hidden_size=v["hidden"],
        patch_size=4, temporal_patch_size=2, num_position_embeddings=16))
    cfg_json = full_cfg.to_dict()
    cfg_json["architectures"] = ["Qwen3_5MoeForConditionalGeneration"]
    cfg_json["torch_dtype"] = "bfloat16"
    with open(os.path.join(base, "config.json"), "w") as f:
        json.dump(cfg_json, f, indent=2, sort_keys=True)
    with open(os.path.join(base, "generation_config.json"), "w") as f:
        json.dump({"eos_token_id": [im_end, eot], "do_sample": False}, f)
    files = {}
    for k, t in state.items():
        name = k if k.startswith("lm_head.") else "model.language_model." + k[len("model."):]
        shard = "model-00001-of-00002.safetensors" if (".layers.0." in name or ".layers.1." in name
                                                       or "embed_tokens" in name) else "model-00002-of-00002.safetensors"
        files.setdefault(shard, {})[name] = t
    g = torch.Generator().manual_seed(a.seed + 7)
    files["model-00002-of-00002.safetensors"]["model.visual.patch_embed.proj.weight"] = \
        torch.randn(16, 3, 2, 4, 4, generator=g).to(torch.bfloat16)
    files["model-00002-of-00002.safetensors"]["mtp.fc.weight"] = torch.randn(v["hidden"], 2 * v["hidden"], generator=g).to(torch.bfloat16)
    weight_map = {}
    for shard, tensors in files.items():
        save_file(tensors, os.path.join(base, shard), metadata={"format": "pt"})
        weight_map.update({k: shard for k in tensors})
    with open(os.path.join(base, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {}, "weight_map": dict(sorted(weight_map.items()))}, f, indent=1)

    def reference():
        """f32 math over the saved (bf16) weights, as the causal-LM class."""
        m = Qwen3_5MoeForCausalLM(text_config)
        m.load_state_dict({k: t.float() for k, t in state.items()}, strict=True)
        return m.float().eval()

    from peft import LoraConfig, PeftModel, get_peft_model
    import tempfile
    causal_dirs = {}
    tmp = tempfile.mkdtemp()
    for i, (name, (r, alpha, rslora, modules, params, extra, layout)) in enumerate(MOE_LORAS.items()):
        torch.manual_seed(a.seed + 100 + i)
        lc = LoraConfig(r=r, lora_alpha=alpha, use_rslora=rslora, lora_dropout=0.0, bias="none",
                        target_modules=modules, target_parameters=params or None,
                        init_lora_weights=False, task_type="CAUSAL_LM", **extra)
        pm = get_peft_model(reference(), lc)
        with torch.no_grad():
            for n, p in pm.named_parameters():
                if "lora_" in n:  # bf16-exact, so the bf16 file holds what the golden used
                    p.copy_((0.15 * torch.randn_like(p)).to(torch.bfloat16).float())
        cdir = os.path.join(tmp, name)
        pm.save_pretrained(cdir, safe_serialization=True)
        causal_dirs[name] = cdir
        dst = os.path.join(out, "loras", name)
        os.makedirs(dst)
        with open(os.path.join(cdir, "adapter_config.json")) as f:
            d = json.load(f)
        d["base_model_name_or_path"] = "../../base"  # relative: the fixture must not name a machine path
        with open(os.path.join(dst, "adapter_config.json"), "w") as f:
            json.dump(d, f, indent=2, sort_keys=True)
        from safetensors.torch import load_file
        tensors = load_file(os.path.join(cdir, "adapter_model.safetensors"))
        tensors = {k: t.to(torch.bfloat16) for k, t in tensors.items()}
        if layout == "multimodal":  # as trained on Qwen3_5MoeForConditionalGeneration
            tensors = {k.replace("base_model.model.model.layers.", "base_model.model.model.language_model.layers."): t
                       for k, t in tensors.items()}
        save_file(tensors, os.path.join(dst, "adapter_model.safetensors"), metadata={"format": "pt"})

    # ---- golden outputs ----
    long_code = "".join(f"def step_{i}(x):\n    return x * {i} + {i * i}\n\n" for i in range(13))
    prompts = {
        "chat": hf_tok.apply_chat_template(
            [{"role": "system", "content": "You are a coding agent."},
             {"role": "user", "content": "The test in src/lib.rs fails. Fix it and run cargo test."}],
            add_generation_prompt=True, tokenize=False),
        "route": hf_tok.apply_chat_template(
            [{"role": "user", "content": "Refactor the parser module and run the tests.\n\n"
                                         "Classify the request above. Return one label from: L0 L1 L2 L3.\nmodel_id="},
             {"role": "assistant", "content": "model_id="}],
            continue_final_message=True, tokenize=False),
        "long": hf_tok.apply_chat_template(
            [{"role": "user", "content": "Review this module and fix the failing step:\n\n" + long_code}],
            add_generation_prompt=True, tokenize=False),
    }
    labels = ["L0", "L1", "L2", "L3"]
    label_ids = {l: hf_tok.encode(l, add_special_tokens=False) for l in labels}
    tensors = {}
    meta = {"variant": a.variant, "seed": a.seed, "prompts": {}, "label_token_ids": label_ids,
            "greedy_new_tokens": 16, "tokenizer_vocab": tok.get_vocab_size(),
            "reference": {"torch": torch.__version__, "transformers": __import__("transformers").__version__,
                          "peft": __import__("peft").__version__},
            "note": "logits are float32; compare with atol 2e-3 + rtol 2e-3"}
    variants = [("base", reference())]
    for name in labels:
        variants.append((name, PeftModel.from_pretrained(reference(), causal_dirs[name]).eval()))
    for pname, text in prompts.items():
        ids = hf_tok.encode(text, add_special_tokens=False)
        meta["prompts"][pname] = {"text": text, "ids": ids, "by_adapter": {}}
        positions = None
        if pname == "long":
            assert len(ids) > 257, len(ids)
            positions = sorted({0, 1, 31, 63, 64, 65, 127, 128, 200, 255, 256, 257, len(ids) - 1})
            meta["prompts"][pname]["logit_positions"] = positions
        for vname, m in variants:
            with torch.no_grad():
                logits = m(input_ids=torch.tensor([ids])).logits[0].float()
                tensors[f"{pname}.{vname}.last_logits"] = logits[-1].clone().contiguous()
                if positions is not None:
                    tensors[f"{pname}.{vname}.sel_logits"] = logits[positions].clone().contiguous()
                seq, margins = list(ids), []
                for _ in range(16):
                    lg = m(input_ids=torch.tensor([seq])).logits[0, -1].float()
                    top = torch.topk(lg, 2)
                    margins.append(float(top.values[0] - top.values[1]))
                    seq.append(int(top.indices[0]))
                entry = {"greedy": seq[len(ids):], "greedy_margins": margins}
                if pname == "route":
                    scores = {}
                    for l in labels:
                        s, cur = 0.0, list(ids)
                        for t in label_ids[l]:
                            lp = torch.log_softmax(m(input_ids=torch.tensor([cur])).logits[0, -1].float(), -1)
                            s += float(lp[t]); cur.append(t)
                        scores[l] = s
                    entry["label_logprobs"] = scores
                    entry["constrained_label"] = max(scores, key=scores.get)
                meta["prompts"][pname]["by_adapter"][vname] = entry
    save_file(tensors, os.path.join(out, "golden.safetensors"))
    with open(os.path.join(out, "golden.json"), "w") as f:
        json.dump(meta, f, indent=1, ensure_ascii=False)
    shutil.rmtree(tmp)
    print("wrote", out)


if __name__ == "__main__":
    main()
