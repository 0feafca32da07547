"""What each small PR's kernels change on the installed torch, checked against the per-sample loop
(every run with and without the kernels, vmap's slow fallback disabled where the point is to
remove it):

* **decompositions**: ``vmap(vjp)`` of cummax, cummin, unfold (also of a 0-dim input) and
  squeeze_copy over a batch of cotangents;
* **BCE guard**: ``vmap`` over ``vjp`` of ``vjp`` of binary_cross_entropy, each ``in_dims``
  choice of (input, target, cotangent, two outer cotangents), with torch's kernel, the fixed
  guard (``bce_double_backward``) and torch's guard re-built out of tree (the mutation);
* **aten::copy**: the batching rule on :data:`LAYOUTS` x sources x batch dims, values and
  ``as_strided`` reads of dst's geometry against the loop (pytorch#103329's compositions with the
  rules: :mod:`funcbwd_lab.studies.review.copy_repro`).

``python -m funcbwd_lab.studies.prs.effects --out data/prs-effects.json`` (about a minute; builds
the kernels on first use).
"""

from __future__ import annotations

import contextlib
import itertools
import warnings
from pathlib import Path
from typing import Any, Callable, Iterator

import torch

SCHEMA = "funcbwd-prs-effects/1"
FILE = "prs-effects.json"
B = 3


@contextlib.contextmanager
def no_fallback() -> Iterator[None]:
    """vmap's slow per-sample fallback disabled (an op without a rule raises instead)."""
    prev = torch._C._functorch._is_vmap_fallback_enabled()
    torch._C._functorch._set_vmap_fallback_enabled(False)
    try:
        yield
    finally:
        torch._C._functorch._set_vmap_fallback_enabled(prev)


def outcome(call: Callable[[], Any], loop: Callable[[], Any]) -> str:
    """"pass" (equal to the loop), "mismatch", or the error's first line."""
    try:
        got = call()
    except Exception as e:  # noqa: BLE001 - the outcome
        return f"{type(e).__name__}: {str(e).strip().splitlines()[0][:90]}"
    want = loop()
    got, want = (got if isinstance(got, (tuple, list)) else (got,),
                 want if isinstance(want, (tuple, list)) else (want,))
    same = all(torch.allclose(a, b, atol=1e-5, rtol=1e-4) and a.dtype == b.dtype
               for a, b in zip(got, want))
    return "pass" if same and len(got) == len(want) else "mismatch"


#: an outcome's error, in a few words: (substring of the message, words)
ERRORS = (("inplace arithmetic", "vmap's in-place error"),
          ("derivative for aten::copy is not implemented", "no derivative for aten::copy"),
          ("forward AD with aten::copy", "no forward-AD formula for aten::copy"),
          ("hit the vmap fallback", "the slow fallback (disabled)"))


def describe(outcome_or_message: str) -> str:
    """"pass", "mismatch", or an error's message in a few words (:data:`ERRORS`; a fallback
    names its op)."""
    import re

    if outcome_or_message in ("pass", "mismatch", ""):
        return outcome_or_message
    for key, words in ERRORS:
        if key in outcome_or_message:
            op = re.search(r"(aten::[\w.]+) hit the vmap fallback", outcome_or_message)
            return f"{op.group(1)}'s slow fallback" if op else words
    return outcome_or_message.split(":")[0]


def _vjp_case(f: Callable, x: torch.Tensor, cts: torch.Tensor) -> tuple[Callable, Callable]:
    def h(ct):
        return torch.func.vjp(f, x)[1](ct)[0]
    return (lambda: torch.func.vmap(h)(cts)), (lambda: torch.stack([h(c) for c in cts]))


def decompositions(build: Any) -> list[dict[str, Any]]:
    g = torch.Generator().manual_seed(0)
    x, s = torch.randn(4, 5, generator=g), torch.randn(4, 1, 3, generator=g)
    cases = {
        "cummax": (lambda t: torch.cummax(t, 1).values, x, torch.randn(B, 4, 5, generator=g)),
        "cummin": (lambda t: torch.cummin(t, 0).values, x, torch.randn(B, 4, 5, generator=g)),
        "unfold": (lambda t: t.unfold(1, 2, 1), x, torch.randn(B, 4, 4, 2, generator=g)),
        "unfold (0-dim input)": (lambda t: t.unfold(0, 1, 1), torch.randn((), generator=g),
                                 torch.randn(B, 1, generator=g)),
        "unfold_copy": (lambda t: torch.unfold_copy(t, 0, 2, 2), x,
                        torch.randn(B, 2, 5, 2, generator=g)),
        "squeeze_copy (forward)": None,
    }
    kernels = ["cummaxmin_backward", "unfold_backward", "squeeze_copy.dim"]
    rows = []
    for name, case in cases.items():
        if case is None:
            xs = torch.randn(B, 4, 1, 3, generator=g)
            call = lambda: torch.func.vmap(lambda t: torch.squeeze_copy(t, 1))(xs)  # noqa: E731
            loop = lambda: torch.stack([torch.squeeze_copy(t, 1) for t in xs])  # noqa: E731
        else:
            call, loop = _vjp_case(*case)
        row = {"case": name}
        for label, ks in (("without", []), ("with", kernels)):
            with build.kernels(ks), no_fallback():
                row[label] = outcome(call, loop)
        rows.append(row)
    return rows


def bce(build: Any) -> dict[str, Any]:
    import torch.nn.functional as F

    g = torch.Generator().manual_seed(1)
    x = torch.rand(3, 4, generator=g, dtype=torch.float64).clamp(0.05, 0.95)
    t = torch.rand(3, 4, generator=g, dtype=torch.float64)
    w = torch.rand(3, 4, generator=g, dtype=torch.float64)
    args = [x, t, torch.rand((), generator=g, dtype=torch.float64),
            torch.rand(3, 4, generator=g, dtype=torch.float64),
            torch.rand(3, 4, generator=g, dtype=torch.float64)]

    def h(x, t, ct, a, b):
        def first(x, t, ct):
            return torch.func.vjp(lambda x, t: F.binary_cross_entropy(x, t, w), x, t)[1](ct)
        return torch.func.vjp(first, x, t, ct)[1]((a, b))

    out: dict[str, Any] = {}
    for label, ks in (("torch", []), ("fixed guard", ["bce_double_backward"]),
                      ("torch's guard, out of tree", ["bce_double_backward_upstream_guard"])):
        counts: dict[str, int] = {}
        for dims in itertools.product((0, None), repeat=len(args)):
            if all(d is None for d in dims):
                continue
            bargs = [torch.stack([a * (1 - 0.05 * i) for i in range(2)]) if d == 0 else a
                     for a, d in zip(args, dims)]

            def loop(bargs=bargs, dims=dims):
                res = [h(*[b[i] if d == 0 else b for b, d in zip(bargs, dims)]) for i in range(2)]
                return tuple(torch.stack(p) for p in zip(*res))
            with build.kernels(ks):
                o = outcome(lambda: torch.func.vmap(h, in_dims=dims)(*bargs), loop)
            o = "pass" if o == "pass" else ("vmap in-place error" if "inplace" in o else o)
            counts[o] = counts.get(o, 0) + 1
        out[label] = counts
    return out


LAYOUTS = {"dense": lambda: torch.randn(4, 5), "transposed": lambda: torch.randn(5, 4).t(),
           "storage offset": lambda: torch.randn(30)[3:23].view(4, 5),
           "strided": lambda: torch.randn(8, 10)[::2, ::2],
           "expanded": lambda: torch.randn(1, 5).expand(4, 5)}


def copy_rule(build: Any) -> dict[str, int]:
    torch.manual_seed(2)
    srcs = {"same shape": torch.randn(4, 5), "broadcast": torch.randn(5),
            "float64": torch.randn(4, 5, dtype=torch.float64)}
    counts: dict[str, int] = {}
    with build.kernels(["copy_batch_rule"]), no_fallback():
        for (ln, make), (sn, s), bd, bs in itertools.product(LAYOUTS.items(), srcs.items(),
                                                              (None, 0), (None, 0, -1)):
            if bd is None and bs is None:
                continue
            d = make()
            db = torch.stack([d.clone() + i for i in range(B)]) if bd == 0 else d
            sb = torch.randn(B, *s.shape, dtype=s.dtype) if bs is not None else s
            sb = sb.movedim(0, -1) if bs == -1 else sb
            geo = (d.shape, d.stride(), d.storage_offset()) if ln != "expanded" else \
                ((4, 5), (5, 1), 0)

            def f(dd, ss, read=False):
                out = torch.ops.aten.copy(dd, ss)
                return out.as_strided(*geo) if read and bd is None else out
            for read in (False, True):
                o = outcome(lambda: torch.func.vmap(lambda a, b: f(a, b, read), (bd, bs))(db, sb),
                            lambda: torch.stack([f(db[i] if bd is not None else db,
                                                   sb.select(bs, i) if bs is not None else sb,
                                                   read) for i in range(B)]))
                counts[o] = counts.get(o, 0) + 1
    return counts


def run() -> dict[str, Any]:
    from funcbwd_lab.studies.prs import build

    build.load()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return {"schema": SCHEMA, "torch": torch.__version__,
                "decompositions": decompositions(build), "bce": bce(build),
                "copy_rule": copy_rule(build)}


def load(data_dir: str | Path) -> dict[str, Any] | None:
    from funcbwd_lab.studies.prs import load_saved

    return load_saved(data_dir, FILE, SCHEMA)


def main(argv: list[str] | None = None) -> int:
    import argparse
    import json

    from funcbwd_lab import command

    p = argparse.ArgumentParser(prog="python -m funcbwd_lab.studies.prs.effects",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help=f"the JSON to write (e.g. data/{FILE})")
    command.add_force(p)
    a = p.parse_args(argv)
    if command.out_refused(p.prog, a.out, a.force):
        return 2
    Path(a.out).write_text(json.dumps(run(), indent=1, sort_keys=True) + "\n")
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
