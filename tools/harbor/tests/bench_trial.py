"""A trial's wall time through BatonAgent vs `baton --exec` run directly, in the same test
environment (tests/folder_env.py) against the same model server. Driven by tests/harbor.rs
(`cargo test --test tests harbor::trial_overhead -- --ignored --nocapture`); prints one line
per figure."""

from __future__ import annotations

import asyncio
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from harbor.agents.factory import AgentFactory
from harbor.models.agent.context import AgentContext
from harbor.models.trial.config import AgentConfig

from folder_env import FolderEnvironment

INSTRUCTION = "Write 42 into answer.txt. HARBOR-HAPPY"
PHASES: dict[str, list[float]] = {
    "setup (upload, chmod, --version x2)": [],
    "run (baton --exec + baton trajectory)": [],
    "populate_context_post_run": [],
}


def adapter_trial(root: Path) -> float:
    start = time.perf_counter()
    config = AgentConfig(
        import_path="baton_harbor:BatonAgent",
        kwargs={"binary": os.environ["BATON_BIN"], "endpoint": os.environ["BATON_TEST_ENDPOINT"]},
        env={"BATON_API_KEY": "sk-bench"},
    )
    agent = AgentFactory.create_agent_from_config(config, logs_dir=root / "logs/agent")
    env = FolderEnvironment(root)

    async def go() -> None:
        context = AgentContext()
        with env.scoped_exec_env(agent.extra_env):
            t0 = time.perf_counter()
            await agent.setup(env)
            PHASES["setup (upload, chmod, --version x2)"].append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            await agent.run(INSTRUCTION, env, context)
            PHASES["run (baton --exec + baton trajectory)"].append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        agent.populate_context_post_run(context)
        PHASES["populate_context_post_run"].append(time.perf_counter() - t0)

    asyncio.run(go())
    return time.perf_counter() - start


def direct_run(root: Path) -> float:
    env = FolderEnvironment(root)  # the same folders
    logs = root / "logs/agent"
    start = time.perf_counter()
    subprocess.run(
        [os.environ["BATON_BIN"], "--exec", "--json", "--sandbox", "off", "--approval",
         "full-auto", "--session-dir", str(logs / "sessions"), "--endpoint",
         os.environ["BATON_TEST_ENDPOINT"], "--", INSTRUCTION],
        cwd=root / "app",
        env={"PATH": os.environ.get("PATH", ""), "HOME": str(root / "root"),
             "BATON_API_KEY": "sk-bench"},
        stdout=(logs / "baton.jsonl").open("w"),
        stderr=subprocess.DEVNULL,
        check=True,
    )
    del env
    return time.perf_counter() - start


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 10
    figures: dict[str, list[float]] = {"adapter": [], "direct": []}
    for i in range(n):
        for kind, fn in (("adapter", adapter_trial), ("direct", direct_run)):
            root = Path(tempfile.mkdtemp(prefix=f"bench-{kind}-"))
            try:
                figures[kind].append(fn(root))
                assert (root / "app/answer.txt").read_text().strip() == "42"
            finally:
                shutil.rmtree(root, ignore_errors=True)
    for kind, xs in figures.items():
        print(f"{kind}: n={len(xs)} mean={statistics.mean(xs):.3f}s median={statistics.median(xs):.3f}s min={min(xs):.3f}s max={max(xs):.3f}s")
    for phase, xs in PHASES.items():
        print(f"  adapter {phase}: median={statistics.median(xs):.3f}s")
    size = Path(os.environ["BATON_BIN"]).stat().st_size
    print(f"binary uploaded: {size / 2**20:.1f} MiB")
    overhead = statistics.median(figures["adapter"]) - statistics.median(figures["direct"])
    print(f"adapter overhead (median): {overhead:.3f}s")


if __name__ == "__main__":
    main()
