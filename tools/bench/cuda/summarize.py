#!/usr/bin/env python3
"""Reads `BENCH {json}` lines (baton and HF+PEFT) and prints one summary table with ratios."""
import json
import sys

rows = {}
for line in open(sys.argv[1]):
    if line.startswith("BENCH "):
        r = json.loads(line[6:])
        rows.setdefault(r["model"], {})[r["engine"]] = r

def f(v, fmt="{:.0f}"):
    return "-" if v is None else fmt.format(v)

def ratio(a, b):
    return None if a is None or not b else a / b

head = ["model", "decode", "decode+LoRA", "LoRA ovh", "roofline", "%roof", "HF", "HF+PEFT",
        "x HF+PEFT", "prefill 2k", "HF prefill", "route ms"]
print("\nbatch 1, tokens/s unless noted; roofline = bytes one decode step reads / measured D2D copy"
      " bandwidth (dense: all weights; hybrid: all but the embedding table and the unchosen experts)")
print(" | ".join(head))
print(" | ".join("---" for _ in head))
for model, e in rows.items():
    b, h = e.get("baton", {}), e.get("hf", {})
    for name, r in (("baton", b), ("hf", h)):
        if "error" in r:
            print(f"{model}: {name} failed: {r['error']}")
    d, dl, roof = b.get("decode_tok_s"), b.get("decode_lora_tok_s"), b.get("roofline_decode_tok_s")
    overhead = None if not d or not dl else (d / dl - 1) * 100
    print(" | ".join([
        model, f(d), f(dl), f(overhead, "{:.1f}%"), f(roof), f(ratio(d, roof) and ratio(d, roof) * 100, "{:.0f}%"),
        f(h.get("decode_tok_s")), f(h.get("decode_lora_tok_s")), f(ratio(dl, h.get("decode_lora_tok_s")), "{:.1f}x"),
        f(b.get("prefill_tok_s")), f(h.get("prefill_tok_s")), f(b.get("route_ms"), "{:.1f}"),
    ]))
devs = {e["baton"].get("device") for e in rows.values() if "baton" in e}
bws = {round(e["baton"].get("copy_bandwidth_gbs", 0)) for e in rows.values() if "baton" in e}
print(f"device: {', '.join(d for d in devs if d)}; D2D copy bandwidth: {bws} GB/s")
print("goals: decode >= 85% of roofline, LoRA overhead <= 5%, well ahead of HF+PEFT")
