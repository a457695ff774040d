"""A whole sandbox's budget: one control group per sandbox bounding the memory of all its processes together
(their tmpfs pages included), their number and their CPU share.

Only as root, and only where the kernel's control groups can be written: cgroup v2 (a group
``idemlib-sandboxes`` under the root of the unified hierarchy, one child per sandbox) or v1's
``memory``, ``pids`` and ``cpu`` hierarchies. Elsewhere nothing is bounded here, and
:func:`budget_kind` says so (``per process``): the sandbox's per-process limits are all there is.
"""

from __future__ import annotations

import os
import threading
import time
from functools import cache
from pathlib import Path
from typing import Any

CGROUPS = Path("/sys/fs/cgroup")
V1 = ("memory", "pids", "cpu")


def budget_kind() -> str:
    """How a whole sandbox's memory, processes and CPU are bounded here: ``cgroup v2``, ``cgroup v1`` or
    ``per process`` (no control group this process may write: not root, or none delegated)."""
    if os.geteuid() != 0:
        return "per process"
    if (CGROUPS / "cgroup.controllers").exists():
        return "cgroup v2" if _v2_parent() is not None else "per process"
    if all((CGROUPS / name / "cgroup.procs").exists() for name in V1) and _v1_parent_writable():
        return "cgroup v1"
    return "per process"


@cache
def _v2_parent() -> Path | None:
    parent = CGROUPS / "idemlib-sandboxes"
    try:
        parent.mkdir(exist_ok=True)
        for folder in (CGROUPS, parent):
            (folder / "cgroup.subtree_control").write_text("+memory +pids +cpu")
        return parent
    except OSError:
        return None


@cache
def _v1_parent_writable() -> bool:
    try:
        for name in V1:
            (CGROUPS / name / "idemlib-sandboxes").mkdir(exist_ok=True)
        return True
    except OSError:
        return False


class Budget:
    """A control group of its own for one sandbox, bounding all its processes together; nothing where none
    can be had (:func:`budget_kind`)."""

    def __init__(self, limits: Any) -> None:
        """``limits``: a :class:`idemlib.course.sandbox.Limits` (its processes, sandbox memory and CPUs)."""
        self.limits, self.kind = limits, budget_kind()
        self.groups: list[Path] = []

    def __enter__(self) -> Budget:
        name = f"run-{os.getpid()}-{threading.get_ident()}-{time.monotonic_ns()}"
        quota = int(self.limits.cpus * 100_000)
        try:
            if self.kind == "cgroup v2":
                if (parent := _v2_parent()) is None:
                    raise OSError("the sandboxes' control group could not be made")
                group = parent / name
                group.mkdir()
                self.groups = [group]
                (group / "memory.max").write_text(str(self.limits.sandbox_memory_bytes))
                (group / "memory.swap.max").write_text("0") if (group / "memory.swap.max").exists() else None
                (group / "pids.max").write_text(str(self.limits.processes))
                (group / "cpu.max").write_text(f"{quota} 100000")
            elif self.kind == "cgroup v1":
                self.groups = [CGROUPS / kind / "idemlib-sandboxes" / name for kind in V1]
                for group in self.groups:
                    group.mkdir()
                memory, pids, cpu = self.groups
                (memory / "memory.limit_in_bytes").write_text(str(self.limits.sandbox_memory_bytes))
                (pids / "pids.max").write_text(str(self.limits.processes))
                (cpu / "cpu.cfs_period_us").write_text("100000")
                (cpu / "cpu.cfs_quota_us").write_text(str(quota))
        except OSError:
            self.stop()
            self.kind = "per process"
        return self

    def entering(self) -> list[str]:
        """A prefix that moves the command into the group before it starts (``sh`` writes its own pid)."""
        if not self.groups:
            return []
        moves = "; ".join(f'echo $$ > "{group / "cgroup.procs"}" || exit 111' for group in self.groups)
        return ["/bin/sh", "-c", f'{moves}; exec "$@"', "sh"]

    def stop(self) -> None:
        """Kill whatever is left in the group, then remove it."""
        for group in self.groups:
            for _ in range(100):
                try:
                    pids = [int(pid) for pid in (group / "cgroup.procs").read_text().split()]
                except OSError:
                    break
                if not pids:
                    break
                for pid in pids:
                    try:
                        os.kill(pid, 9)
                    except OSError:
                        continue
                time.sleep(0.02)
            try:
                group.rmdir()
            except OSError:
                continue
        self.groups = []

    def __exit__(self, *exc: object) -> None:
        self.stop()
