"""BatonAgent under the real `harbor` package, with the real baton binary (BATON_BIN) talking to
the Rust suite's mock engine (BATON_TEST_ENDPOINT). Run by tests/harbor.rs."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path, PurePosixPath

import pytest
from harbor.agents.factory import AgentFactory
from harbor.agents.installed.base import (
    AgentAuthenticationError,
    ApiRateLimitError,
    BaseInstalledAgent,
    ContextWindowExceededError,
    ModelNotFoundError,
    NetworkConnectionError,
    NonZeroAgentExitCodeError,
)
from harbor.environments.base import ExecResult
from harbor.models.agent.context import AgentContext
from harbor.models.trajectories import Trajectory
from harbor.models.trial.config import AgentConfig
from harbor.utils.trajectory_utils import load_model_usage_from_trajectory

import baton_harbor
from baton_harbor import BatonAgent
from folder_env import FolderEnvironment

IMPORT_PATH = "baton_harbor:BatonAgent"
KEY = "sk-harbor-test-7f3a9c"


def need(name: str) -> str:
    value = os.environ.get(name)
    assert value, f"{name} is not set (tests/harbor.rs sets it)"
    return value


def make_agent(root: Path, **kwargs) -> BatonAgent:
    """The agent as `harbor run --agent-import-path baton_harbor:BatonAgent --ae ... --ak ...`
    builds it: through Harbor's factory, from an AgentConfig."""
    env = kwargs.pop("env", {"BATON_API_KEY": KEY})
    config = AgentConfig(
        import_path=IMPORT_PATH,
        model_name=kwargs.pop("model_name", None),
        kwargs={
            "binary": need("BATON_BIN"),
            "endpoint": need("BATON_TEST_ENDPOINT"),
            **kwargs,
        },
        env=env,
    )
    agent = AgentFactory.create_agent_from_config(config, logs_dir=root / "logs/agent")
    assert isinstance(agent, BatonAgent)
    return agent


def trial(agent: BatonAgent, env: FolderEnvironment, instruction: str) -> AgentContext:
    """What Harbor's Trial does with an installed agent: setup, run with the agent's env scoped
    onto the environment, then populate the context from the logs."""

    async def go() -> AgentContext:
        context = AgentContext()
        with env.scoped_exec_env(agent.extra_env):
            await agent.setup(env)
            await agent.run(instruction, env, context)
        agent.populate_context_post_run(context)
        return context

    return asyncio.run(go())


def files_under(root: Path):
    for path in root.rglob("*"):
        if path.is_file() and not path.is_symlink():
            yield path


def test_harbors_factory_builds_the_agent_from_its_import_path(tmp_path: Path):
    agent = make_agent(tmp_path, model_name="openai/served-model")
    assert isinstance(agent, BaseInstalledAgent)
    assert BatonAgent.SUPPORTS_ATIF is True
    assert BatonAgent.capabilities.atif is True
    assert BatonAgent.import_path() == IMPORT_PATH
    info = agent.to_agent_info()
    assert info.name == "baton"
    assert info.model_info is not None and info.model_info.name == "served-model"
    # A misspelt kwarg is an error, as for Harbor's own agents.
    with pytest.raises(ValueError, match="endpont"):
        make_agent(tmp_path, endpont="http://x")
    # Harbor's --model provider prefix is not part of the name the server serves.
    assert "--model served-model" in agent.command(PurePosixPath("/logs/agent"))
    # Option values are quoted into the command line.
    odd = make_agent(tmp_path, profile="/opt/my profile; rm -rf /", mode="mol")
    cmd = odd.command(PurePosixPath("/logs/agent"))
    assert "'/opt/my profile; rm -rf /'" in cmd
    assert "--model" not in cmd


def test_install_run_and_context_against_the_mock_engine(tmp_path: Path):
    env = FolderEnvironment(tmp_path / "box")
    agent = make_agent(tmp_path / "box", input_usd_per_mtok=2.0, output_usd_per_mtok=8.0,
                       cached_input_usd_per_mtok=0.5)
    context = trial(agent, env, "Write 42 into answer.txt. HARBOR-HAPPY")

    # install(): the local binary went in through the file API and reports its version.
    assert (env.root / "installed-agent/baton").stat().st_mode & 0o111
    assert agent.version() == need("BATON_VERSION")
    # run(): the model's shell command ran in the environment's working folder.
    assert (env.root / "app/answer.txt").read_text().strip() == "42"
    logs = env.root / "logs/agent"
    events = [json.loads(line) for line in (logs / "baton.jsonl").read_text().splitlines()]
    assert events[0]["type"] == "session"
    assert events[-1]["type"] == "shutdown_complete"
    assert (logs / "instruction.md").read_text().endswith("HARBOR-HAPPY")

    # populate_context_post_run(): every hop's tokens (the mock's figures, tests/harbor.rs).
    assert context.n_input_tokens == 60 + 400 + 420 + 300
    assert context.n_cache_tokens == 380
    assert context.n_output_tokens == 1 + 20 + 9 + 12
    hops = context.metadata["tokens_by_hop"]
    assert hops["route"]["prompt_tokens"] == 60
    assert hops["answer"]["prompt_tokens"] == 820
    assert hops["summary"]["completion_tokens"] == 12
    assert context.metadata["tokens_by_expert"]["L2"]["prompt_tokens"] == 1120
    # One route hop; the answer after the shell call continued on L2 without one.
    assert context.metadata["routes"] == {"L2": 1}
    assert context.metadata["continuations"] == 1
    assert context.metadata["turn_status"] == "done"
    cost = ((60 + 400 + 40 + 300) * 2.0 + 380 * 0.5 + 42 * 8.0) / 1e6
    assert context.cost_usd == pytest.approx(cost)
    assert context.model_usage["baton"].n_input_tokens == context.n_input_tokens

    # trajectory.json is ATIF v1.7 by Harbor's own models.
    traj = Trajectory.model_validate_json((logs / "trajectory.json").read_text())
    assert traj.schema_version == "ATIF-v1.7"
    assert traj.trajectory_id and traj.session_id == events[0]["session_id"]
    assert traj.agent.name == "baton"
    assert traj.agent.model_name == "baton"  # the model, not the endpoint URL
    assert "http" not in traj.agent.model_name
    hop_steps = [(s.source, (s.extra or {}).get("hop"), (s.extra or {}).get("expert")) for s in traj.steps]
    assert hop_steps == [
        ("user", None, None),
        ("agent", "route", "L0"),
        ("agent", "answer", "L2"),
        ("agent", "answer", "L2"),
        ("agent", "summary", "L2"),
    ]
    route, call, answer, summary = traj.steps[1:]
    assert route.message == "L2" and route.metrics.prompt_tokens == 60
    assert call.tool_calls[0].function_name == "shell"
    assert call.observation.results[0].source_call_id == call.tool_calls[0].tool_call_id
    assert answer.message == "Done: answer.txt holds 42."
    assert answer.metrics.cached_tokens == 380
    assert summary.message == "Wrote 42 into answer.txt with one shell command."
    assert sum(s.metrics.prompt_tokens for s in traj.steps if s.metrics) == context.n_input_tokens
    assert traj.final_metrics.total_prompt_tokens == context.n_input_tokens
    # The prices reached the steps, so Harbor's per-model usage has the same cost.
    assert traj.final_metrics.total_cost_usd == pytest.approx(cost)
    usage = load_model_usage_from_trajectory(logs / "trajectory.json")
    assert usage["baton"].cost_usd == pytest.approx(cost)

    # The key reached baton only through the run's environment: in no file (the model's
    # command wrote its environment to seen-env.txt), no command line.
    assert "PATH=" in (env.root / "app/seen-env.txt").read_text()
    for path in files_under(tmp_path):
        assert KEY.encode() not in path.read_bytes(), path
    run_cmd = [c for c, _ in env.commands if "--exec" in c]
    assert run_cmd and all(KEY not in c for c in run_cmd)
    assert any(e and e.get("BATON_API_KEY") == KEY for c, e in env.commands if "--exec" in c)


def test_the_key_can_come_from_another_host_variable(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("MY_GATEWAY_KEY", KEY)
    env = FolderEnvironment(tmp_path / "box")
    agent = make_agent(tmp_path / "box", env={}, api_key_env="MY_GATEWAY_KEY")
    trial(agent, env, "Write 42 into answer.txt. HARBOR-HAPPY")
    assert (env.root / "app/answer.txt").read_text().strip() == "42"
    assert any(e and e.get("BATON_API_KEY") == KEY for c, e in env.commands if "--exec" in c)


@pytest.mark.parametrize(
    ("marker", "exception"),
    [("AUTH-FAILS", AgentAuthenticationError), ("TOO-LONG", ContextWindowExceededError)],
)
def test_typed_errors_become_harbors_exceptions(tmp_path: Path, marker, exception):
    env = FolderEnvironment(tmp_path / "box")
    agent = make_agent(tmp_path / "box")
    with pytest.raises(exception):
        trial(agent, env, f"Say hello. {marker}")
    # The failed run still leaves its events and a valid trajectory naming the error.
    logs = env.root / "logs/agent"
    traj = Trajectory.model_validate_json((logs / "trajectory.json").read_text())
    assert any(s.source == "system" and "error" in str(s.message) for s in traj.steps)


def test_error_patterns_read_only_batons_error_events():
    agent = BatonAgent(logs_dir=Path("/nonexistent"))

    def classify(stdout: str) -> type:
        return type(agent._classify_exec_error("baton", ExecResult(stdout=stdout, return_code=1)))

    line = lambda kind: json.dumps(  # noqa: E731
        {"type": "error", "message": "answer hop: HTTP 4xx", "kind": kind}, separators=(",", ":")
    )
    assert classify(line("rate_limit")) is ApiRateLimitError
    assert classify(line("context_overflow")) is ContextWindowExceededError
    assert classify(line("auth")) is AgentAuthenticationError
    assert classify(line("model_not_found")) is ModelNotFoundError
    assert classify(line("unreachable")) is NetworkConnectionError
    # An error event quoted inside another string (a file the model printed) is not one.
    quoted = json.dumps({"type": "error", "message": line("auth"), "kind": "io"}, separators=(",", ":"))
    assert classify(quoted) is NonZeroAgentExitCodeError


def test_install_needs_a_binary_and_says_so(tmp_path: Path, monkeypatch):
    monkeypatch.delenv(baton_harbor.BINARY_ENV, raising=False)
    monkeypatch.delenv(baton_harbor.RELEASE_URL_ENV, raising=False)
    env = FolderEnvironment(tmp_path / "box")
    config = AgentConfig(import_path=IMPORT_PATH, kwargs={"endpoint": "http://127.0.0.1:9/v1"})
    agent = AgentFactory.create_agent_from_config(config, logs_dir=tmp_path / "box/logs/agent")
    with pytest.raises(RuntimeError, match="binary=PATH"):
        asyncio.run(agent.setup(env))
    missing = make_agent(tmp_path / "box", binary=str(tmp_path / "nope"))
    with pytest.raises(RuntimeError, match="not found"):
        asyncio.run(missing.setup(env))


def test_populate_survives_missing_and_garbage_logs(tmp_path: Path):
    agent = make_agent(tmp_path)
    context = AgentContext()
    agent.populate_context_post_run(context)
    assert context.is_empty()
    logs = tmp_path / "logs/agent"
    logs.mkdir(parents=True, exist_ok=True)
    (logs / "baton.jsonl").write_bytes(
        b'\xff\xfe not json\n{"type":"hop_completed","hop":"answer","usage":{"prompt_tokens":-5,'
        b'"completion_tokens":"many"}}\n{"type":\n[1,2]\n'
    )
    agent.populate_context_post_run(context)
    assert context.n_input_tokens == 0 and context.n_output_tokens == 0


def test_compactions_and_summaries_validate_as_atif(tmp_path: Path):
    """`baton trajectory` on a stream with a compaction: the handoff and the summary texts come
    from the session file, the boundary is a system step, and Harbor's models accept it all."""
    import subprocess

    sid = "01a2-compaction"
    sessions = tmp_path / "sessions"
    sessions.mkdir()
    records = [
        {"record": "meta", "id": sid, "created": "2026-12-01T00:00:00Z", "mode": "mol",
         "backend": "http://x/v1", "workspace": "/app", "version": "0.1.0"},
        {"record": "compacted", "task_id": 1, "summary": "handoff: tests fail in parse.rs",
         "keep_steps": 4},
        {"record": "summary", "task_id": 1, "expert": "L2", "text": "fixed parse.rs"},
    ]
    (sessions / f"{sid}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    events = [
        {"type": "session", "session_id": sid, "mode": "mol", "backend": "http://x/v1",
         "model": "Macaron-V1-Tall", "workspace": "/app", "resumed": False,
         "session_file": f"/logs/agent/sessions/{sid}.jsonl"},
        {"type": "turn_started", "turn_id": 1, "text": "fix the tests"},
        {"type": "hop_started", "turn_id": 1, "hop": "answer", "expert": "L2"},
        {"type": "message_final", "turn_id": 1, "expert": "L2", "text": "running them"},
        {"type": "hop_completed", "turn_id": 1, "hop": "answer", "expert": "L2",
         "latency_ms": 9, "usage": {"prompt_tokens": 900, "completion_tokens": 30}},
        {"type": "tool_begin", "turn_id": 1, "call_id": "c1", "tool": "shell",
         "arguments": {"command": "cargo test"}, "title": "cargo test"},
        {"type": "tool_end", "call_id": "c1", "status": "failed", "exit_code": 101,
         "duration_ms": 500, "output": "1 failed"},
        {"type": "hop_started", "turn_id": 1, "hop": "compaction", "expert": "L2"},
        {"type": "hop_completed", "turn_id": 1, "hop": "compaction", "expert": "L2",
         "latency_ms": 40, "usage": {"prompt_tokens": 950, "completion_tokens": 25}},
        {"type": "context_compacted", "expert": "L2", "tokens_before": 1000,
         "tokens_after": 150, "method": "summary"},
        {"type": "warning", "message": "answer hop: retrying in 1.2 s"},
        {"type": "message_final", "turn_id": 1, "expert": "L2", "text": "fixed"},
        {"type": "hop_completed", "turn_id": 1, "hop": "answer", "expert": "L2",
         "latency_ms": 9, "usage": {"prompt_tokens": 200, "completion_tokens": 5}},
        {"type": "turn_completed", "turn_id": 1, "status": "done", "duration_ms": 600,
         "usage": {"prompt_tokens": 2050, "completion_tokens": 60}},
        {"type": "hop_completed", "turn_id": 1, "hop": "summary", "expert": "L2",
         "latency_ms": 5, "usage": {"prompt_tokens": 300, "completion_tokens": 8}},
        {"type": "summary_recorded", "expert": "L2", "task_id": 1, "latency_ms": 5,
         "tokens": 8, "empty": False},
    ]
    (tmp_path / "baton.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    out = tmp_path / "trajectory.json"
    subprocess.run(
        [need("BATON_BIN"), "trajectory", str(tmp_path / "baton.jsonl"), "--session-dir",
         str(sessions), "--out", str(out)],
        check=True,
        env={"PATH": os.environ.get("PATH", ""), "HOME": str(tmp_path)},
    )
    traj = Trajectory.model_validate_json(out.read_text())
    assert traj.schema_version == "ATIF-v1.7"
    assert traj.agent.model_name == "Macaron-V1-Tall"
    kinds = [(s.source, (s.extra or {}).get("hop")) for s in traj.steps]
    assert kinds == [
        ("user", None),
        ("agent", "answer"),
        ("agent", "compaction"),
        ("system", None),
        ("system", None),
        ("agent", "answer"),
        ("agent", "summary"),
    ]
    compaction, boundary = traj.steps[2], traj.steps[3]
    assert compaction.message == "handoff: tests fail in parse.rs"
    assert compaction.metrics.prompt_tokens == 950
    assert boundary.extra["context_management"] == {"type": "compaction", "boundary": "replace"}
    assert "compacted from 1000 to 150" in boundary.message
    assert traj.steps[1].observation.results[0].extra["exit_code"] == 101
    assert traj.steps[6].message == "fixed parse.rs"
    assert traj.final_metrics.total_prompt_tokens == 900 + 950 + 200 + 300
    assert traj.final_metrics.total_steps == len(traj.steps)


def test_install_downloads_a_release_and_checks_its_digest(tmp_path: Path):
    """The release-URL path: curl in the environment fetches the binary (here from a loopback
    server), its SHA-256 is checked, and a wrong digest fails the setup."""
    import hashlib
    import http.server
    import threading

    binary = Path(need("BATON_BIN"))
    digest = hashlib.sha256(binary.read_bytes()).hexdigest()

    class Serve(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, directory=str(binary.parent), **kwargs)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Serve)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/{binary.name}"
        env = FolderEnvironment(tmp_path / "ok")
        agent = make_agent(tmp_path / "ok", binary=None, release_url=url, release_sha256=digest)
        asyncio.run(agent.setup(env))
        assert agent.version() == need("BATON_VERSION")
        assert (env.root / "installed-agent/baton").read_bytes() == binary.read_bytes()

        env = FolderEnvironment(tmp_path / "bad")
        agent = make_agent(tmp_path / "bad", binary=None, release_url=url, release_sha256="0" * 64)
        with pytest.raises(RuntimeError):
            asyncio.run(agent.setup(env))
        assert not (env.root / "installed-agent/baton").exists()
    finally:
        server.shutdown()


def test_a_run_stopped_before_its_trajectory_gets_one_on_the_host(tmp_path: Path):
    """Harbor's timeout stops waiting before `baton trajectory` runs in the environment; the
    context step converts the downloaded logs with the local binary."""
    env = FolderEnvironment(tmp_path / "box")
    agent = make_agent(tmp_path / "box")
    trial(agent, env, "Write 42 into answer.txt. HARBOR-HAPPY")
    logs = env.root / "logs/agent"
    first = Trajectory.model_validate_json((logs / "trajectory.json").read_text())
    (logs / "trajectory.json").unlink()
    agent.populate_context_post_run(AgentContext())
    again = Trajectory.model_validate_json((logs / "trajectory.json").read_text())
    assert [s.message for s in again.steps] == [s.message for s in first.steps]
    assert again.steps[-1].message == "Wrote 42 into answer.txt with one shell command."
