#!/usr/bin/env python3
"""`baton serve` beside the reference MoL harness, over one fake upstream, in one run.

Not a test: it prints figures and asserts nothing about time. It starts
- a fake OpenAI-compatible engine (this file, `fake-upstream` mode, its own process) that
  serves L0..L3 with fixed per-hop delays (route 0.20 s, answer 1.24 s, summary 0.32 s by
  default), the answer streamed as tokens when asked for a stream;
- the reference harness's proxy (`python -m mol_harness.proxy` from the checkout given by
  --harness) and `baton serve` (the binary given by --baton), both over that engine, both
  reading the same profile folder, both with an API key;
and then, one proxy after the other in each section:
1. per-turn latency to the client's last byte: non-stream (whole body read) and stream (to
   `data: [DONE]`), conversations one at a time, experts alternating L1/L2 so every turn's
   view needs the previous turn's summary;
2. 64 (--concurrent) conversations at once: p50/p99, proxy CPU per turn (utime + stime from
   /proc/PID/stat) and RSS (VmRSS sampled every 50 ms, and VmHWM);
3. offered load stepped up (open loop, a new turn every 1/rate s to an idle conversation):
   p99 per step, and the rate at which p99 first exceeds twice the lowest step's p99.

Needs aiohttp (the harness's own requirements provide it): run it with the harness's venv
python. See docs/serve.md, "Against the reference harness".
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import secrets
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

try:
    import aiohttp
    from aiohttp import web
except ImportError:  # pragma: no cover - the message is the point
    sys.exit(
        "serve_vs_harness.py needs aiohttp: run it with the harness's venv python "
        "(python -m venv V && V/bin/pip install -r HARNESS/requirements.txt)"
    )

# The harness listens on every interface: a fresh key each run keeps others off it.
API_KEY = "bench-" + secrets.token_urlsafe(18)
ROUTE_MARK = re.compile(r"<<expert (L[0-3])>>")
CLK_TCK = os.sysconf("SC_CLK_TCK")


# --------------------------------------------------------------------------- fake upstream


def fake_upstream_main(argv: list[str]) -> None:
    p = argparse.ArgumentParser(prog="serve_vs_harness.py fake-upstream")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--route", type=float, required=True)
    p.add_argument("--answer", type=float, required=True)
    p.add_argument("--summary", type=float, required=True)
    p.add_argument("--summary-prompt", required=True, help="the profile's summary.md")
    p.add_argument("--tokens", type=int, default=24)
    p.add_argument("--dump", help="append every request (hop, headers, body) to this file")
    a = p.parse_args(argv)
    dump = open(a.dump, "a", encoding="utf-8") if a.dump else None
    summary_head = Path(a.summary_prompt).read_text(encoding="utf-8").strip()[:60]
    # Per caller (the User-Agent's product: `baton`, or `Python` for the harness's aiohttp),
    # so a call one proxy makes late is not put on the other's account.
    stats: dict[str, dict[str, int]] = {}

    def count(request: web.Request, what: str) -> None:
        agent = request.headers.get("User-Agent", "?").split("/")[0][:40]
        per = stats.setdefault(agent, {})
        per[what] = per.get(what, 0) + 1
    answer_words = [f"word{i} " for i in range(a.tokens)]

    def hop_of(request: web.Request, body: dict) -> str:
        header = request.headers.get("X-MOL-Internal-Hop")
        if header in ("route", "answer", "summary"):
            return header
        if "structured_outputs" in body or "regex" in body:
            return "route"
        messages = body.get("messages") or []
        last = messages[-1] if messages and isinstance(messages[-1], dict) else {}
        content = last.get("content")
        if isinstance(content, list):
            content = "".join(
                part.get("text", "") for part in content if isinstance(part, dict)
            )
        if last.get("role") == "user" and isinstance(content, str):
            if content.strip().startswith(summary_head):
                return "summary"
        return "answer"

    def route_label(body: dict) -> str:
        text = json.dumps(body.get("messages") or [], ensure_ascii=False)
        marks = ROUTE_MARK.findall(text)
        # The route prompt may quote earlier turns; the current request is the last one named.
        return marks[-1] if marks else "L2"

    def usage(prompt: int, completion: int) -> dict:
        return {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": 0},
        }

    def completion(model: str, text: str, prompt_tokens: int, n: int) -> dict:
        return {
            "id": "chatcmpl-fake",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": text},
                    "finish_reason": "stop",
                }
            ],
            "usage": usage(prompt_tokens, n),
        }

    async def chat(request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        try:
            body = json.loads(raw)
        except ValueError:
            return web.json_response({"error": {"message": "bad json"}}, status=400)
        if not isinstance(body, dict):
            return web.json_response({"error": {"message": "not an object"}}, status=400)
        model = str(body.get("model", ""))
        hop = hop_of(request, body)
        count(request, hop)
        if dump:
            dump.write(json.dumps({"t": time.time(), "hop": hop, "headers": dict(request.headers),
                                   "body": body}) + "\n")
            dump.flush()
        prompt_tokens = max(1, len(raw) // 4)
        if hop == "route":
            await asyncio.sleep(a.route)
            return web.json_response(completion(model, route_label(body), prompt_tokens, 2))
        if hop == "summary":
            await asyncio.sleep(a.summary)
            return web.json_response(
                completion(model, "The user asked for a task; it was done.", prompt_tokens, 9)
            )
        if not body.get("stream"):
            await asyncio.sleep(a.answer)
            return web.json_response(
                completion(model, "".join(answer_words), prompt_tokens, a.tokens)
            )
        # A stream: the first token after a quarter of the answer time, the last at the end.
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        first = a.answer * 0.25
        gap = (a.answer - first) / max(1, a.tokens - 1)
        started = time.monotonic()

        async def send(obj: dict | str) -> None:
            data = obj if isinstance(obj, str) else json.dumps(obj)
            await resp.write(f"data: {data}\n\n".encode())

        base = {
            "id": "chatcmpl-fake",
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": model,
        }
        try:
            await send({**base, "choices": [{"index": 0, "delta": {"role": "assistant"}}]})
            for i, word in enumerate(answer_words):
                delay = started + first + i * gap - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
                await send(
                    {
                        **base,
                        "choices": [
                            {"index": 0, "delta": {"content": word}, "finish_reason": None}
                        ],
                    }
                )
            await send(
                {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
            )
            if (body.get("stream_options") or {}).get("include_usage"):
                await send({**base, "choices": [], "usage": usage(prompt_tokens, a.tokens)})
            await send("[DONE]")
            await resp.write_eof()
        except (ConnectionResetError, aiohttp.ClientConnectionResetError):
            pass
        return resp

    async def models(_request: web.Request) -> web.Response:
        data = [{"id": m, "object": "model", "owned_by": "fake"} for m in
                ("bench-base", "L0", "L1", "L2", "L3")]
        return web.json_response({"object": "list", "data": data})

    async def health(_request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def gateway(request: web.Request) -> web.Response:
        # A plain engine has no gateway; count the calls a proxy makes to one anyway.
        count(request, "gateway")
        return web.Response(status=404)

    async def get_stats(_request: web.Request) -> web.Response:
        return web.json_response(stats)

    async def reset(_request: web.Request) -> web.Response:
        stats.clear()
        return web.json_response(stats)

    async def other(request: web.Request) -> web.Response:
        count(request, f"{request.method} {request.path}"[:80])
        return web.Response(status=404)

    app = web.Application(client_max_size=64 << 20)
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_get("/v1/models", models)
    app.router.add_get("/health", health)
    app.router.add_route("DELETE", "/_internal/{tail:.*}", gateway)
    app.router.add_get("/_bench/stats", get_stats)
    app.router.add_post("/_bench/reset", reset)
    app.router.add_route("*", "/{tail:.*}", other)
    web.run_app(app, host="127.0.0.1", port=a.port, print=None, access_log=None,
                backlog=4096)


# --------------------------------------------------------------------------- processes


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def proc_cpu(pid: int) -> float:
    """CPU seconds (user + system, children included) the process has used."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return float("nan")
    fields = stat.rsplit(")", 1)[1].split()
    return sum(int(fields[i]) for i in (11, 12, 13, 14)) / CLK_TCK


def proc_mem_kib(pid: int, key: str) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


class Proc:
    def __init__(self, name: str, cmd: list[str], env: dict, cwd: str | None, log: Path):
        self.name = name
        self.log = log
        self.logf = open(log, "wb")
        self.popen = subprocess.Popen(
            cmd, env=env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=self.logf,
            stderr=subprocess.STDOUT, start_new_session=True,
        )

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def stop(self) -> None:
        if self.alive():
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait()
        self.logf.close()

    def tail(self) -> str:
        try:
            return self.log.read_text(errors="replace")[-2000:]
        except OSError:
            return ""


async def wait_http(session: aiohttp.ClientSession, url: str, proc: Proc,
                    timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not proc.alive():
            raise SystemExit(f"{proc.name} exited during startup:\n{proc.tail()}")
        try:
            async with session.get(url, timeout=aiohttp.ClientTimeout(total=2)) as r:
                if r.status == 200:
                    return
        except (aiohttp.ClientError, asyncio.TimeoutError):
            pass
        await asyncio.sleep(0.1)
    raise SystemExit(f"{proc.name} did not answer {url} in {timeout:.0f} s:\n{proc.tail()}")


# --------------------------------------------------------------------------- client


class Target:
    def __init__(self, name: str, base: str, model: str, proc: Proc):
        self.name = name
        self.base = base
        self.model = model
        self.proc = proc


class Conversation:
    _n = 0

    def __init__(self, tag: str):
        Conversation._n += 1
        self.cid = f"bench-{tag}-{Conversation._n:06d}-{random.getrandbits(32):08x}"
        self.messages: list[dict] = [
            {"role": "system", "content": "You are a helpful assistant."}
        ]
        self.turns = 0
        self.busy = False

    alternate = True

    def next_expert(self) -> str:
        if not Conversation.alternate:
            return "L2"
        return "L1" if self.turns % 2 == 0 else "L2"


class Result:
    def __init__(self) -> None:
        self.latencies: list[float] = []
        self.errors: dict[str, int] = {}
        self.misrouted = 0

    def error(self, what: str) -> None:
        self.errors[what] = self.errors.get(what, 0) + 1


async def turn(session: aiohttp.ClientSession, target: Target, convo: Conversation,
               stream: bool, result: Result) -> None:
    expert = convo.next_expert()
    text = (f"<<expert {expert}>> turn {convo.turns + 1} of {convo.cid}: "
            f"please handle step {convo.turns + 1}.")
    messages = convo.messages + [{"role": "user", "content": text}]
    payload = {"model": target.model, "messages": messages, "stream": stream}
    headers = {"Authorization": f"Bearer {API_KEY}", "X-Conversation-Id": convo.cid}
    started = time.monotonic()
    try:
        async with session.post(f"{target.base}/v1/chat/completions", json=payload,
                                headers=headers) as r:
            if r.status != 200:
                await r.read()
                result.error(f"http {r.status}")
                return
            if r.headers.get("X-Conversation-Id") != convo.cid:
                result.error("conversation id not echoed")
            answer = ""
            route = None
            if not stream:
                body = await r.read()
                elapsed = time.monotonic() - started
                doc = json.loads(body)
                answer = doc["choices"][0]["message"].get("content") or ""
                route = (doc.get("metadata") or {}).get("mol_selected_route")
            else:
                elapsed = None
                buf = b""
                async for chunk in r.content.iter_any():
                    buf += chunk
                    while b"\n\n" in buf:
                        frame, buf = buf.split(b"\n\n", 1)
                        for line in frame.split(b"\n"):
                            if not line.startswith(b"data:"):
                                continue
                            data = line[5:].strip()
                            if data == b"[DONE]":
                                elapsed = time.monotonic() - started
                                continue
                            doc = json.loads(data)
                            if "error" in doc:
                                result.error("stream error frame")
                            route = (doc.get("metadata") or {}).get(
                                "mol_selected_route", route)
                            for choice in doc.get("choices") or []:
                                answer += (choice.get("delta") or {}).get("content") or ""
                if elapsed is None:
                    result.error("stream without [DONE]")
                    return
    except (aiohttp.ClientError, asyncio.TimeoutError, ValueError, KeyError,
            IndexError, TypeError) as exc:
        result.error(type(exc).__name__)
        return
    if route != expert:
        result.misrouted += 1
    result.latencies.append(elapsed)
    convo.messages = messages + [{"role": "assistant", "content": answer}]
    convo.turns += 1


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, max(0, round(q * (len(s) - 1))))]


async def sequential(session, target: Target, conversations: int, turns: int,
                     stream: bool, think: float) -> Result:
    result = Result()
    for _ in range(conversations):
        convo = Conversation(target.name)
        for _ in range(turns):
            await turn(session, target, convo, stream, result)
            if think:
                await asyncio.sleep(think)
    return result


class Sampler:
    """Peak VmRSS of a process, sampled while a section runs."""

    def __init__(self, pid: int):
        self.pid = pid
        self.peak_kib = 0
        self._task: asyncio.Task | None = None

    async def _run(self) -> None:
        while True:
            self.peak_kib = max(self.peak_kib, proc_mem_kib(self.pid, "VmRSS"))
            await asyncio.sleep(0.05)

    def __enter__(self) -> "Sampler":
        self._task = asyncio.get_running_loop().create_task(self._run())
        return self

    def __exit__(self, *exc) -> None:
        if self._task:
            self._task.cancel()


async def concurrent(session, target: Target, n: int, turns: int, think: float) -> dict:
    result = Result()

    async def one() -> None:
        convo = Conversation(target.name)
        for _ in range(turns):
            await turn(session, target, convo, False, result)
            if think:
                await asyncio.sleep(think)

    cpu0 = proc_cpu(target.proc.pid)
    t0 = time.monotonic()
    with Sampler(target.proc.pid) as sampler:
        await asyncio.gather(*(one() for _ in range(n)))
    wall = time.monotonic() - t0
    cpu = proc_cpu(target.proc.pid) - cpu0
    done = len(result.latencies)
    return {
        "result": result,
        "cpu_ms_per_turn": 1000 * cpu / done if done else float("nan"),
        "rss_mib": sampler.peak_kib / 1024,
        "hwm_mib": proc_mem_kib(target.proc.pid, "VmHWM") / 1024,
        "rps": done / wall if wall else float("nan"),
    }


async def open_loop(session, target: Target, rate: float, seconds: float,
                    max_turns: int, fake: Proc) -> dict:
    """Offers `rate` turns/s for `seconds`, each to a conversation not in a turn."""
    result = Result()
    idle: list[Conversation] = []
    tasks: set[asyncio.Task] = set()

    async def run(convo: Conversation) -> None:
        await turn(session, target, convo, False, result)
        if convo.turns < max_turns:
            idle.append(convo)

    cpu0 = proc_cpu(target.proc.pid)
    fake0 = proc_cpu(fake.pid)
    client0 = time.process_time()
    t0 = time.monotonic()
    n = int(rate * seconds)
    for i in range(n):
        delay = t0 + i / rate - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        convo = idle.pop() if idle else Conversation(target.name)
        task = asyncio.get_running_loop().create_task(run(convo))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
    lag = time.monotonic() - (t0 + (n - 1) / rate)
    while tasks:
        await asyncio.gather(*list(tasks))
    wall = time.monotonic() - t0
    cpu = proc_cpu(target.proc.pid) - cpu0
    fake_cpu = proc_cpu(fake.pid) - fake0
    client_cpu = time.process_time() - client0
    done = len(result.latencies)
    return {
        "rate": rate,
        "fake_share": fake_cpu / wall if wall else float("nan"),
        "client_share": client_cpu / wall if wall else float("nan"),
        "result": result,
        "p50": pct(result.latencies, 0.50),
        "p99": pct(result.latencies, 0.99),
        "done_rps": done / wall if wall else float("nan"),
        "cpu_share": cpu / wall if wall else float("nan"),
        "lag": max(0.0, lag),
    }


# --------------------------------------------------------------------------- report


def fmt_s(v: float) -> str:
    return "—" if v != v else f"{v:.3f} s"


def ratio(b: float, h: float) -> str:
    if b != b or h != h or h == 0:
        return "—"
    return f"{b / h:.3f} ×"


def errors_of(r: Result) -> str:
    parts = [f"{k}: {v}" for k, v in sorted(r.errors.items())]
    if r.misrouted:
        parts.append(f"misrouted: {r.misrouted}")
    return ", ".join(parts) or "none"


def doubling(steps: list[dict]) -> str:
    good = [s for s in steps if s["p99"] == s["p99"]]
    if not good:
        return "—"
    base = good[0]["p99"]
    prev = good[0]
    for s in good[1:]:
        if s["p99"] > 2 * base or s["result"].errors:
            return f"between {prev['rate']:g} and {s['rate']:g} req/s offered"
        prev = s
    return f"not reached at {good[-1]['rate']:g} req/s offered"


async def measure(args, harness: Target, baton: Target, fake_url: str,
                  fake: Proc) -> None:
    route_answer = args.route + args.answer
    sequential_design = route_answer + args.summary
    conn = aiohttp.TCPConnector(limit=0, limit_per_host=0, force_close=False)
    timeout = aiohttp.ClientTimeout(total=600)
    async with aiohttp.ClientSession(connector=conn, timeout=timeout) as session:
        await wait_http(session, f"{fake_url}/health", fake)
        await wait_http(session, f"{harness.base}/health", harness.proc)
        await wait_http(session, f"{baton.base}/health", baton.proc)
        targets = [t for t in (harness, baton) if t.name in args.only]
        # One turn each to warm connections and code paths; not counted.
        for t in targets:
            await sequential(session, t, 1, 2, False, 0.0)
            await sequential(session, t, 1, 2, True, 0.0)

        lat: dict[tuple[str, bool], Result] = {}
        wire: dict[str, dict] = {}
        for stream in (False, True):
            for t in targets:
                async with session.post(f"{fake_url}/_bench/reset"):
                    pass
                lat[(t.name, stream)] = await sequential(
                    session, t, args.conversations, args.turns, stream, args.think)
                async with session.get(f"{fake_url}/_bench/stats") as r:
                    wire[f"{t.name} {'stream' if stream else 'non-stream'}"] = await r.json()
                print(f"  latency {t.name} stream={stream}: "
                      f"p50 {fmt_s(pct(lat[(t.name, stream)].latencies, 0.5))}",
                      file=sys.stderr, flush=True)

        conc: dict[str, dict] = {}
        if not args.skip_concurrent:
            for t in targets:
                conc[t.name] = await concurrent(session, t, args.concurrent, args.turns,
                                                args.think)
                print(f"  {args.concurrent} concurrent {t.name}: "
                      f"p99 {fmt_s(pct(conc[t.name]['result'].latencies, 0.99))}",
                      file=sys.stderr, flush=True)

        steps: dict[str, list[dict]] = {t.name: [] for t in targets}
        if args.rates:
            for rate in args.rates:
                for t in targets:
                    s = await open_loop(session, t, rate, args.step_seconds, args.turns, fake)
                    steps[t.name].append(s)
                    print(f"  {rate:g} req/s {t.name}: p99 {fmt_s(s['p99'])} "
                          f"errors {errors_of(s['result'])}", file=sys.stderr, flush=True)

    h, b = harness.name, baton.name
    print()
    cpu_model = next((line.split(":", 1)[1].strip() for line in
                      Path("/proc/cpuinfo").read_text().splitlines()
                      if line.startswith("model name")), "?")
    print(f"machine: {os.cpu_count()} × {cpu_model}; load average at start "
          f"{args.load_at_start:.2f}, at end {os.getloadavg()[0]:.2f}")
    print(f"fake upstream: route {args.route:.2f} s, answer {args.answer:.2f} s, "
          f"summary {args.summary:.2f} s; route + answer = {route_answer:.2f} s; "
          f"target ≤ 1.05 × that = {1.05 * route_answer:.3f} s")
    print(f"baton serve args: {args.baton_args or '(none)'}")
    print()
    print(f"## Per-turn latency, {args.conversations} conversations × {args.turns} turns, "
          f"one at a time (experts {args.experts}, think time {args.think:g} s)")
    print()
    print("| | harness p50 | baton p50 | harness p99 | baton p99 | baton/harness (p50) "
          "| baton p50 / (route + answer) | baton p50 / answer | errors h / b |")
    print("|---|---|---|---|---|---|---|---|---|")
    for stream in (False, True):
        rh = lat.get((h, stream), Result())
        rb = lat.get((b, stream), Result())
        label = "stream, to `[DONE]`" if stream else "non-stream, last byte"
        print(f"| {label} | {fmt_s(pct(rh.latencies, .5))} | {fmt_s(pct(rb.latencies, .5))} "
              f"| {fmt_s(pct(rh.latencies, .99))} | {fmt_s(pct(rb.latencies, .99))} "
              f"| {ratio(pct(rb.latencies, .5), pct(rh.latencies, .5))} "
              f"| {ratio(pct(rb.latencies, .5), route_answer)} "
              f"| {ratio(pct(rb.latencies, .5), args.answer)} "
              f"| {errors_of(rh)} / {errors_of(rb)} |")
    print()
    print(f"(the sequential design, route + answer + summary, is {sequential_design:.2f} s; "
          "targets: ≤ 1.05 × (route + answer) without speculation, ≤ 1.0 × answer with a "
          "speculative hit)")
    print()
    print("Upstream requests the fake engine saw in the latency section, by caller "
          "(`Python` is the harness's aiohttp):")
    for k, v in wire.items():
        print(f"- {k}: {json.dumps(v)}")
    if conc:
        print()
        print(f"## {args.concurrent} concurrent conversations × {args.turns} turns (non-stream)")
        print()
        print("| | p50 | p99 | turns/s | proxy CPU per turn | peak VmRSS | VmHWM | errors |")
        print("|---|---|---|---|---|---|---|---|")
        for name in (h, b):
            c = conc.get(name)
            if not c:
                continue
            r = c["result"]
            print(f"| {name} | {fmt_s(pct(r.latencies, .5))} | {fmt_s(pct(r.latencies, .99))} "
                  f"| {c['rps']:.1f} | {c['cpu_ms_per_turn']:.2f} ms | {c['rss_mib']:.1f} MiB "
                  f"| {c['hwm_mib']:.1f} MiB | {errors_of(r)} |")
        if h in conc and b in conc:
            ch, cb = conc[h], conc[b]
            print(f"| baton/harness | {ratio(pct(cb['result'].latencies, .5), pct(ch['result'].latencies, .5))} "
                  f"| {ratio(pct(cb['result'].latencies, .99), pct(ch['result'].latencies, .99))} "
                  f"| | {ratio(cb['cpu_ms_per_turn'], ch['cpu_ms_per_turn'])} "
                  f"| {ratio(cb['rss_mib'], ch['rss_mib'])} | | |")
    if args.rates:
        print()
        print(f"## Offered load (open loop, {args.step_seconds:g} s a step, non-stream)")
        print()
        print("| offered req/s | harness p50 | harness p99 | harness done/s | harness CPU "
              "| baton p50 | baton p99 | baton done/s | baton CPU | errors h / b "
              "| fake engine CPU h / b | client CPU h / b |")
        print("|---|---|---|---|---|---|---|---|---|---|---|---|")
        for i, rate in enumerate(args.rates):
            sh = steps.get(h, [])[i] if len(steps.get(h, [])) > i else None
            sb = steps.get(b, [])[i] if len(steps.get(b, [])) > i else None

            def cols(s):
                if not s:
                    return "— | — | — | —"
                return (f"{fmt_s(s['p50'])} | {fmt_s(s['p99'])} | {s['done_rps']:.1f} "
                        f"| {100 * s['cpu_share']:.0f} %")

            errs = " / ".join(errors_of(s["result"]) if s else "—" for s in (sh, sb))
            fakes = " / ".join(f"{100 * s['fake_share']:.0f} %" if s else "—" for s in (sh, sb))
            clients = " / ".join(
                f"{100 * s['client_share']:.0f} %" if s else "—" for s in (sh, sb))
            print(f"| {rate:g} | {cols(sh)} | {cols(sb)} | {errs} | {fakes} | {clients} |")
        print()
        for name in (h, b):
            if steps.get(name):
                print(f"- {name}: p99 doubles {doubling(steps[name])}")
        print("  (CPU: a process's CPU time over the step's wall time; 100 % = one core; "
              f"this machine has {os.cpu_count()} cores)")


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "fake-upstream":
        fake_upstream_main(sys.argv[2:])
        return
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--harness", required=True, type=Path,
                   help="a checkout of the reference harness (the folder with mol_harness/)")
    p.add_argument("--baton", required=True, type=Path, help="the baton binary (release)")
    p.add_argument("--profile", type=Path,
                   help="profile folder [default: HARNESS/mol_harness/Macaron-V1-Tall]; the "
                   "harness takes only the folder names Macaron-V1-Tall and Macaron-V1-Venti")
    p.add_argument("--harness-python", default=sys.executable,
                   help="python with the harness's requirements [default: this one]")
    p.add_argument("--baton-args", default="",
                   help="extra `baton serve` arguments, one shell-quoted string")
    p.add_argument("--route", type=float, default=0.20)
    p.add_argument("--answer", type=float, default=1.24)
    p.add_argument("--summary", type=float, default=0.32)
    p.add_argument("--conversations", type=int, default=4)
    p.add_argument("--turns", type=int, default=5)
    p.add_argument("--experts", choices=("alternate", "same"), default="alternate",
                   help="L1/L2 in turn (every turn needs the last summary) or always L2")
    p.add_argument("--think", type=float, default=0.0,
                   help="seconds a client waits between its turns")
    p.add_argument("--concurrent", type=int, default=64)
    p.add_argument("--skip-concurrent", action="store_true")
    p.add_argument("--rates", default="8,16,32,64,128,256",
                   help="offered turns/s, comma-separated ('' skips the load section)")
    p.add_argument("--step-seconds", type=float, default=10.0)
    p.add_argument("--only", default="harness,baton",
                   help="measure only these (comma-separated); both still start")
    p.add_argument("--keep-logs", action="store_true")
    args = p.parse_args()
    try:
        args.rates = [float(r) for r in args.rates.split(",") if r.strip()]
    except ValueError:
        p.error("--rates: comma-separated numbers")
    if any(r <= 0 for r in args.rates):
        p.error("--rates: positive numbers")
    Conversation.alternate = args.experts == "alternate"
    args.load_at_start = os.getloadavg()[0]
    args.only = {x.strip() for x in args.only.split(",") if x.strip()}
    if not args.only <= {"harness", "baton"}:
        p.error("--only: harness, baton or both")
    try:
        extra_baton_args = shlex.split(args.baton_args)
    except ValueError as e:
        p.error(f"--baton-args: {e}")
    profile = (args.profile or args.harness / "mol_harness" / "Macaron-V1-Tall").resolve()
    for f in ("lora.md", "route.md", "intro.md", "summary.md"):
        if not (profile / f).is_file():
            p.error(f"{profile} has no {f}")
    if not (args.harness / "mol_harness" / "proxy.py").is_file():
        p.error(f"{args.harness} has no mol_harness/proxy.py")
    if not os.access(args.baton, os.X_OK):
        p.error(f"{args.baton} is not an executable")
    model = profile.name

    work = Path(tempfile.mkdtemp(prefix="serve-vs-harness-"))
    home = work / "home"
    home.mkdir()
    procs: list[Proc] = []
    try:
        fake_port = free_port()
        fake = Proc("fake upstream", [
            sys.executable, str(Path(__file__).resolve()), "fake-upstream",
            "--port", str(fake_port), "--route", str(args.route), "--answer",
            str(args.answer), "--summary", str(args.summary), "--summary-prompt",
            str(profile / "summary.md"),
        ], dict(os.environ), None, work / "fake.log")
        procs.append(fake)
        fake_url = f"http://127.0.0.1:{fake_port}"

        hport = free_port()
        henv = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(home),
            "PYTHONPATH": str(args.harness.resolve()),
            "PYTHONDONTWRITEBYTECODE": "1",
            "UPSTREAM": fake_url,
            "PROXY_PORT": str(hport),
            "SERVED_MODEL_NAME": model,
            "MOL_MODEL_CONFIG_ROOT": str(profile.parent),
            "MOL_API_KEY": API_KEY,
            "MOL_METRICS_PORT": "0",
            "MOL_MAX_INFLIGHT_REQUESTS": "4096",
            "MOL_MAX_QUEUED_REQUESTS": "4096",
            # Its default pool (256 connections to the engine, 2 s to get one) fails turns
            # with 502 once more hops than that are in flight; baton serve has no cap unless
            # given --upstream-concurrency. Both run uncapped here.
            "MOL_UPSTREAM_MAX_CONNECTIONS": "4096",
            "MOL_UPSTREAM_MAX_KEEPALIVE": "4096",
        }
        harness = Proc("harness", [args.harness_python, "-m", "mol_harness.proxy"], henv,
                       str(args.harness.resolve()), work / "harness.log")
        procs.append(harness)

        bport = free_port()
        benv = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(home),
            "XDG_CONFIG_HOME": str(home / ".config"),
            "XDG_DATA_HOME": str(home / ".local/share"),
            "XDG_STATE_HOME": str(home / ".local/state"),
            "XDG_CACHE_HOME": str(home / ".cache"),
            "BATON_SERVE_API_KEYS": API_KEY,
        }
        bcmd = [str(args.baton.resolve()), "serve", "--listen", f"127.0.0.1:{bport}",
                "--endpoint", f"{fake_url}/v1", "--profile", str(profile),
                "--max-in-flight", "4096", "--max-queued", "4096",
                *extra_baton_args]
        baton = Proc("baton serve", bcmd, benv, str(work), work / "baton.log")
        procs.append(baton)

        print(f"harness pid {harness.pid} on :{hport}, baton pid {baton.pid} on :{bport}, "
              f"fake upstream pid {fake.pid} on :{fake_port}; logs in {work}",
              file=sys.stderr, flush=True)
        asyncio.run(measure(
            args,
            Target("harness", f"http://127.0.0.1:{hport}", model, harness),
            Target("baton", f"http://127.0.0.1:{bport}", model, baton),
            fake_url,
            fake,
        ))
    finally:
        for proc in reversed(procs):
            proc.stop()
        if not args.keep_logs:
            for f in work.glob("*.log"):
                f.unlink()
            subprocess.run(["rm", "-rf", str(work)], check=False)
        else:
            print(f"logs kept in {work}", file=sys.stderr)


if __name__ == "__main__":
    main()
