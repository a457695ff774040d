"""Install deliver-twice alone into an empty folder and run the payments project's tests with nothing else.

    python install_alone.py [FOLDER]

``pip install --target`` puts deliver-twice and what it depends on (pytest and pytest's own
dependencies) in the folder; the tests then run in ``python -S``, which leaves out every
installed package but the folder's, so nothing of the environment pip ran in can help them.
Prints one JSON object: the packages installed, their size, the tests' outcome, and what
importing the tool costs.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
PACKAGE = HERE.parent
PROJECT = HERE / "payments"


def isolated(folder: Path, code: str) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in ``python -S`` with only ``folder`` and the project on the path."""
    prelude = f"import sys; sys.path[:0] = [{str(folder)!r}, {str(PROJECT)!r}]; "
    return subprocess.run([sys.executable, "-S", "-c", prelude + code], capture_output=True, text=True,
                          cwd=PROJECT, timeout=600, check=False)


def main(folder: Path) -> dict[str, object]:
    started = time.monotonic()
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--target", str(folder), str(PACKAGE)],
                   check=True, capture_output=True, text=True, timeout=600)
    installed = time.monotonic() - started
    packages = sorted(path.name.split("-")[0] for path in folder.glob("*.dist-info"))
    size = sum(path.stat().st_size for path in folder.rglob("*") if path.is_file())
    tests = isolated(folder, "import pytest; sys.exit(pytest.main(['-q', '-p', 'no:cacheprovider', '.']))")
    imports = isolated(folder, "import time; t = time.perf_counter(); import deliver_twice, deliver_twice.plugin; "
                               "print(time.perf_counter() - t, len(sys.modules)); "
                               "import importlib.util as u; print([m for m in ('idemlib', 'pandas', 'psycopg') "
                               "if u.find_spec(m)])")
    seconds, modules = imports.stdout.split()[:2]
    return {"command": f"pip install --target FOLDER {PACKAGE.name}", "install seconds": round(installed, 1),
            "packages": packages, "size MB": round(size / 1e6, 1),
            "tests": tests.stdout.strip().splitlines()[-1], "tests exit code": tests.returncode,
            "import seconds": round(float(seconds), 2), "modules loaded": int(modules),
            "also importable": json.loads(imports.stdout.splitlines()[1].replace("'", '"'))}


if __name__ == "__main__":
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp(prefix="deliver-twice-alone-"))
    print(json.dumps(main(target), indent=1))
