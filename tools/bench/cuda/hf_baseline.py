#!/usr/bin/env python3
"""The HF transformers + PEFT baseline on the same files and GPU as the baton benchmark:
bf16, sdpa attention, batch 1. Prints one `BENCH {json}` line per model.

    hf_baseline.py 0.6B=/tmp/models/0.6B 1.7B=...
"""
import json
import sys
import time

import torch
from peft import PeftModel
from transformers import AutoModelForCausalLM

PREFILL_TOKENS, DECODE_STEPS, PROMPT = 2048, 128, 32


def sync_time(fn):
    torch.cuda.synchronize()
    t = time.perf_counter()
    out = fn()
    torch.cuda.synchronize()
    return time.perf_counter() - t, out


def decode_tok_s(model, prompt):
    kwargs = dict(max_new_tokens=DECODE_STEPS, min_new_tokens=DECODE_STEPS, do_sample=False,
                  pad_token_id=0)
    model.generate(prompt, **kwargs)  # warm-up
    seconds, out = sync_time(lambda: model.generate(prompt, **kwargs))
    assert out.shape[1] == prompt.shape[1] + DECODE_STEPS
    return DECODE_STEPS / seconds


def prefill_tok_s(model, ids):
    with torch.no_grad():
        model(ids[:, :512])
        seconds, _ = sync_time(lambda: model(ids, use_cache=True))
    return ids.shape[1] / seconds


def run(label, root):
    # torch_dtype works in transformers 4.x and 5.x (5.x prefers `dtype` but accepts it); the
    # explicit .to() makes sure the weights are bf16 whichever way the keyword went.
    model = AutoModelForCausalLM.from_pretrained(
        f"{root}/base", torch_dtype=torch.bfloat16, attn_implementation="sdpa")
    model = model.to(device="cuda", dtype=torch.bfloat16).eval()
    ids = torch.randint(0, 150000, (1, PREFILL_TOKENS), device="cuda")
    row = {"engine": "hf", "model": label, "gpu": torch.cuda.get_device_name(),
           "torch": torch.__version__, "decode_tok_s": decode_tok_s(model, ids[:, :PROMPT]),
           "prefill_tok_s": prefill_tok_s(model, ids)}
    peft = PeftModel.from_pretrained(model, f"{root}/loras/L0").eval()
    row["decode_lora_tok_s"] = decode_tok_s(peft, ids[:, :PROMPT])
    row["prefill_lora_tok_s"] = prefill_tok_s(peft, ids)
    print("BENCH " + json.dumps(row), flush=True)
    del peft, model
    torch.cuda.empty_cache()


if __name__ == "__main__":
    for item in sys.argv[1:]:
        label, root = item.split("=", 1)
        try:
            run(label, root)
        except Exception as e:  # one model failing must not hide the others
            print("BENCH " + json.dumps({"engine": "hf", "model": label, "error": repr(e)}), flush=True)
