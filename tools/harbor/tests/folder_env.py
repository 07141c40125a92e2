"""A test double of Harbor's BaseEnvironment: a temp folder stands for the container's root.

Commands run with bash on this machine, in ROOT/app, with an environment of their own (PATH,
HOME=ROOT/root, and what Harbor merges in: persistent, per-exec and scoped variables). The
container paths the adapter and Harbor's base classes use (/installed-agent, /logs) are
mapped below ROOT, in commands and in file transfers. ROOT/logs/agent is the agent's logs_dir,
as Harbor's mounted environments make it.
"""

from __future__ import annotations

import asyncio
import os
import shutil
from pathlib import Path

from harbor.environments.base import BaseEnvironment, ExecResult
from harbor.models.task.config import EnvironmentConfig
from harbor.models.trial.paths import TrialPaths

MAPPED = ("/installed-agent", "/logs")


class FolderEnvironment(BaseEnvironment):
    def __init__(self, root: Path):
        self.root = root
        for sub in ("app", "root", "logs/agent", "installed-agent", "env"):
            (root / sub).mkdir(parents=True, exist_ok=True)
        self.commands: list[tuple[str, dict[str, str] | None]] = []
        super().__init__(
            environment_dir=root / "env",
            environment_name="folder",
            session_id="folder__env",
            trial_paths=TrialPaths(trial_dir=root / "trial"),
            task_env_config=EnvironmentConfig(),
        )

    @staticmethod
    def type() -> str:
        return "folder"

    def _validate_definition(self) -> None:
        pass

    def host(self, path: str) -> Path:
        """The host path of a container path."""
        if any(path == p or path.startswith(p + "/") for p in MAPPED):
            return self.root / path.lstrip("/")
        if path.startswith("/app"):
            return self.root / path.lstrip("/")
        return Path(path)

    def _map(self, command: str) -> str:
        for p in MAPPED:
            command = command.replace(p, str(self.root) + p)
        return command

    async def start(self, force_build: bool) -> None:
        pass

    async def stop(self, delete: bool) -> None:
        pass

    async def upload_file(self, source_path, target_path: str) -> None:
        target = self.host(target_path)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source_path, target)

    async def upload_dir(self, source_dir, target_dir: str) -> None:
        shutil.copytree(source_dir, self.host(target_dir), dirs_exist_ok=True)

    async def download_file(self, source_path: str, target_path) -> None:
        shutil.copyfile(self.host(source_path), target_path)

    async def download_dir(self, source_dir: str, target_dir) -> None:
        shutil.copytree(self.host(source_dir), target_dir, dirs_exist_ok=True)

    async def exec(
        self,
        command: str,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        timeout_sec: int | None = None,
        user: str | int | None = None,
    ) -> ExecResult:
        merged = self._merge_env(env) or {}
        self.commands.append((command, merged))
        run_env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(self.root / "root"),
            "XDG_CONFIG_HOME": str(self.root / "root/.config"),
            "XDG_DATA_HOME": str(self.root / "root/.local/share"),
            **merged,
        }
        proc = await asyncio.create_subprocess_exec(
            "bash",
            "-c",
            self._map(command),
            cwd=str(self.host(cwd) if cwd else self.root / "app"),
            env=run_env,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        try:
            out, err = await asyncio.wait_for(proc.communicate(), timeout_sec)
        except TimeoutError:
            proc.kill()
            await proc.wait()
            raise
        return ExecResult(
            stdout=out.decode(errors="replace"),
            stderr=err.decode(errors="replace"),
            return_code=proc.returncode if proc.returncode is not None else -1,
        )
