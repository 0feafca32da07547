"""Torch bugs the workbench found, written up as upstream bug reports that prove themselves.

A :class:`Finding` is data: a title, the torch version it was first seen on, a minimal repro that
imports nothing but torch, the batching rule at fault (file and function in pytorch/pytorch) and a
family of related cases. Nothing in a report is typed in by hand: :meth:`Finding.check` executes
the repro and every case in a fresh namespace and compares what the transform returned with a
per-sample Python loop. Every source follows one contract: it imports only torch, defines
``looped`` (the per-sample loop, the reference) and then ``batched`` (the transform; it may
raise), and may print.

Two further computed checks tie each report to its cause:

* **explained**: a Python emulation of the batching rule *as written* (``emulate(ns, fixed=False)``
  on a case's namespace) must reproduce what vmap returned (the same tensor, or an error where
  vmap raised);
* **fix**: the same emulation with the proposed one-line fix (``fixed=True``) must equal the
  per-sample loop.

:meth:`Report.markdown` renders the shape of a PyTorch bug report (``## 🐛 Describe the bug``,
repro block, observed, expected, cause, other cases, versions); :meth:`Report.text` the same as
plain text. ``python -m funcbwd findings`` (:mod:`funcbwd.cli.findings`) prints them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import platform
import textwrap
import warnings
from typing import Any, Callable

import torch

from funcbwd import internals
from funcbwd.errors import BadInputError

STATUSES = ("ok", "wrong values", "wrong shape", "raises")
ATOL, RTOL = 1e-6, 1e-5


# ------------------------------------------------------------------------------ data
@dataclasses.dataclass(frozen=True)
class Rule:
    """The batching rule at fault, as a reviewer finds it in pytorch/pytorch."""

    file: str  # path in pytorch/pytorch
    function: str
    op: str  # the dispatcher op (with overload) whose FuncTorchBatched kernel it is
    introduced_by: str  # the upstream PR that added the rule
    flaw: str  # what goes wrong, in prose
    fix: str  # the proposed change, in prose


@dataclasses.dataclass(frozen=True)
class Case:
    """One program of a finding's family; ``params`` feed the finding's ``claim``."""

    label: str
    source: str
    params: dict
    emulable: bool = True  # whether the namespace carries what ``emulate`` reads


@dataclasses.dataclass(frozen=True)
class Finding:
    key: str
    title: str
    torch_seen: str
    summary: str  # the bug in two or three sentences, for the report
    repro: str  # the main case: the smallest program that shows it
    repro_params: dict
    rule: Rule
    claim_text: str  # which cases are affected, in prose; ``claim`` says it as code
    claim: Callable[[dict], bool]
    cases: Callable[[], tuple[Case, ...]]
    emulate: Callable[[dict, bool], torch.Tensor]

    def main_case(self) -> Case:
        return Case("the repro above", self.repro, self.repro_params)

    def check(self, with_cases: bool = True) -> "Report":
        """Run the repro (and the cases) now, on this torch."""
        results = [CaseResult.of(self, c) for c in ((self.main_case(),) + (self.cases() if with_cases else ()))]
        return Report(self, results[0], tuple(results[1:]), internals.batching_kernel_source(self.rule.op),
                      versions())


@dataclasses.dataclass(frozen=True)
class Outcome:
    """What one program did: ``status`` is ``ok`` when ``batched`` equals ``looped``."""

    status: str
    observed: str  # the transform's result, or the error it raised
    expected: str  # the per-sample loop's result
    printed: str
    namespace: dict = dataclasses.field(repr=False, compare=False)

    @property
    def bug(self) -> bool:
        return self.status != "ok"

    @property
    def batched(self) -> torch.Tensor | None:
        return self.namespace.get("batched")


def run(source: str, label: str = "repro") -> Outcome:
    """Execute ``source`` in a fresh namespace (stdout captured, warnings silenced) and compare
    its ``batched`` with its ``looped``. A source that breaks the contract (no ``looped``, or no
    ``batched`` without an error) is a :class:`funcbwd.errors.BadInputError`."""
    ns: dict[str, Any] = {"__name__": "__repro__"}
    out = io.StringIO()
    error = None
    with contextlib.redirect_stdout(out), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            exec(compile(source, "<repro>", "exec"), ns)
        except Exception as e:  # noqa: BLE001 - the error is the observation
            error = f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"
    looped = ns.get("looped")
    if not isinstance(looped, torch.Tensor):
        raise BadInputError(
            f"{label}: a repro must define `looped` (the per-sample loop) as a tensor before `batched`"
            + (f"; it raised first: {error}" if error else ""))
    if error is not None:
        return Outcome("raises", error, _show(looped), out.getvalue(), ns)
    batched = ns.get("batched")
    if not isinstance(batched, torch.Tensor):
        raise BadInputError(f"{label}: a repro must define `batched` (the transform's result) as a tensor")
    return Outcome(compare(batched, looped), _show(batched), _show(looped), out.getvalue(), ns)


def compare(got: torch.Tensor, want: torch.Tensor) -> str:
    if got.shape != want.shape:
        return "wrong shape"
    return "ok" if torch.allclose(got, want, atol=ATOL, rtol=RTOL) else "wrong values"


def _show(t: torch.Tensor) -> str:
    return f"{t}  # shape {tuple(t.shape)}"


@dataclasses.dataclass(frozen=True)
class CaseResult:
    case: Case
    outcome: Outcome
    claimed_bug: bool
    explained: bool | None  # the rule as written reproduces vmap's result (None: not emulable)
    fix_works: bool | None  # the fixed rule equals the per-sample loop

    @classmethod
    def of(cls, finding: Finding, case: Case) -> "CaseResult":
        outcome = run(case.source, case.label)
        explained = fix_works = None
        if case.emulable:
            as_written = _attempt(finding.emulate, outcome.namespace, False)
            explained = (outcome.status == "raises") if as_written is None else (
                outcome.batched is not None and compare(as_written, outcome.batched) == "ok")
            fixed = _attempt(finding.emulate, outcome.namespace, True)
            fix_works = fixed is not None and compare(fixed, outcome.namespace["looped"]) == "ok"
        return cls(case, outcome, finding.claim(case.params), explained, fix_works)


def _attempt(fn: Callable, *args) -> torch.Tensor | None:
    """The emulation's result, or None where the rule it emulates would raise."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return fn(*args)
        except RuntimeError:
            return None


def versions() -> dict[str, str]:
    return {"torch": torch.__version__, "python": platform.python_version(),
            "os": platform.platform(), "cuda": str(torch.version.cuda)}


# ------------------------------------------------------------------------------ rendering
@dataclasses.dataclass(frozen=True)
class Report:
    finding: Finding
    main: CaseResult
    cases: tuple[CaseResult, ...]
    registered_at: str | None  # where this torch build registered the rule
    env: dict[str, str]

    @property
    def reproduces(self) -> bool:
        return self.main.outcome.bug

    def _cause(self) -> str:
        r = self.finding.rule
        where = (f" (this build registers it at `{self.registered_at}`)" if self.registered_at
                 else " (this build has no FuncTorchBatched kernel for it)")
        return (f"The batching rule at fault is `{r.function}` in `{r.file}`, the FuncTorchBatched "
                f"kernel of `{r.op}`{where}, added in {r.introduced_by}. {r.flaw}\n\n"
                f"Suggested fix: {r.fix}")

    def _explained_line(self) -> str:
        rows = [c for c in (self.main,) + self.cases if c.explained is not None]
        return (f"A Python emulation of the rule as written reproduces vmap's result in "
                f"{sum(c.explained for c in rows)} of {len(rows)} cases; with the suggested fix it "
                f"matches the per-sample loop in {sum(c.fix_works for c in rows)} of {len(rows)}.")

    def markdown(self) -> str:
        f, o = self.finding, self.main.outcome
        parts = [f"# {f.title}", "", "## 🐛 Describe the bug", "", f.summary, "",
                 "```python", f.repro.rstrip(), "```", "",
                 f"Observed (torch {self.env['torch']}): **{o.status}**", "", "```", o.observed, "```", "",
                 "Expected (the same calls in a per-sample Python loop):", "", "```", o.expected, "```", "",
                 "### Cause", "", self._cause(), "", f"Affected: {f.claim_text}", ""]
        if self.cases:
            parts += ["### Other cases checked", "", self._explained_line(), "",
                      "| case | vmap vs per-sample loop | emulated rule explains it | fix works |",
                      "|---|---|---|---|"]
            for c in self.cases:
                status = c.outcome.status + (f" ({_clip(c.outcome.observed)})" if c.outcome.status == "raises" else "")
                parts.append(f"| {c.case.label} | {status} | {_yn(c.explained)} | {_yn(c.fix_works)} |")
            parts.append("")
        parts += ["### Versions", "", "```"] + [f"{k}: {v}" for k, v in self.env.items()] + ["```", ""]
        if not self.reproduces:
            parts.insert(2, f"> **No longer reproduces on torch {self.env['torch']}** (first seen on "
                            f"{f.torch_seen}).\n")
        return "\n".join(parts)

    def text(self) -> str:
        f, o = self.finding, self.main.outcome
        wrap = lambda s: textwrap.fill(s, 100)  # noqa: E731
        ind = lambda s: textwrap.indent(s.rstrip(), "    ")  # noqa: E731
        lines = [f.title, "=" * len(f.title),
                 f"first seen on torch {f.torch_seen}; this run: torch {self.env['torch']}, "
                 + ("REPRODUCES" if self.reproduces else "NO LONGER REPRODUCES"), "",
                 wrap(f.summary), "", "Repro:", ind(f.repro), "",
                 f"Observed: {o.status}", ind(o.observed), "", "Expected (per-sample loop):", ind(o.expected),
                 "", wrap(self._cause().replace("`", "")), "", wrap("Affected: " + f.claim_text)]
        if self.cases:
            lines += ["", wrap(self._explained_line()), ""]
            width = max(len(c.case.label) for c in self.cases)
            for c in self.cases:
                lines.append(f"  {c.case.label:<{width}}  {c.outcome.status:<12}  explained: "
                             f"{_yn(c.explained):<3}  fix: {_yn(c.fix_works)}")
        lines += ["", "Versions: " + ", ".join(f"{k} {v}" for k, v in self.env.items())]
        return "\n".join(lines)

    def to_dict(self) -> dict:
        row = lambda c: {"label": c.case.label, "status": c.outcome.status, "observed": c.outcome.observed,  # noqa: E731
                         "expected": c.outcome.expected, "claimed_bug": c.claimed_bug,
                         "explained": c.explained, "fix_works": c.fix_works}
        return {"key": self.finding.key, "title": self.finding.title, "torch_seen": self.finding.torch_seen,
                "reproduces": self.reproduces, "repro": self.finding.repro,
                "rule": dataclasses.asdict(self.finding.rule), "registered_at": self.registered_at,
                "main": row(self.main), "cases": [row(c) for c in self.cases], "versions": self.env}


def _yn(v: bool | None) -> str:
    return "-" if v is None else ("yes" if v else "no")


def _clip(s: str, n: int = 70) -> str:
    s = s.replace("|", "\\|")
    return s if len(s) <= n else s[: n - 3] + "..."


# ------------------------------------------------------------------------------ helpers for emulation
def _sum_to(physical: torch.Tensor, shape: torch.Size) -> torch.Tensor:
    """Autograd's ``sum_to`` (the engine reduces a broadcast gradient to the input's shape), applied
    per batch entry to a tensor whose dim 0 is the batch dim."""
    logical = physical.shape[1:]
    if len(logical) < len(shape) or any(s not in (1, l) for s, l in zip(reversed(shape), reversed(logical))):
        raise RuntimeError(f"invalid gradient: got {list(logical)}, expected shape compatible with {list(shape)}")
    lead = len(logical) - len(shape)
    dims = list(range(lead)) + [lead + i for i, s in enumerate(shape) if s == 1 and logical[lead + i] != 1]
    out = physical.sum([d + 1 for d in dims], keepdim=True) if dims else physical
    return out.reshape(physical.shape[0], *shape)


# ------------------------------------------------------------------------------ finding 1: masked_select
MASKED_SELECT_REPRO = '''\
import torch
from torch.func import vjp, vmap

x = torch.tensor([1.0, 2.0, 3.0, 4.0])  # shape (4,), broadcast against the (3, 4) mask
mask = torch.tensor([[True, False, True, True],
                     [False, True, False, False],
                     [True, True, False, True]])
_, vjp_fn = vjp(lambda t: torch.masked_select(t, mask), x)
# a batch of 3 cotangents (3 == mask.shape[0]); entry b is 100 * (b + 1) + [0, 1, ..., 6]
cotangents = 100 * torch.arange(1.0, 4.0)[:, None] + torch.arange(7.0)
looped = torch.stack([vjp_fn(c)[0] for c in cotangents])  # per-sample loop: the reference
batched = vmap(vjp_fn)(cotangents)[0]
print("vmap:", batched, "per-sample loop:", looped, sep="\\n")
'''


def _masked_select_case(x_shape: tuple, mask_shape: tuple, batch: int, kind: str = "vjp",
                        mask_expr: str | None = None) -> Case:
    """kind: vjp (only cotangents batched), x_batched (input too), expand (explicit x.expand to
    the broadcast shape), jacrev (the Jacobian; batch = number of outputs)."""
    xn = 1
    for s in x_shape:
        xn *= s
    rank = len(torch.broadcast_shapes(x_shape, mask_shape))
    head = ("import torch\nfrom torch.func import jacrev, vjp, vmap\n\n"
            f"x = torch.arange(1.0, {xn + 1}.0).reshape({tuple(x_shape)})\n"
            + (f"mask = {mask_expr}\n" if mask_expr else
               f"mask = torch.arange({_numel(mask_shape)}).reshape({tuple(mask_shape)}) % 3 != 1\n"))
    fwd = ("expand_to = torch.broadcast_shapes(x.shape, mask.shape)\n"
           "f = lambda t: torch.masked_select(t.expand(expand_to), mask)\n"
           if kind == "expand" else "f = lambda t: torch.masked_select(t, mask)\n") + "n = f(x).numel()\n"
    if kind == "jacrev":
        body = ("cotangents = torch.eye(n)  # jacrev's batch: one basis cotangent per output\n"
                "looped = torch.stack([vjp(f, x)[1](c)[0] for c in cotangents])\n"
                "batched = jacrev(f)(x)\n")
        batch = None
        label = f"jacrev, x {tuple(x_shape)}, mask {mask_expr.replace('torch.', '') if mask_expr else tuple(mask_shape)}"
    else:
        body = f"cotangents = 100 * torch.arange(1.0, {batch + 1}.0)[:, None] + torch.arange(float(n))\n"
        if kind == "x_batched":
            body += ("xs = torch.stack([x + 10 * b for b in range(len(cotangents))])\n"
                     "per_sample = lambda xi, c: vjp(f, xi)[1](c)[0]\n"
                     "looped = torch.stack([per_sample(xi, c) for xi, c in zip(xs, cotangents)])\n"
                     "batched = vmap(per_sample)(xs, cotangents)\n")
        else:
            body += ("_, vjp_fn = vjp(f, x)\n"
                     "looped = torch.stack([vjp_fn(c)[0] for c in cotangents])\n"
                     "batched = vmap(vjp_fn)(cotangents)[0]\n")
        what = {"vjp": "vmap(vjp_fn)", "x_batched": "vmap over x and cotangents",
                "expand": "vmap(vjp_fn), x.expand explicit"}[kind]
        label = f"{what}, x {tuple(x_shape)}, mask {tuple(mask_shape)}, batch {batch}"
    params = {"x_shape": tuple(x_shape), "mask_shape": tuple(mask_shape), "batch": batch, "kind": kind,
              "rank": rank}
    return Case(label, head + fwd + body, params)


def _numel(shape: tuple) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def _masked_select_cases() -> tuple[Case, ...]:
    m = _masked_select_case
    return (
        m((4,), (3, 4), 1), m((4,), (3, 4), 2), m((4,), (3, 4), 5),
        m((4,), (5, 4), 3), m((4,), (5, 4), 5),
        m((), (3, 4), 3), m((), (3, 4), 4),
        m((1,), (3, 4), 3),
        m((4,), (2, 3, 4), 2), m((4,), (2, 3, 4), 3),
        m((3, 4), (2, 3, 4), 2),
        m((4,), (1, 4), 3),
        m((1, 4), (3, 4), 3), m((3, 1), (3, 4), 3), m((3, 4), (3, 4), 3), m((3, 4), (4,), 3),
        m((4,), (3, 4), 3, "expand"), m((4,), (3, 4), 2, "expand"),
        m((4,), (3, 4), 3, "x_batched"), m((4,), (2, 3, 4), 2, "x_batched"),
        m((4,), (3, 4), 0, "jacrev"),  # 8 outputs, the batch dim meets mask.shape[0] == 3: raises
        m((4,), (3, 4), 0, "jacrev", "torch.eye(3, 4, dtype=torch.bool)"),  # 3 outputs: silently wrong
        m((4,), (3, 1), 0, "jacrev"),  # 8 outputs of the (3, 4) broadcast
        m((1, 4), (3, 4), 0, "jacrev"),  # same rank: right
    )


def _masked_select_claim(p: dict) -> bool:
    """Affected iff the input is not batched and has fewer dims than the mask, except when the
    mask's one extra leading dim has size 1 (then the misplaced batch dim broadcasts harmlessly)."""
    x, mask = p["x_shape"], p["mask_shape"]
    if p["kind"] in ("x_batched", "expand") or len(x) >= len(mask):
        return False
    return not (len(mask) == len(x) + 1 and mask[0] == 1)


def _emulate_masked_select(ns: dict, fixed: bool) -> torch.Tensor:
    """``masked_select_backward_batch_rule`` on the physical tensors, then autograd's sum_to.

    As written, ``maybePadToLogicalRank(self_, self_bdim, ...)`` pads only a tensor that already
    has a batch dim; an unbatched input then gets its batch dim from ``ensure_has_bdim`` *without*
    the padding, so the batch dim lines up with a mask dim. The fix pads after adding it."""
    mask, grad = ns["mask"], ns["cotangents"]
    x_batched = "xs" in ns
    x = ns["x"]
    # what masked_select saw: x, or x expanded explicitly (the "expand" cases)
    seen = x.expand(ns["expand_to"]) if "expand_to" in ns else x
    self_ = ns["xs"] if x_batched else seen
    logical_rank = max(seen.dim(), mask.dim())
    if x_batched or fixed:  # maybePadToLogicalRank: pads only when the tensor has a batch dim
        self_ = self_.reshape(self_.shape[:1] + (1,) * (logical_rank - seen.dim()) + self_.shape[1:]) \
            if x_batched else self_.reshape((1,) * (logical_rank - seen.dim()) + self_.shape)
    if not x_batched:
        self_ = self_.expand(grad.shape[0], *self_.shape)  # ensure_has_bdim
    shape = torch.broadcast_shapes(self_.shape, mask.shape)  # at::infer_size inside the formula
    result = torch.zeros(shape).masked_scatter(mask, grad)  # masked_select_backward on physical tensors
    return _sum_to(_sum_to(result, seen.shape), x.shape)  # autograd: to what was seen, then expand's backward


MASKED_SELECT = Finding(
    key="masked_select_broadcast",
    title="vmap(vjp) of torch.masked_select is wrong or raises when the input is broadcast to the mask",
    torch_seen="2.13.0",
    summary=("When the input of `torch.masked_select` has fewer dimensions than the mask (implicit "
             "broadcasting), `vmap` over its `vjp` (and so `jacrev`) is wrong. For an input with one "
             "dim fewer than the mask: with a batch size equal to `mask.shape[0]` the gradients are "
             "silently wrong, with batch size 1 the result has `mask.shape[0]` entries, and any "
             "other batch size raises a shape error. (In general the batch dim lands on mask dim "
             "`mask.dim() - x.dim() - 1`.) Expanding the input explicitly (`x.expand(mask.shape)`) "
             "or batching the input as well gives the right answer."),
    repro=MASKED_SELECT_REPRO,
    repro_params={"x_shape": (4,), "mask_shape": (3, 4), "batch": 3, "kind": "vjp", "rank": 2},
    rule=Rule(
        file="aten/src/ATen/functorch/BatchRulesBinaryOps.cpp",
        function="masked_select_backward_batch_rule",
        op="aten::masked_select_backward",
        introduced_by="pytorch/functorch#736",
        flaw=("It pads `self` to the mask's rank with `maybePadToLogicalRank(self_, self_bdim, "
              "max_logical_rank)` *before* `ensure_has_bdim` gives an unbatched `self` its batch "
              "dim; `maybePadToLogicalRank` returns a tensor without a batch dim unchanged "
              "(BatchRulesHelper.cpp), so `self_` becomes `(B, 4)` instead of `(B, 1, 4)` and "
              "`at::masked_select_backward` broadcasts the batch dim against the mask's first dim: "
              "`infer_size((B, 4), (3, 4))` raises unless B is 1 or 3, and when it does not raise the "
              "result's dim 0 (taken as the batch dim) is the mask's rows."),
        fix=("call `ensure_has_bdim` first and then `maybePadToLogicalRank(self_, /*has_bdim=*/0, "
             "max_logical_rank)`, so an unbatched input is padded like a batched one."),
    ),
    claim_text=("the input is not batched (only the cotangents are, as in `vmap(vjp_fn)` and "
                "`jacrev`) and has fewer dims than the mask; the exception is a mask with exactly "
                "one extra leading dim of size 1. The batch size decides the symptom: a batch "
                "size that broadcasts with the mask dim the batch dim lands on (1, or that dim's "
                "size) gives a silently wrong result (values or batch size); any other raises a "
                "RuntimeError."),
    claim=_masked_select_claim,
    cases=_masked_select_cases,
    emulate=_emulate_masked_select,
)


# ------------------------------------------------------------------------------ finding 2: index_fill
INDEX_FILL_REPRO = '''\
import torch
from torch.func import vmap

x = torch.zeros(5)  # not batched
dim, index = 0, torch.tensor([0, 3])
values = torch.tensor([1.0, 2.0, 3.0])  # a batch of 0-dim fill values
f = lambda v: x.index_fill(dim, index, v)
looped = torch.stack([f(v) for v in values])  # per-sample loop: the reference
batched = vmap(f)(values)  # every row is filled with 3.0, the last value
print("vmap:", batched, "per-sample loop:", looped, sep="\\n")
'''


def _index_fill_case(x_expr: str, dim: int, index_expr: str, batch: int = 3, kind: str = "value") -> Case:
    """kind: value (only the 0-dim value batched), self (self and value), index (index and
    value), index_only (index batched, value an unbatched 0-dim tensor), jacfwd (value computed
    from the input of jacfwd)."""
    head = ("import torch\nfrom torch.func import jacfwd, jvp, vmap\n\n"
            f"x = {x_expr}\ndim, index = {dim}, {index_expr}\n"
            f"values = torch.arange(1.0, {batch + 1}.0)\n")
    bodies = {
        "value": ("f = lambda v: x.index_fill(dim, index, v)\n"
                  "looped = torch.stack([f(v) for v in values])\nbatched = vmap(f)(values)\n"),
        "self": ("xs = torch.stack([x - b for b in range(len(values))])\n"
                 "f = lambda s, v: s.index_fill(dim, index, v)\n"
                 "looped = torch.stack([f(s, v) for s, v in zip(xs, values)])\nbatched = vmap(f)(xs, values)\n"),
        "index": ("indices = torch.stack([index.roll(b) for b in range(len(values))])\n"
                  "f = lambda i, v: x.index_fill(dim, i, v)\n"
                  "looped = torch.stack([f(i, v) for i, v in zip(indices, values)])\n"
                  "batched = vmap(f)(indices, values)\n"),
        "index_only": ("indices = torch.stack([index.roll(b) for b in range(len(values))])\n"
                       "value = torch.tensor(7.0)\nf = lambda i: x.index_fill(dim, i, value)\n"
                       "looped = torch.stack([f(i) for i in indices])\nbatched = vmap(f)(indices)\n"),
        "jacfwd": ("w = values  # f(v) = x.index_fill(dim, index, v @ w): d/dv of the fill value is w\n"
                   "f = lambda v: x.index_fill(dim, index, v @ w)\nv = torch.ones(len(w))\n"
                   "looped = torch.stack([jvp(f, (v,), (e,))[1] for e in torch.eye(len(w))], dim=-1)\n"
                   "batched = jacfwd(f)(v)\n"),
    }
    what = {"value": "value batched", "self": "self and value batched", "index": "index and value batched",
            "index_only": "index batched, value unbatched tensor", "jacfwd": "jacfwd, fill value v @ w"}[kind]
    shown_index = index_expr.replace("torch.tensor(", "")[:-1]
    label = f"{what}: {x_expr.replace('torch.', '')}, dim={dim}, index {shown_index}, batch {batch}"
    params = {"kind": kind, "batch": batch, "dim": dim}
    # emulated: the per-entry loop path (batched value); not the jacfwd case (its vmap runs inside
    # the jvp formula) nor the unbatched-value case (the rule's other path, an index arithmetic)
    return Case(label, head + bodies[kind], params, emulable=kind not in ("jacfwd", "index_only"))


def _index_fill_cases() -> tuple[Case, ...]:
    c, i2 = _index_fill_case, "torch.tensor([0, 3])"
    return (
        c("torch.zeros(5)", 0, i2, batch=1), c("torch.zeros(5)", 0, i2, batch=2),
        c("torch.zeros(5)", -1, i2), c("torch.zeros(5)", 0, "torch.tensor([2])"),
        c("torch.zeros(5)", 0, "torch.tensor(2)"),
        c("torch.zeros(4, 5)", 1, i2), c("torch.zeros(4, 5)", 0, "torch.tensor([0, 2])"),
        c("torch.zeros(4, 5)", -1, i2), c("torch.zeros(2, 3, 5)", 2, i2),
        c("torch.zeros(2, 3, 5)", 1, "torch.tensor([0, 2])"), c("torch.zeros(())", 0, "torch.tensor([0])"),
        c("torch.ones(5)", 0, i2, kind="self"), c("torch.ones(4, 5)", 1, i2, kind="self"),
        c("torch.zeros(5)", 0, i2, kind="index"), c("torch.zeros(5)", 0, i2, kind="index_only"),
        c("torch.zeros(5)", 0, i2, kind="jacfwd"),
    )


def _index_fill_claim(p: dict) -> bool:
    """Affected iff self is not batched, the 0-dim value is, and the batch has more than one entry."""
    return p["kind"] in ("value", "index", "jacfwd") and p["batch"] > 1


def _emulate_index_fill(ns: dict, fixed: bool) -> torch.Tensor:
    """``index_fill_int_tensor_batch_rule(_impl)`` with a batched value: ``ensure_has_bdim``
    expands an unbatched self (every batch entry is the same memory), then a per-entry loop
    fills each ``select(0, i)`` in place, so the last entry's value wins everywhere. The fix
    materializes the expanded self (``clone``) before the loop, as the non-loop path already does."""
    dim, values = ns["dim"], ns["values"]
    batch = values.shape[0]
    if "xs" in ns:
        self_ = ns["xs"].clone()
    else:
        self_ = ns["x"].clone().expand(batch, *ns["x"].shape)  # clone, then ensure_has_bdim
        if fixed:
            self_ = self_.clone()
    index_ = ns["indices"] if "indices" in ns else ns["index"].expand(batch, *ns["index"].shape)
    for i in range(batch):
        self_.select(0, i).index_fill_(dim, index_.select(0, i), values.select(0, i))
    return self_


INDEX_FILL = Finding(
    key="index_fill_batched_value",
    title="vmap of index_fill with an unbatched self and a batched 0-dim value fills every entry with the last value",
    torch_seen="2.13.0",
    summary=("`vmap(lambda v: x.index_fill(dim, index, v))(values)`, where `x` is not batched and "
             "the 0-dim fill value `v` is, returns a result in which every batch entry is filled "
             "with the *last* value, with no error or warning. It is the same for every `dim`, "
             "self rank (0-d included) and index shape, and also when the index is batched; "
             "`jacfwd` of a function that fills with a computed value is silently wrong for the "
             "same reason. A batched `self` gives the right answer."),
    repro=INDEX_FILL_REPRO,
    repro_params={"kind": "value", "batch": 3, "dim": 0},
    rule=Rule(
        file="aten/src/ATen/functorch/BatchRulesScatterOps.cpp",
        function="index_fill_int_tensor_batch_rule_impl (via index_fill_int_tensor_batch_rule)",
        op="aten::index_fill.int_Tensor",
        introduced_by="pytorch/pytorch#91364",
        flaw=("With a batched `value` it takes the per-entry loop path: `self_ = ensure_has_bdim(self_, "
              "self_bdim.has_value(), batch_size)` turns an unbatched `self` into an *expanded* view "
              "(batch stride 0, every entry the same memory), and the loop then calls "
              "`self_.select(0, i).index_fill_(dim, index_.select(0, i), value_.select(0, i))`, each "
              "iteration overwriting the same storage, so the last value wins for all entries. The "
              "non-loop path clones the expanded self (`self_bdim.has_value() ? self_ : "
              "self_.clone()`), but only after the loop branch has returned."),
        fix=("move `self_ = self_bdim.has_value() ? self_ : self_.clone();` above the "
             "`if (inplace || value_bdim.has_value())` loop (the in-place variant already errors "
             "earlier for an unbatched self, so only the out-of-place path is affected)."),
    ),
    claim_text=("self not batched and the 0-dim value batched (index batched or not), batch size "
                "above 1; with a batched self, or an unbatched value, the result is right."),
    claim=_index_fill_claim,
    cases=_index_fill_cases,
    emulate=_emulate_index_fill,
)

FINDINGS: tuple[Finding, ...] = (MASKED_SELECT, INDEX_FILL)


def finding_keys() -> list[str]:
    return [f.key for f in FINDINGS]


def get_finding(key: str) -> Finding:
    for f in FINDINGS:
        if f.key == key:
            return f
    raise BadInputError(f"unknown finding {key!r}; valid findings: {', '.join(finding_keys())}")


__all__ = ["Finding", "Rule", "Case", "Outcome", "CaseResult", "Report", "FINDINGS", "run", "compare",
           "finding_keys", "get_finding", "versions"]
