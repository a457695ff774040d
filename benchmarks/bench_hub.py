"""A class on one JupyterHub host: what each learner costs, and so how many learners a 2-core, 24 GB host holds.

Starts the pinned JupyterHub with LocalProcessSpawner (as ``tests/test_jupyterhub.py``
does), three learners as Unix users of their own, in each mode: every learner's
own PostgreSQL, Valkey and NATS; or a shared PostgreSQL with a database per
learner. Per learner it reports the seconds from the spawn request to the end of
the first executed cell, the seconds of the lesson's core on the course's servers
(the first run starts them), and the proportional memory (PSS: shared pages split
among the processes that share them) of the single-user server, the kernel and
the course's servers, measured while the kernel is alive. Needs root and npm;
prints figures, asserts nothing.

    .venv/bin/python benchmarks/bench_hub.py
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from hub import LESSON, hub_environment, proxy, shared_postgres, start_hub  # noqa: E402
from other_users import as_account, learner_account, python_for_anyone  # noqa: E402

from idemlib.servers import POSTGRES  # noqa: E402
from idemlib.servers.local import free_port, stop  # noqa: E402

HOST_MEMORY_GIB = 24
LEARNERS = ["ada", "grace", "linus"]
PARTS = {"single-user server": ("jupyterhub-singleuser",), "kernel": ("ipykernel_launcher",),
         "PostgreSQL": ("postgres",), "Valkey": ("valkey-server",), "NATS": ("nats-server",)}


def memory_by_part(uid: int) -> dict[str, float]:
    """MiB of PSS of ``uid``'s processes, by the part of the learner's session each is."""
    found = dict.fromkeys(PARTS, 0.0)
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if entry.stat().st_uid != uid:
                continue
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            rollup = (entry / "smaps_rollup").read_text()
        except OSError:
            continue  # it ended meanwhile
        pss = next(int(line.split()[1]) for line in rollup.splitlines() if line.startswith("Pss:")) / 1024
        part = next((name for name, words in PARTS.items() if any(word in command for word in words)), None)
        if part is None and command.startswith("postgres:"):
            part = "PostgreSQL"
        if part is not None:
            found[part] += pss
    return found


def run(mode: str, bin_folder: Path) -> list[dict[str, float]]:
    root = Path(tempfile.mkdtemp(prefix="idemlib-bench-hub-"))
    root.chmod(0o755)
    rows = []
    with ExitStack() as stack:
        stack.callback(shutil.rmtree, root, ignore_errors=True)  # last, after the learners are gone
        accounts = [stack.enter_context(learner_account(f"{name}{os.getpid() % 10000}", root / "home" / name))
                    for name in LEARNERS]
        environment = {"PATH": f"{bin_folder}:/usr/bin:/bin"}
        if mode == "shared PostgreSQL":
            _, files = shared_postgres(root, accounts)
            environment["IDEMLIB_POSTGRES_URL"] = f"@{files}/{{username}}"
        hub = start_hub(root, bin_folder, free_port(), free_port(), free_port(), environment)
        try:
            for account in accounts:
                name = account.pw_name
                hub.api("POST", f"/users/{name}")
                began = time.monotonic()
                spawn = hub.spawn(name)
                kernel = hub.server_api(name, "POST", "/kernels", {"name": "python3"})["id"]
                hub.execute(name, "1 + 1", kernel=kernel)
                first_cell = time.monotonic() - began
                lesson_began = time.monotonic()
                status, lines = hub.execute(name, LESSON, kernel=kernel)
                if status != "ok":
                    raise RuntimeError("\n".join(lines))
                rows.append({"spawn": spawn, "first cell": first_cell, "lesson": time.monotonic() - lesson_began,
                             **memory_by_part(account.pw_uid)})
        finally:
            hub.stop()
            for account in accounts:  # each learner's course servers, stopped as that learner
                subprocess.run([str(bin_folder / "python"), "-m", "idemlib.servers", "stop"], capture_output=True,
                               timeout=120, cwd=account.pw_dir, **as_account(account),
                               env={"PATH": environment["PATH"], "HOME": account.pw_dir})
            if mode == "shared PostgreSQL":
                stop([POSTGRES.kind], root / "teacher")
    return rows


def main() -> None:
    if os.geteuid() != 0 or shutil.which("npm") is None or python_for_anyone() is None:
        print("bench_hub: skipped; learners as Unix users need root, npm and a Python any user runs")
        return
    bin_folder, _ = hub_environment(), proxy()
    print(f"{os.cpu_count()} cores; load {os.getloadavg()[0]:.2f} before")
    for mode in ("own servers", "shared PostgreSQL"):
        rows = run(mode, bin_folder)
        print(f"\n{mode}: {len(rows)} learners, one after another")
        print(f"  {'':26}" + "".join(f"{name:>10}" for name in LEARNERS) + f"{'median':>10}")
        for key in ("spawn", "first cell", "lesson"):
            values = [row[key] for row in rows]
            print(f"  {key + ' (s)':26}" + "".join(f"{v:10.1f}" for v in values) + f"{statistics.median(values):10.1f}")
        for key in PARTS:
            values = [row[key] for row in rows]
            print(f"  {key + ' (MiB)':26}" + "".join(f"{v:10.0f}" for v in values) + f"{statistics.median(values):10.0f}")
        per_learner = statistics.median(sum(row[key] for key in PARTS) for row in rows)
        print(f"  per learner: {per_learner:.0f} MiB (the shared PostgreSQL's own memory not counted); "
              f"a {HOST_MEMORY_GIB} GiB host holds about {HOST_MEMORY_GIB * 1024 // per_learner:.0f} learners "
              "by memory alone, before the system and the hub")
    print(f"\nload {os.getloadavg()[0]:.2f} after")


if __name__ == "__main__":
    main()
