"""The workbench's lock: the exact version of every package `make setup` installs.

    python tools/lock.py write    # resolve pyproject.toml's extras anew -> locks/workbench.txt
    python tools/lock.py check    # the lock and pyproject.toml agree? (exit 1 and say why if not)
    python tools/lock.py newest [FILE]  # what `make test-newest` installs (ranges, no lock)

`make lock` runs `write`. It asks pip's own resolver (`pip install --dry-run --ignore-installed
--report`) what installing the workbench (`.[lab,sweep,test]`, with the build tools `pip` and
`setuptools`) would take today, and writes each package as `name==version`, sorted, with a header
saying when and with which Python and pip. torch is written without its local label
(`torch==2.13.0`: `2.13.0+cpu` satisfies it, and the Makefile installs the CPU build first); a
CUDA package in the resolution (`nvidia-*`, `triton`: a CUDA build of torch was resolved) stops
the write, since the workbench runs the CPU build.

The lock is for the workbench's platform: Linux, x86_64, Python 3.11 (also Binder's). A package
that only another platform needs is not in it and installs unpinned there. The light install
(`pip install funcbwd`: torch and numpy by range) never reads it: a library must not pin its users.
"""

from __future__ import annotations

import datetime
import json
import platform
import re
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LOCK = ROOT / "locks" / "workbench.txt"
EXTRAS = ("lab", "sweep", "test")
#: installed besides the extras: pip itself and the build backend of `pip install -e .`
BUILD_TOOLS = ("pip", "setuptools>=68")
CPU_INDEX = "https://download.pytorch.org/whl/cpu"
CUDA_NAME = re.compile(r"^(nvidia-.*|cuda-.*|pytorch-cuda|triton|cudnn|nccl)$")


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def cpu_index_answers() -> bool:
    import urllib.request

    try:
        urllib.request.urlopen(f"{CPU_INDEX}/torch/", timeout=5)
    except Exception:  # noqa: BLE001 - offline, or a mirror only: pip's own indexes then
        return False
    return True


def resolve() -> dict[str, str]:
    """name -> version of everything installing the workbench takes today (pip's resolver)."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        cmd = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed",
               "--quiet", "--report", str(report), f".[{','.join(EXTRAS)}]", *BUILD_TOOLS]
        if cpu_index_answers():
            cmd += ["--extra-index-url", CPU_INDEX]
        print("lock: resolving with pip (about a minute) ...", file=sys.stderr, flush=True)
        subprocess.run(cmd, cwd=ROOT, check=True)
        items = json.loads(report.read_text())["install"]
    versions = {}
    for item in items:
        meta = item["metadata"]
        if canonical(meta["name"]) == "funcbwd":
            continue
        versions[canonical(meta["name"])] = re.sub(r"\+.*$", "", meta["version"])
    cuda = sorted(n for n in versions if CUDA_NAME.match(n))
    if cuda:
        raise SystemExit(f"lock: the resolution has CUDA packages ({', '.join(cuda)}): a CUDA "
                         "build of torch was resolved; make the CPU build reachable first")
    return versions


def write() -> None:
    versions = resolve()
    pip = subprocess.run([sys.executable, "-m", "pip", "--version"], capture_output=True,
                         text=True, check=True).stdout.split()[1]
    header = [
        "# The workbench's lock (make lock; do not edit): every package `make setup` installs, exact.",
        f"# Resolved {datetime.date.today().isoformat()} by pip {pip} on Python "
        f"{platform.python_version()} ({platform.system()} {platform.machine()}),",
        f"# from pyproject.toml's extras [{','.join(EXTRAS)}] and {', '.join(BUILD_TOOLS)}.",
        "# torch without its local label: the CPU build the Makefile installs (+cpu) satisfies it.",
    ]
    lines = [f"{name}=={versions[name]}" for name in sorted(versions)]
    LOCK.parent.mkdir(exist_ok=True)
    LOCK.write_text("\n".join(header + lines) + "\n")
    print(f"lock: wrote {len(lines)} packages to {LOCK.relative_to(ROOT)}", file=sys.stderr)


def read_lock(path: Path = LOCK) -> dict[str, str]:
    out = {}
    for raw in path.read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        name, sep, version = line.partition("==")
        if not sep:
            raise ValueError(f"{path.name}: {line!r} is not name==version")
        out[canonical(name)] = version.strip()
    return out


def requirements(pyproject: Path = ROOT / "pyproject.toml") -> list[str]:
    """Every requirement of the workbench: the light install's and its extras'."""
    project = tomllib.loads(pyproject.read_text())["project"]
    reqs = list(project["dependencies"])
    for extra in EXTRAS:
        reqs += project["optional-dependencies"][extra]
    return reqs + list(BUILD_TOOLS)


def problems(lock: dict[str, str] | None = None, reqs: list[str] | None = None) -> list[str]:
    """How the lock and pyproject.toml disagree: a requirement with no locked version, or a
    locked version outside its range (empty when they agree)."""
    from packaging.requirements import Requirement
    from packaging.version import Version

    lock = read_lock() if lock is None else lock
    out = []
    for text in requirements() if reqs is None else reqs:
        req = Requirement(text)
        name = canonical(req.name)
        if name not in lock:
            out.append(f"{req} is not in the lock")
        elif not req.specifier.contains(Version(lock[name]), prereleases=True):
            out.append(f"{req}: the lock has {name}=={lock[name]}")
    out += [f"{n} is a CUDA package" for n in lock if CUDA_NAME.match(n)]
    return out


def newest() -> list[str]:
    """What `make test-newest` installs: every requirement by its range, the newest pip finds.
    torch by the light install's range (the extras' exact pin left out): the suite then runs on
    the newest torch this machine's index allows."""
    from packaging.requirements import Requirement

    light = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    pinned = {canonical(Requirement(r).name) for r in light}
    out = list(light)
    for text in requirements()[len(light):]:
        if canonical(Requirement(text).name) not in pinned:
            out.append(text)
    return out


def main(argv: list[str]) -> int:
    if argv == ["write"]:
        write()
        return 0
    if argv[:1] == ["newest"] and len(argv) <= 2:
        text = "\n".join(newest()) + "\n"
        if len(argv) == 2:
            Path(argv[1]).write_text(text)
        else:
            sys.stdout.write(text)
        return 0
    if argv == ["check"]:
        found = problems()
        for p in found:
            print(f"lock: {p} (run `make lock`)", file=sys.stderr)
        return 1 if found else 0
    print(__doc__.split("\n\n")[1], file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
