"""The upstream test entries each small PR retires, run on the installed torch with and without
its kernels: functorch's ``test/functorch/test_ops.py`` at the commit the RFC cites.

Each entry is one expected failure of upstream's file (:data:`PRS`: the PR's entries, and
:data:`CONTROLS`: entries the PRs must not retire). Every test runs in a fresh interpreter
(``python -m funcbwd_lab.studies.prs.upstream --child ...``: the kernels are process-wide) through
unittest, as upstream runs it: the entry's ``xfail`` is in place, so a test that now passes
reports an *unexpected success*. An entry is **retired** by a PR when it is an expected failure
without the PR's kernels and an unexpected success with them.

The files: ``test_ops.py``, ``common_utils.py`` and ``functorch_additional_op_db.py`` of
``test/functorch/`` at :data:`COMMIT` (common_utils at :data:`HELPERS_COMMIT`). The study reads
them from ``--tests DIR`` (default ``build/upstream/<commit>/test/functorch``); when they are not
there it downloads them from GitHub by commit, and says in one line how to supply them when it
cannot. The saved data records each file's sha256 and whether it is the whole upstream file or an
excerpt (a file whose first line says ``EXCERPT``: the tests run, verbatim, with the helpers they
call; this machine cannot reach GitHub). ``python -m funcbwd_lab.studies.prs.upstream --out
data/prs-upstream.json`` (about 2-4 minutes: 2 runs per entry, 8 s of imports each).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import time
import unittest
from pathlib import Path
from typing import Any, Sequence

SCHEMA = "funcbwd-prs-upstream/1"
FILE = "prs-upstream.json"
COMMIT = "28a580b0d22161650a6f4131276dddbf3a4699f4"
HELPERS_COMMIT = "1ed400c2f1671d3ffb381f16c643665e0648a363"
FILES = {"test_ops.py": COMMIT, "common_utils.py": HELPERS_COMMIT,
         "functorch_additional_op_db.py": COMMIT}
RAW = "https://raw.githubusercontent.com/pytorch/pytorch/{commit}/test/functorch/{name}"

#: PR -> the kernels it adds (funcbwd_lab.studies.prs.build) and the upstream entries it retires
PRS: dict[str, dict[str, Any]] = {
    "bce-double-backward-guard": {
        "kernels": ["bce_double_backward"],
        "entries": [("test_vmapvjpvjp", "nn.functional.binary_cross_entropy", "")]},
    "batch-rule-decompositions": {
        "kernels": ["cummaxmin_backward", "unfold_backward", "squeeze_copy.dim"],
        "entries": [("test_vmapvjp_has_batch_rule", op, "")
                    for op in ("cummax", "cummin", "unfold", "unfold_copy")]},
    "copy-rules": {"kernels": ["copy_batch_rule", "copy_autograd"], "entries": []},
}
#: entries no small PR retires, run with every kernel installed (index_fill: aten::_unique)
CONTROLS = [("test_vmapvjp_has_batch_rule", "index_fill", ""),
            ("test_vmapvjpvjp", "nn.functional.layer_norm", "")]
OUTCOMES = ("pass", "expected failure", "unexpected success", "fail", "error", "skip", "missing")


def test_name(test: str, op: str, variant: str = "") -> str:
    """The instantiated unittest method: ``test_vmapvjpvjp_nn_functional_layer_norm_cpu_float32``."""
    name = op.replace(".", "_") + (f"_{variant.replace('.', '_')}" if variant else "")
    return f"{test}_{name}_cpu_float32"


def default_dir() -> Path:
    return Path(__file__).resolve().parents[4] / "build" / "upstream" / COMMIT[:10] / "test" / "functorch"


def fetch(directory: Path, timeout: float = 10.0) -> str:
    """Download the missing files into ``directory``; '' when all are there, else why not."""
    import urllib.request

    directory.mkdir(parents=True, exist_ok=True)
    for name, commit in FILES.items():
        if (directory / name).exists():
            continue
        url = RAW.format(commit=commit, name=name)
        try:
            with urllib.request.urlopen(url, timeout=timeout) as r:
                (directory / name).write_bytes(r.read())
        except Exception as e:  # noqa: BLE001 - offline: the reason, in one line
            return (f"cannot download {url} ({type(e).__name__}); put test/functorch/{name} of "
                    f"pytorch/pytorch@{commit[:10]} in {directory}")
    return ""


def describe(directory: Path) -> dict[str, Any]:
    out = {}
    for name, commit in FILES.items():
        data = (directory / name).read_bytes()
        out[name] = {"commit": commit, "sha256": hashlib.sha256(data).hexdigest(),
                     "excerpt": data.lstrip().startswith(b"# EXCERPT")}
    return out


# ------------------------------------------------------------------------------ the child
class _Result(unittest.TestResult):
    def __init__(self) -> None:
        super().__init__()
        self.outcome: dict[str, tuple[str, str]] = {}

    def _set(self, test, outcome: str, err: Any = None) -> None:
        msg = ""
        if err is not None:
            msg = str(err[1]).strip().splitlines()[0][:160] if str(err[1]).strip() else ""
        self.outcome[test._testMethodName] = (outcome, msg)

    def addSuccess(self, test):  # noqa: N802 - unittest's names
        self._set(test, "pass")

    def addFailure(self, test, err):  # noqa: N802
        self._set(test, "fail", err)

    def addError(self, test, err):  # noqa: N802
        self._set(test, "error", err)

    def addSkip(self, test, reason):  # noqa: N802
        self.outcome[test._testMethodName] = ("skip", reason)

    def addExpectedFailure(self, test, err):  # noqa: N802
        self._set(test, "expected failure", err)

    def addUnexpectedSuccess(self, test):  # noqa: N802
        self._set(test, "unexpected success")


def child(directory: str, kernels: Sequence[str], tests: Sequence[str]) -> dict[str, Any]:
    """Run ``tests`` (method names of ``TestOperatorsCPU``) with ``kernels`` installed."""
    import warnings

    if kernels:
        from funcbwd_lab.studies.prs import build

        build.load()
        build.ops().install(list(kernels))
    sys.path.insert(0, directory)
    warnings.simplefilter("ignore")
    import test_ops  # noqa: E402 - upstream's file, from ``directory``

    cls = test_ops.TestOperatorsCPU
    out: dict[str, Any] = {}
    for name in tests:
        if not hasattr(cls, name):
            out[name] = {"outcome": "missing", "message": "no such test", "seconds": 0.0}
            continue
        result, start = _Result(), time.perf_counter()
        cls(name).run(result)
        outcome, msg = result.outcome.get(name, ("error", "no outcome"))
        out[name] = {"outcome": outcome, "message": msg,
                     "seconds": round(time.perf_counter() - start, 1)}
    return out


def _spawn(directory: Path, kernels: Sequence[str], tests: Sequence[str]) -> dict[str, Any]:
    cmd = [sys.executable, "-m", __name__ if __name__ != "__main__" else
           "funcbwd_lab.studies.prs.upstream", "--child", str(directory),
           "--kernels", ",".join(kernels), "--tests", ",".join(tests)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    last = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
    if p.returncode != 0 or not last:
        err = (p.stderr.strip().splitlines() or ["no output"])[-1][:160]
        return {t: {"outcome": "error", "message": err, "seconds": None} for t in tests}
    return json.loads(last[-1])


# ------------------------------------------------------------------------------ the study
def retired(without: str, with_: str) -> bool:
    return without == "expected failure" and with_ == "unexpected success"


def run(directory: Path, progress: bool = True) -> dict[str, Any]:
    import torch

    every = sorted({k for pr in PRS.values() for k in pr["kernels"]})
    rows = []
    jobs = [(pr, entry) for pr, spec in PRS.items() for entry in spec["entries"]]
    jobs += [("control", entry) for entry in CONTROLS]
    for i, (pr, entry) in enumerate(jobs, 1):
        name = test_name(*entry)
        kernels = PRS[pr]["kernels"] if pr in PRS else every
        if progress:
            print(f"[{i}/{len(jobs)}] {name}: without, then with {', '.join(kernels)}",
                  file=sys.stderr, flush=True)
        a = _spawn(directory, [], [name])[name]
        b = _spawn(directory, kernels, [name])[name]
        rows.append({"pr": pr, "test": entry[0], "op": entry[1], "variant": entry[2],
                     "method": name, "kernels": kernels, "without": a, "with": b,
                     "retired": retired(a["outcome"], b["outcome"])})
    return {"schema": SCHEMA, "torch": torch.__version__, "commit": COMMIT,
            "files": describe(directory), "rows": rows,
            "retired": sum(r["retired"] for r in rows if r["pr"] != "control"),
            "entries": sum(1 for r in rows if r["pr"] != "control")}


def load(data_dir: str | Path) -> dict[str, Any] | None:
    from funcbwd_lab.studies.prs import load_saved

    return load_saved(data_dir, FILE, SCHEMA)


def main(argv: list[str] | None = None) -> int:
    from funcbwd_lab import command

    p = argparse.ArgumentParser(prog="python -m funcbwd_lab.studies.prs.upstream",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--out", help=f"write the JSON here (e.g. data/{FILE}); stdout without it")
    p.add_argument("--tests", default=None, help="directory of upstream's test/functorch files")
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--kernels", default="", help=argparse.SUPPRESS)
    command.add_force(p)
    a = p.parse_args(argv)
    if a.child:  # a child run: --tests is the comma-separated list of test methods
        tests = [t for t in (a.tests or "").split(",") if t]
        print(json.dumps(child(a.child, [k for k in a.kernels.split(",") if k], tests)))
        return 0
    if command.out_refused(p.prog, a.out, a.force):
        return 2
    from funcbwd_lab.studies.prs import build

    why = build.available()
    if why:
        print(f"{p.prog}: {why}", file=sys.stderr)
        return 2
    directory = Path(a.tests) if a.tests else default_dir()
    why = fetch(directory)
    if why:
        print(f"{p.prog}: {why}", file=sys.stderr)
        return 2
    doc = run(directory)
    text = json.dumps(doc, indent=1, sort_keys=True) + "\n"
    if a.out:
        Path(a.out).write_text(text)
        print(f"wrote {a.out}: {doc['retired']} of {doc['entries']} entries retired")
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
