"""Objection 5 of the review (issue 28): does compiled autograd (torch 2.13's
``torch._dynamo.compiled_autograd``, which traces each node through ``compiled_args`` and
``apply_with_saved`` into FX) see the backward passes torch.func runs, and what does it record of
a node's formula? Each call runs with compiled autograd enabled (backend "eager") and counts its captures (dynamo's ``compiled_autograd``
counter): a plain ``.backward()``, ``vmap(grad)`` and ``vmap`` over a ``vjp``'s cotangents of
torch's diag, and the last with diag's legacy in-place formula (``funcbwd_lab.ops``, no strategy),
which fails under vmap in eager mode. :func:`captured_graph` records the FX graph compiled autograd
hands its compiler for one backward, against the ATen calls that backward dispatches eagerly;
:func:`proxy_source` reads the installed torch's own note on ``apply_with_saved``.
``python -m funcbwd_lab.studies.review.compiled_autograd --out data/review-compiled-autograd.json``.
"""

from __future__ import annotations

from funcbwd_lab.studies.review import saved

import warnings
from pathlib import Path
from typing import Any, Callable

import torch

SCHEMA = "funcbwd-review-compiled-autograd/2"
FILE = "review-compiled-autograd.json"


def _calls() -> dict[str, Callable[[], Any]]:
    from torch.func import grad, vjp, vmap

    from funcbwd_lab.ops import legacy_ops

    gen = torch.Generator().manual_seed(0)
    x, xs, cot = (torch.randn(3, 5, generator=gen), torch.randn(4, 3, 5, generator=gen),
                  torch.randn(4, 3, generator=gen))

    def backward():
        t = x.clone().requires_grad_()
        torch.diag(t, 0).sin().sum().backward()
        return t.grad

    def vmap_vjp(f):
        def run():
            _, pull = vjp(lambda t: f(t).sin(), x)
            return vmap(pull)(cot)
        return run

    legacy = legacy_ops.function_for("diag")
    return {"backward": backward,
            "vmap_grad": lambda: vmap(grad(lambda t: torch.diag(t, 0).sin().sum()))(xs),
            "vmap_vjp": vmap_vjp(lambda t: torch.diag(t, 0)),
            "vmap_vjp_legacy_diag": vmap_vjp(lambda t: legacy.apply(t, 0))}


def run() -> dict[str, Any]:
    from torch._dynamo import compiled_autograd
    from torch._dynamo.utils import counters

    from funcbwd.errors import first_line
    from funcbwd.internals import dynamo

    out: dict[str, Any] = {}
    with dynamo.fresh_compiler(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name, call in _calls().items():
            eager = _outcome(call, first_line)
            before = counters["compiled_autograd"]["captures"]
            with compiled_autograd._enable(lambda gm: torch.compile(gm, backend="eager")):
                compiled = _outcome(call, first_line)
            out[name] = {"eager": eager, "compiled_autograd": compiled,
                         "captures": counters["compiled_autograd"]["captures"] - before}
    return {"schema": SCHEMA, "torch": torch.__version__, "git": torch.version.git_version,
            "calls": out, "nodes": node_counts(), "graph": captured_graph(),
            "source": proxy_source()}


def captured_graph() -> dict[str, Any]:
    """What compiled autograd records for diag's backward (``.backward()`` of
    ``diag(x).sin().sum()``): the FX graph handed to its compiler, against the ATen calls the same
    backward dispatches eagerly (torch.profiler, no dispatch mode). Each backward Node is one
    call of ``compiled_autograd.ops.<Node>``: the formula's ATen calls are not in the graph."""
    from torch._dynamo import compiled_autograd
    from torch.profiler import ProfilerActivity, profile

    graphs: list[Any] = []

    def compiler(gm: Any) -> Any:
        graphs.append(gm)
        return torch.compile(gm, backend="eager")

    def loss() -> torch.Tensor:
        x = torch.randn(3, 5, generator=torch.Generator().manual_seed(0), requires_grad=True)
        return torch.diag(x, 0).sin().sum()

    from funcbwd.internals import dynamo

    with warnings.catch_warnings(), dynamo.fresh_compiler():  # a cached graph is not handed over
        warnings.simplefilter("ignore")
        with compiled_autograd._enable(compiler):
            loss().backward()
        out = loss()
        with profile(activities=[ProfilerActivity.CPU]) as prof:  # the backward alone
            out.backward()
    targets = [str(getattr(n.target, "__name__", n.target)) for n in graphs[0].graph.nodes
               if n.op == "call_function"] if graphs else []
    nodes = [t for t in targets if "Backward" in t]
    aten_in_graph = [t for t in targets if t.startswith("aten") or "." in t and "aten" in t]
    events = [e.name for e in prof.events() if e.name.startswith("aten::")]
    return {"node_calls": nodes, "aten_calls_in_graph": aten_in_graph,
            "eager_aten_calls": sorted(set(events)),
            "eager_inplace_calls": sorted({e for e in events if e.endswith("_")})}


def proxy_source() -> dict[str, Any]:
    """From the installed torch's own files: the header's note on ``apply_with_saved`` and
    whether the Python side of the proxied call returns dummy tensors."""
    import inspect

    from torch._dynamo.compiled_autograd import AutogradCompilerInstance

    header = (Path(torch.__file__).parent / "include" / "torch" / "csrc" / "dynamo"
              / "compiled_autograd.h")
    note = []
    if header.exists():
        lines = header.read_text().splitlines()
        start = next((i for i, ln in enumerate(lines)
                      if "NOTE: [Compiled Autograd and backward functions]" in ln), None)
        if start is not None:
            note = [ln.strip().lstrip("/").strip() for ln in lines[start:start + 6]]
    src = inspect.getsource(AutogradCompilerInstance.proxy_call)
    return {"header_note": note, "proxy_call_returns_dummies": "allocate_dummy" in src,
            "apply_functional_proxies": "proxy_call" in inspect.getsource(
                AutogradCompilerInstance.apply_functional)}


def node_counts() -> dict[str, int]:
    """In the installed torch's generated ``Functions.h``: the backward Node structs, and how many
    declare ``compiled_args`` (the per-node key) and ``apply_with_saved`` (the traced apply)."""
    header = (Path(torch.__file__).parent / "include" / "torch" / "csrc" / "autograd" / "generated"
              / "Functions.h")
    if not header.exists():
        return {}
    text = header.read_text()
    return {"nodes": text.count("\nstruct TORCH_API "),
            "compiled_args": text.count("void compiled_args(CompiledNodeArgs& args) const override;"),
            "apply_with_saved": text.count("variable_list apply_with_saved(")}


def _outcome(call: Callable[[], Any], first_line: Callable[..., str]) -> str:
    try:
        call()
        return "works"
    except Exception as e:  # noqa: BLE001 - the outcome
        return first_line(f"{type(e).__name__}: {e}", 100)


def load(data_dir: str | Path) -> dict[str, Any] | None:
    return saved.load(data_dir, FILE)


def main(argv: list[str] | None = None) -> int:
    return saved.main(__name__, __doc__, FILE, lambda a: run(), argv)


if __name__ == "__main__":
    raise SystemExit(main())
