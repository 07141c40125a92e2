"""baton as a Harbor installed agent.

``harbor run --agent baton_harbor:BatonAgent`` puts a baton binary into the task's
environment (``install``), runs one headless turn with ``baton --exec --json`` (``run``), and
reads its event stream back into Harbor's context (``populate_context_post_run``): tokens per
hop and per expert, and a cost when prices are given. baton itself writes ``trajectory.json``
(ATIF v1.7) next to its events with ``baton trajectory``. The model's API key travels only in
the environment of the one command that runs baton; it is never written to a file.
"""

from __future__ import annotations

import json
import shlex
import tempfile
from pathlib import Path, PurePosixPath
from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field

from harbor.agents.capabilities import AgentCapabilities
from harbor.agents.installed.base import (
    AgentAuthenticationError,
    ApiInternalServerError,
    ApiRateLimitError,
    ApiResponseStalledError,
    BaseInstalledAgent,
    ContextWindowExceededError,
    ErrorPattern,
    ModelNotFoundError,
    NetworkConnectionError,
    UnknownApiError,
    with_prompt_template,
)
from harbor.agents.options import Cli, InstalledAgentOptions
from harbor.environments.base import BaseEnvironment
from harbor.models.agent.context import AgentContext, ModelUsage

__all__ = ["BatonAgent", "BatonOptions", "usage_from_events"]

__version__ = "0.1.0"

#: Where the binary goes in the environment (Harbor's setup creates /installed-agent).
INSTALL_PATH = "/installed-agent/baton"

#: Host variable naming a local baton binary to upload (the ``binary`` kwarg wins).
BINARY_ENV = "BATON_HARBOR_BINARY"
#: Host variable with a URL to download the binary from inside the environment.
RELEASE_URL_ENV = "BATON_HARBOR_RELEASE_URL"

HOPS = ("route", "answer", "summary", "compaction")


class BatonOptions(InstalledAgentOptions):
    """The kwargs BatonAgent takes (``--ak NAME=VALUE``); unknown ones are an error."""

    binary: str | None = Field(
        default=None,
        description="Host path of the baton binary to upload into the environment (built "
        "for the container: the same libc, or static musl). Env: BATON_HARBOR_BINARY.",
    )
    release_url: str | None = Field(
        default=None,
        description="URL the environment downloads the binary from when no local binary is "
        "given (needs network and curl there). Env: BATON_HARBOR_RELEASE_URL.",
    )
    release_sha256: str | None = Field(
        default=None,
        description="The download's SHA-256; the install fails on a mismatch.",
    )
    endpoint: Annotated[str | None, Cli("--endpoint", fallback="BATON_ENDPOINT")] = Field(
        default=None,
        description="OpenAI-compatible base URL as the environment reaches it. "
        "Env: BATON_ENDPOINT.",
    )
    mode: Annotated[
        Literal["mol", "proxy", "single"] | None, Cli("--mode", fallback="BATON_MODE")
    ] = Field(default=None, description="baton's --mode. Env: BATON_MODE.")
    profile: Annotated[str | None, Cli("--profile", fallback="BATON_PROFILE")] = Field(
        default=None,
        description="MoL profile folder, a path inside the environment. Env: BATON_PROFILE.",
    )
    expert: Annotated[Literal["L0", "L1", "L2", "L3"] | None, Cli("--expert")] = Field(
        default=None, description="Pin one expert (no route hop)."
    )
    max_turns: Annotated[int | None, Cli("--max-turns")] = Field(
        default=None,
        description="Model round trips allowed (exit 3 when reached). Leaderboards forbid "
        "limits of the agent's own.",
    )
    api_key_env: str = Field(
        default="BATON_API_KEY",
        description="Host variable (or --ae variable) that holds the model's API key; it "
        "reaches baton as BATON_API_KEY in the run's environment only.",
    )
    extra_args: list[str] = Field(
        default_factory=list,
        description="More baton flags, placed before the prompt (e.g. ['--network']).",
    )
    input_usd_per_mtok: float | None = Field(
        default=None, ge=0, description="Price of a million uncached prompt tokens."
    )
    cached_input_usd_per_mtok: float | None = Field(
        default=None,
        ge=0,
        description="Price of a million cached prompt tokens (default: the input price).",
    )
    output_usd_per_mtok: float | None = Field(
        default=None, ge=0, description="Price of a million completion tokens."
    )


def _kind(kind: str) -> str:
    # An `error` event's own `kind` field: inside a JSON string the quotes are escaped, so text
    # quoted in the message (a server's body, a file the model read) cannot match.
    return rf'"type":"error"[^\n]*"kind":"{kind}"'


#: baton's typed errors (docs/events.md, `error.kind`) as Harbor's exceptions.
BATON_ERROR_PATTERNS = [
    ErrorPattern(_kind("rate_limit"), ApiRateLimitError),
    ErrorPattern(_kind("context_overflow"), ContextWindowExceededError),
    ErrorPattern(_kind("auth"), AgentAuthenticationError),
    ErrorPattern(_kind("model_not_found"), ModelNotFoundError),
    ErrorPattern(_kind("unreachable"), NetworkConnectionError),
    ErrorPattern(_kind("timeout"), ApiResponseStalledError),
    ErrorPattern(_kind("server"), ApiInternalServerError),
    ErrorPattern(_kind("bad_response"), UnknownApiError),
]


def _events(path: Path) -> list[dict[str, Any]]:
    """The baton events in a JSON Lines file; other lines are skipped."""
    out: list[dict[str, Any]] = []
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return out
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(event, dict) and isinstance(event.get("type"), str):
            out.append(event)
    return out


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def _usage(event: dict[str, Any]) -> tuple[int, int, int]:
    usage = event.get("usage")
    if not isinstance(usage, dict):
        return 0, 0, 0
    return (
        _int(usage.get("prompt_tokens")),
        _int(usage.get("cached_tokens")),
        _int(usage.get("completion_tokens")),
    )


def usage_from_events(events: list[dict[str, Any]]) -> dict[str, Any]:
    """Token figures of a run: totals, by hop (route/answer/summary/compaction) and by expert,
    from every `hop_completed` (the summary hop runs after `turn_completed` and counts too);
    from `turn_completed` when no hop reported usage."""
    zero = lambda: {"prompt_tokens": 0, "cached_tokens": 0, "completion_tokens": 0}  # noqa: E731
    by_hop = {hop: zero() for hop in HOPS}
    by_expert: dict[str, dict[str, int]] = {}
    total = zero()
    hops = []
    for ev in events:
        if ev.get("type") != "hop_completed":
            continue
        p, c, o = _usage(ev)
        hop = ev.get("hop") if isinstance(ev.get("hop"), str) else "unknown"
        expert = ev.get("expert") if isinstance(ev.get("expert"), str) else "none"
        for bucket in (total, by_hop.setdefault(hop, zero()), by_expert.setdefault(expert, zero())):
            bucket["prompt_tokens"] += p
            bucket["cached_tokens"] += c
            bucket["completion_tokens"] += o
        hops.append((hop, p, c, o))
    if not hops:
        for ev in events:
            if ev.get("type") == "turn_completed":
                p, c, o = _usage(ev)
                total["prompt_tokens"] += p
                total["cached_tokens"] += c
                total["completion_tokens"] += o
                hops.append(("turn", p, c, o))
    session = next((e for e in events if e.get("type") == "session"), {})
    last_turn = next((e for e in reversed(events) if e.get("type") == "turn_completed"), {})
    # A turn's route decision per expert; a tool continuation (`decision: sticky`) stays on
    # its expert without a route hop and is counted apart.
    routes: dict[str, int] = {}
    continuations = 0
    for ev in events:
        if ev.get("type") == "route_decided" and isinstance(ev.get("expert"), str):
            if ev.get("decision") == "sticky":
                continuations += 1
            else:
                routes[ev["expert"]] = routes.get(ev["expert"], 0) + 1
    return {
        "total": total,
        "by_hop": by_hop,
        "by_expert": by_expert,
        "hops": hops,
        "routes": routes,
        "continuations": continuations,
        "model": session.get("model") if isinstance(session.get("model"), str) else None,
        "session_id": session.get("session_id"),
        "turn_status": last_turn.get("status"),
        "errors": [
            {"kind": e.get("kind"), "message": e.get("message")}
            for e in events
            if e.get("type") == "error"
        ],
    }


class BatonAgent(BaseInstalledAgent):
    """baton in a Harbor trial: ``--agent baton_harbor:BatonAgent``."""

    capabilities: ClassVar[AgentCapabilities] = AgentCapabilities(
        atif=True, reasoning_effort=True
    )
    options_model: ClassVar[type[InstalledAgentOptions] | None] = BatonOptions
    ERROR_PATTERNS: ClassVar[list[ErrorPattern]] = [
        *BaseInstalledAgent.ERROR_PATTERNS,
        *BATON_ERROR_PATTERNS,
    ]

    @staticmethod
    def name() -> str:
        return "baton"

    @property
    def baton_options(self) -> BatonOptions:
        options = self.options
        if not isinstance(options, BatonOptions):
            raise TypeError("BatonAgent was built without its options")
        return options

    def get_version_command(self) -> str | None:
        return f"{shlex.quote(INSTALL_PATH)} --version"

    def parse_version(self, stdout: str) -> str:
        # `baton 0.1.0` → `0.1.0`
        words = stdout.strip().split()
        return words[-1] if words else stdout.strip()

    async def install(self, environment: BaseEnvironment) -> None:
        options = self.baton_options
        local = options.binary or self._get_env(BINARY_ENV)
        url = options.release_url or self._get_env(RELEASE_URL_ENV)
        target = shlex.quote(INSTALL_PATH)
        if local:
            path = Path(local).expanduser()
            if not path.is_file():
                raise FileNotFoundError(f"baton binary not found: {path}")
            await environment.upload_file(path, INSTALL_PATH)
            await self.exec_as_root(environment, f"chmod 755 {target}")
        elif url:
            await self.ensure_system_dependencies(environment, ("curl",))
            part = shlex.quote(INSTALL_PATH + ".part")
            check = ""
            if options.release_sha256:
                digest = shlex.quote(f"{options.release_sha256.lower()}  {INSTALL_PATH}.part")
                check = f" && echo {digest} | sha256sum -c -"
            await self.exec_as_root(
                environment,
                f"curl -fsSL --retry 3 -o {part} {shlex.quote(url)}{check} "
                f"&& chmod 755 {part} && mv {part} {target}",
            )
        else:
            raise ValueError(
                "BatonAgent needs a baton binary: pass --ak binary=PATH (or set "
                f"{BINARY_ENV}) to upload one, or --ak release_url=URL (or "
                f"{RELEASE_URL_ENV}) for an environment with network"
            )
        # A binary for another libc or architecture fails here, not in the middle of a trial.
        await self.exec_as_agent(environment, f"{target} --version")

    def _model_flags(self) -> list[str]:
        options = self.baton_options
        flags = [*shlex.split(self.compile_cli_flags())]
        if self.model_name and options.mode != "mol":
            flags += ["--model", self._parsed_model_name or self.model_name]
        if options.reasoning_effort:
            flags += ["--reasoning", options.reasoning_effort]
        return flags

    def _run_env(self) -> dict[str, str]:
        """The variables of the one command that runs baton: the key, under the name baton
        reads, and nothing of the host's otherwise."""
        key = self._get_env(self.baton_options.api_key_env)
        return {"BATON_API_KEY": key} if key else {}

    def command(self, logs: PurePosixPath) -> str:
        """The shell command of a run: baton's turn, then its trajectory; the stderr tail and
        baton's error events go to stdout, last, so that ERROR_PATTERNS see the typed error."""
        b = shlex.quote(INSTALL_PATH)
        q = lambda p: shlex.quote(str(logs / p))  # noqa: E731
        argv = [
            "--exec",
            "--json",
            "--sandbox",
            "off",
            "--approval",
            "full-auto",
            "--session-dir",
            str(logs / "sessions"),
            *self._model_flags(),
            *self.baton_options.extra_args,
            "--",
            "-",
        ]
        return (
            f"mkdir -p {q('sessions')}; "
            f"{b} {shlex.join(argv)} < {q('instruction.md')} > {q('baton.jsonl')} "
            f"2> {q('baton.stderr')}; rc=$?; "
            f"{b} trajectory {q('baton.jsonl')} --session-dir {q('sessions')} "
            f"--instruction-file {q('instruction.md')} --out {q('trajectory.json')} "
            f"2>> {q('baton.stderr')}; "
            f"tail -c 4000 {q('baton.stderr')}; "
            f"grep '^{{\"type\":\"error\"' {q('baton.jsonl')} | tail -n 3; "
            "exit $rc"
        )

    @with_prompt_template
    async def run(
        self, instruction: str, environment: BaseEnvironment, context: AgentContext
    ) -> None:
        logs = PurePosixPath(self.environment_logs_dir)
        # The instruction goes as a file on stdin: no quoting, no argument-length limit.
        with tempfile.TemporaryDirectory(prefix="baton-harbor-") as tmp:
            local = Path(tmp) / "instruction.md"
            local.write_text(instruction)
            await environment.upload_file(local, str(logs / "instruction.md"))
        await self.exec_as_agent(environment, self.command(logs), env=self._run_env())

    def _cost(self, hops: list[tuple[str, int, int, int]]) -> float | None:
        o = self.baton_options
        if o.input_usd_per_mtok is None or o.output_usd_per_mtok is None:
            return None
        cached = (
            o.cached_input_usd_per_mtok
            if o.cached_input_usd_per_mtok is not None
            else o.input_usd_per_mtok
        )
        return sum(
            ((p - min(c, p)) * o.input_usd_per_mtok + min(c, p) * cached + out * o.output_usd_per_mtok)
            / 1e6
            for _, p, c, out in hops
        )

    def populate_context_post_run(self, context: AgentContext) -> None:
        events = _events(self.logs_dir / "baton.jsonl")
        if not events:
            return
        if not (self.logs_dir / "trajectory.json").exists():
            self._trajectory_on_host()
        u = usage_from_events(events)
        total = u["total"]
        context.n_input_tokens = total["prompt_tokens"]
        context.n_cache_tokens = total["cached_tokens"]
        context.n_output_tokens = total["completion_tokens"]
        context.cost_usd = self._cost(u["hops"])
        model = u["model"] or self._parsed_model_name or self.model_name or "baton"
        context.model_usage = {
            model: ModelUsage(
                n_input_tokens=total["prompt_tokens"],
                n_cache_tokens=total["cached_tokens"],
                n_output_tokens=total["completion_tokens"],
                cost_usd=context.cost_usd,
            )
        }
        context.metadata = {
            "tokens_by_hop": u["by_hop"],
            "tokens_by_expert": u["by_expert"],
            "routes": u["routes"],
            "continuations": u["continuations"],
            "session_id": u["session_id"],
            "turn_status": u["turn_status"],
            "errors": u["errors"],
        }
        if context.cost_usd is not None:
            self._price_trajectory()

    def _trajectory_on_host(self) -> None:
        """A run Harbor stopped at its timeout never reached `baton trajectory` in the
        environment: convert its logs here, with the uploaded binary when this machine can run
        it. Best effort: without one there is no trajectory, as before."""
        import subprocess

        local = self.baton_options.binary or self._get_env(BINARY_ENV)
        if not local or not Path(local).expanduser().is_file():
            return
        logs = self.logs_dir
        try:
            subprocess.run(
                [
                    str(Path(local).expanduser()),
                    "trajectory",
                    str(logs / "baton.jsonl"),
                    "--session-dir",
                    str(logs / "sessions"),
                    "--instruction-file",
                    str(logs / "instruction.md"),
                    "--out",
                    str(logs / "trajectory.json"),
                ],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                timeout=120,
                check=False,
            )
        except (OSError, subprocess.SubprocessError) as exc:
            self.logger.debug(f"baton trajectory on the host failed: {exc}")

    def _price_trajectory(self) -> None:
        """Adds each step's cost to trajectory.json, so Harbor's per-model usage has one."""
        from harbor.models.trajectories import Trajectory

        path = self.logs_dir / "trajectory.json"
        try:
            traj = Trajectory.model_validate_json(path.read_text())
        except (OSError, ValueError):
            return
        total = 0.0
        for step in traj.steps:
            m = step.metrics
            if m is None:
                continue
            p, c, o = m.prompt_tokens or 0, m.cached_tokens or 0, m.completion_tokens or 0
            cost = self._cost([("step", p, c, o)]) or 0.0
            m.cost_usd = cost
            total += cost
        if traj.final_metrics is not None:
            traj.final_metrics.total_cost_usd = total
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(traj.to_json_dict(), indent=2))
        tmp.replace(path)

