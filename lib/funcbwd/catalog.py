"""The op catalog: one :class:`OpSpec` per op, tying the modern torch op to its legacy formula.

Adding a formula is one call to :func:`register` (see README, "Adding a formula"): the matrix,
traces, graphs, bench and notebooks iterate over the catalog and pick it up.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Sequence

import torch

from . import formulas as L
from .errors import BadInputError, UnknownNameError

Args = tuple[Any, ...]


@dataclasses.dataclass(frozen=True)
class Sample:
    """One call of an op: positional ``args`` (tensors and Python values); ``diff`` lists the
    positions of differentiable tensor args."""

    name: str
    args: Args
    diff: tuple[int, ...] = (0,)

    def tensor_positions(self) -> list[int]:
        return [i for i, a in enumerate(self.args) if isinstance(a, torch.Tensor)]

    def nondiff_tensor_positions(self) -> list[int]:
        return [i for i in self.tensor_positions() if i not in self.diff]


@dataclasses.dataclass(frozen=True)
class OpSpec:
    """One op: the modern torch op, its legacy in-place backward formula, and samples.

    ``formula_args(args, outputs, grads)`` builds the formula's arguments from the forward's
    positional args, its outputs and the incoming grads (one per differentiable output);
    the formula returns one grad (or a tuple) for the args at ``grad_positions``.
    """

    name: str
    torch_op: Callable[..., Any]
    formula: Callable[..., Any]
    formula_args: Callable[[Args, tuple, tuple], Args]
    grad_positions: tuple[int, ...]
    source: str
    fixed_by: str
    make_samples: Callable[[], list[Sample]]
    schema: str
    diff_outputs: tuple[int, ...] = (0,)
    jvp: Callable[[Args, tuple, tuple], tuple] | None = None
    group: str = "test"  # "test" (the 8 ops of functorch#241), "extended", "negative_control", "live"
    notes: str = ""
    #: The modern out-of-place formula (as core has it today), same signature as ``formula``:
    #: the ``handfixed`` reference strategy runs it through the same machinery.
    handfixed: Callable[..., Any] | None = None
    #: "backward" (``formula`` is a vjp formula) or "jvp" (``formula`` is a forward-mode formula:
    #: ``formula_args(args, outputs, tangents)`` builds its args, it returns the output tangents).
    kind: str = "backward"

    def samples(self) -> list[Sample]:
        return self.make_samples()

    def sample(self, name: str | None = None) -> Sample:
        samples = self.samples()
        if name is None:
            return samples[0]
        for s in samples:
            if s.name == name:
                return s
        raise UnknownNameError("sample", name, [s.name for s in samples], of=self.name)

    def outputs_tuple(self, out: Any) -> tuple:
        return tuple(out) if isinstance(out, (tuple, list)) else (out,)

    def diff_out(self, out: Any) -> tuple[torch.Tensor, ...]:
        """The differentiable outputs only (e.g. topk's values, not its indices)."""
        outs = self.outputs_tuple(out)
        return tuple(outs[i] for i in self.diff_outputs)


def validate_sample(spec: OpSpec, sample: Sample) -> None:
    """Reject a sample the scenarios cannot run meaningfully, naming the problem.

    Differentiable args must be real floating-point tensors (the formulas and the loop reference
    are real-valued), and the op's own forward must accept the args (wrong shapes are caught
    here, with torch's message, instead of surfacing as a failed cell)."""
    import torch

    if not isinstance(sample, Sample):
        raise BadInputError(f"sample must be a funcbwd.catalog.Sample, got {type(sample).__name__}")
    if not sample.diff:
        raise BadInputError(f"sample {sample.name!r} of {spec.name} has no differentiable arg (diff=())")
    for p in sample.diff:
        a = sample.args[p] if p < len(sample.args) else None
        if not isinstance(a, torch.Tensor):
            raise BadInputError(f"{spec.name}: differentiable arg {p} must be a tensor, got "
                                f"{type(a).__name__}")
        if a.is_complex() or not a.is_floating_point():
            raise BadInputError(f"{spec.name}: differentiable arg {p} has dtype {a.dtype}; use "
                                "float32 or float64 (integer and complex inputs are not supported)")
    try:
        with torch.no_grad():
            spec.torch_op(*sample.args)
    except (RuntimeError, TypeError, IndexError, ValueError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise BadInputError(f"sample {sample.name!r} is not valid input for {spec.name}: {first}") from e


_REGISTRY: dict[str, OpSpec] = {}


def register(spec: OpSpec) -> OpSpec:
    if spec.name in _REGISTRY:
        raise ValueError(f"op {spec.name!r} is already registered")
    _REGISTRY[spec.name] = spec
    return spec


def get_op(name: str) -> OpSpec:
    _load_extended()
    if not isinstance(name, str) or name not in _REGISTRY:
        raise UnknownNameError("op", name, _REGISTRY)
    return _REGISTRY[name]


def op_names(group: str | None = None) -> list[str]:
    _load_extended()
    return [n for n, s in _REGISTRY.items() if group is None or s.group == group]


def all_ops(group: str | None = None) -> list[OpSpec]:
    return [_REGISTRY[n] for n in op_names(group)]


TEST_OPS = ("masked_select", "clamp", "diag", "index_select", "topk", "prod", "mode", "sort")


def _load_extended() -> None:
    # The extended corpus (funcbwd.corpus) registers itself on import.
    from . import corpus  # noqa: F401


# ------------------------------------------------------------------------------ sample helpers
def randn(*shape: int, seed: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g, dtype=dtype)


def shape(t: torch.Tensor) -> list[int]:
    return list(t.shape)


def _gather_tangent(t: torch.Tensor, dim: int, indices: torch.Tensor, keepdim: bool) -> torch.Tensor:
    if t.dim() == 0:
        return t
    if not keepdim:
        return t.gather(dim, indices.unsqueeze(dim)).squeeze(dim)
    return t.gather(dim, indices)


def _zero_if_none(t: torch.Tensor | None, like: torch.Tensor) -> torch.Tensor:
    return torch.zeros_like(like) if t is None else t


# ------------------------------------------------------------------------------ the 8 test ops
register(OpSpec(
    name="diag",
    torch_op=torch.diag,
    formula=L.diag_backward,
    formula_args=lambda a, o, g: (g[0], shape(a[0]), a[1]),
    grad_positions=(0,),
    source="TensorShape.cpp diag_backward: zeros(input_sizes).diagonal(diagonal).copy_(grad)",
    fixed_by="functorch diagonal_backward batch rule; core pytorch#87180",
    schema="(Tensor grad, SymInt[] input_sizes, int diagonal) -> Tensor",
    make_samples=lambda: [
        Sample("3x5 k=0", (randn(3, 5, seed=1), 0)),
        Sample("3x5 k=1", (randn(3, 5, seed=2), 1)),
        Sample("5x3 k=-1", (randn(5, 3, seed=3), -1)),
        Sample("vector k=0", (randn(4, seed=4), 0)),
        Sample("vector k=1", (randn(3, seed=5), 1)),
        Sample("square 3x3 k=0", (randn(3, 3, seed=6), 0)),
    ],
    jvp=lambda a, o, t: (torch.diag(_zero_if_none(t[0], a[0]), a[1]),),
    notes="Only the non-square matrix branch writes in place; 1-D and square inputs use grad.diag().",
))

register(OpSpec(
    name="index_select",
    torch_op=torch.index_select,
    formula=L.index_select_backward,
    formula_args=lambda a, o, g: (g[0], shape(a[0]), a[1], a[2]),
    grad_positions=(0,),
    source="TensorAdvancedIndexing.cpp index_select_backward: zeros(self_sizes).index_add_(dim, index, grad)",
    fixed_by="core pytorch#77578",
    schema="(Tensor grad, SymInt[] self_sizes, int dim, Tensor index) -> Tensor",
    make_samples=lambda: [
        Sample("dim0 repeated", (randn(4, 3, seed=11), 0, torch.tensor([0, 2, 2, 1, 0]))),
        Sample("dim1 repeated", (randn(4, 3, seed=12), 1, torch.tensor([2, 2, 0]))),
    ],
    jvp=lambda a, o, t: (torch.index_select(_zero_if_none(t[0], a[0]), a[1], a[2]),),
))


register(OpSpec(
    name="topk",
    torch_op=lambda x, k, dim=-1, largest=True, sorted=True: tuple(torch.topk(x, k, dim, largest, sorted)),
    formula=L.value_selecting_reduction_backward,
    formula_args=lambda a, o, g: (g[0], a[2], o[1], shape(a[0]), True),
    grad_positions=(0,),
    source="ReduceOps.cpp value_selecting_reduction_backward (keepdim=true): zeros(sizes).scatter_(dim, indices, grad)",
    fixed_by="functorch f7ad909b; core pytorch#76731",
    schema="(Tensor grad, int dim, Tensor indices, SymInt[] sizes, bool keepdim) -> Tensor",
    make_samples=lambda: [
        Sample("k=2 dim=-1 largest", (randn(4, 5, seed=21), 2, -1, True, True)),
        Sample("k=2 dim=-1 smallest", (randn(4, 5, seed=22), 2, -1, False, True)),
        Sample("k=3 dim=0 largest", (randn(4, 5, seed=23), 3, 0, True, True)),
    ],
    jvp=lambda a, o, t: (_gather_tangent(_zero_if_none(t[0], a[0]), a[2], o[1], True), None),
))

register(OpSpec(
    name="sort",
    torch_op=lambda x, dim=-1, descending=False: tuple(torch.sort(x, dim=dim, descending=descending)),
    formula=L.value_selecting_reduction_backward,
    formula_args=lambda a, o, g: (g[0], a[1], o[1], shape(a[0]), True),
    grad_positions=(0,),
    source="ReduceOps.cpp value_selecting_reduction_backward (keepdim=true): zeros(sizes).scatter_(dim, indices, grad)",
    fixed_by="functorch f7ad909b; core pytorch#76731",
    schema="(Tensor grad, int dim, Tensor indices, SymInt[] sizes, bool keepdim) -> Tensor",
    make_samples=lambda: [
        Sample("dim=0 ascending", (randn(4, 5, seed=31), 0, False)),
        Sample("dim=0 descending", (randn(4, 5, seed=32), 0, True)),
        Sample("dim=-1 ascending", (randn(4, 5, seed=33), -1, False)),
        Sample("dim=-1 descending", (randn(4, 5, seed=34), -1, True)),
    ],
    jvp=lambda a, o, t: (_gather_tangent(_zero_if_none(t[0], a[0]), a[1], o[1], True), None),
))


def _mode_input(seed: int) -> torch.Tensor:
    # Small integer values so every row has a repeated value (a real mode) and ties.
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 3, (4, 5), generator=g).float()


register(OpSpec(
    name="mode",
    torch_op=lambda x, dim=-1, keepdim=False: tuple(torch.mode(x, dim, keepdim)),
    formula=L.value_selecting_reduction_backward,
    formula_args=lambda a, o, g: (g[0], a[1], o[1], shape(a[0]), a[2]),
    grad_positions=(0,),
    source="ReduceOps.cpp value_selecting_reduction_backward(grad, dim, indices, sizes, keepdim): zeros(sizes).scatter_(dim, indices, grad)",
    fixed_by="functorch f7ad909b; core pytorch#76731",
    schema="(Tensor grad, int dim, Tensor indices, SymInt[] sizes, bool keepdim) -> Tensor",
    make_samples=lambda: [
        Sample("dim=-1 keepdim=False", (_mode_input(41), -1, False)),
        Sample("dim=-1 keepdim=True", (_mode_input(42), -1, True)),
        Sample("dim=0 keepdim=False", (_mode_input(43), 0, False)),
    ],
    jvp=lambda a, o, t: (_gather_tangent(_zero_if_none(t[0], a[0]), a[1], o[1], a[2]), None),
))


def _mask(*shape: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    m = torch.rand(shape, generator=g) > 0.5
    m.view(-1)[0] = True  # never empty
    return m


register(OpSpec(
    name="masked_select",
    torch_op=torch.masked_select,
    formula=L.masked_select_backward,
    formula_args=lambda a, o, g: (g[0], a[0], a[1]),
    grad_positions=(0,),
    source="TensorAdvancedIndexing.cpp masked_select_backward: zeros_like(input.expand(...)).masked_scatter_(mask, grad)",
    fixed_by="core pytorch#76794",
    schema="(Tensor grad, Tensor input, Tensor mask) -> Tensor",
    make_samples=lambda: [
        Sample("3x4 mask broadcast (4,)", (randn(3, 4, seed=51), _mask(4, seed=52))),
        Sample("input (4,) broadcast to mask 3x4", (randn(4, seed=53), _mask(3, 4, seed=54))),
    ],
    jvp=lambda a, o, t: (torch.masked_select(_zero_if_none(t[0], a[0]), a[1]),),
    notes="The forward's output shape depends on the mask's values: only cotangent batching can "
    "ever work (functorch lists it as 'not possible due to dynamic shapes').",
))


def _as_tensor(v: Any, like: torch.Tensor) -> torch.Tensor | None:
    if v is None or isinstance(v, torch.Tensor):
        return v
    return torch.tensor(v, dtype=like.dtype)


def _clamp_args(a: Args, o: tuple, g: tuple) -> Args:
    x = a[0]
    lo, hi = (a[1] if len(a) > 1 else None), (a[2] if len(a) > 2 else None)
    tensors = isinstance(lo, torch.Tensor) and isinstance(hi, torch.Tensor)
    return (g[0], x, _as_tensor(lo, x), _as_tensor(hi, x), tensors)


def _clamp_jvp(a: Args, o: tuple, t: tuple) -> tuple:
    x, lo, hi = a[0], _as_tensor(a[1], a[0]), _as_tensor(a[2], a[0])
    zero = torch.zeros((), dtype=x.dtype)
    out = torch.where((x >= lo) & (x <= hi), _zero_if_none(t[0], x), zero)
    if isinstance(a[1], torch.Tensor):
        out = out + torch.where((x < lo) & (lo < hi), _zero_if_none(t[1], lo), zero)
        out = out + torch.where((x > hi) | (hi < lo), _zero_if_none(t[2], hi), zero)
    return (out,)


register(OpSpec(
    name="clamp",
    torch_op=torch.clamp,
    formula=L.clamp_backward,
    formula_args=_clamp_args,
    grad_positions=(0, 1, 2),
    source="FunctionsManual.cpp clamp_backward / clamp_backward_min_max: (self >= min).logical_and_(self <= max)",
    fixed_by="core pytorch#69534",
    schema="(Tensor grad, Tensor self, Tensor? min, Tensor? max, bool min_max_grads) -> (Tensor, Tensor?, Tensor?)",
    make_samples=lambda: [
        Sample("Tensor min/max (max broadcast)",
               (randn(3, 4, seed=61), randn(3, 4, seed=62) - 0.5, randn(4, seed=63) + 0.5), (0, 1, 2)),
        Sample("scalar min/max", (randn(3, 4, seed=64), -0.5, 0.5)),
    ],
    jvp=_clamp_jvp,
    notes="Fails only under mixed batching: an unbatched in-place target (self >= min) receiving a "
    "batched operand (self <= max when only max is batched).",
))


def _prod_op(x: torch.Tensor, dim: int | None = None, keepdim: bool = False) -> torch.Tensor:
    return torch.prod(x) if dim is None else torch.prod(x, dim, keepdim)


def _prod_input(zeros: Sequence[int], seed: int) -> torch.Tensor:
    x = randn(3, 4, seed=seed)
    for i in zeros:
        x.view(-1)[i] = 0.0
    return x


def _prod_jvp(a: Args, o: tuple, t: tuple) -> tuple:
    # The directional derivative through the legacy formula: as data-dependent as the formula.
    x, dim = a[0], (a[1] if len(a) > 1 else None)
    keepdim = a[2] if len(a) > 2 else False
    g = L.prod_legacy_backward(torch.ones_like(o[0]), x, o[0], dim, keepdim)
    tx = _zero_if_none(t[0], x)
    return ((g * tx).sum() if dim is None else (g * tx).sum(dim, keepdim),)


register(OpSpec(
    name="prod",
    torch_op=_prod_op,
    formula=L.prod_legacy_backward,
    formula_args=lambda a, o, g: (g[0], a[0], o[0], a[1] if len(a) > 1 else None, a[2] if len(a) > 2 else False),
    grad_positions=(0,),
    source="FunctionsManual.cpp prod_backward / prod_safe_zeros_backward: (input == 0).nonzero(), .item() drive control flow",
    fixed_by="core pytorch#81969",
    schema="(Tensor grad, Tensor input, Tensor result, int? dim, bool keepdim) -> Tensor",
    make_samples=lambda: [
        Sample("full, no zeros", (_prod_input([], 71),)),
        Sample("full, one zero", (_prod_input([5], 72),)),
        Sample("full, two zeros", (_prod_input([1, 6], 73),)),
        Sample("dim=1, no zeros", (_prod_input([], 74), 1, False)),
        Sample("dim=1, one zero", (_prod_input([5], 75), 1, False)),
        Sample("dim=1, two zeros", (_prod_input([4, 5], 76), 1, True)),
    ],
    jvp=_prod_jvp,
    group="test",
    notes="A negative control: no in-place op, but data-dependent control flow (.item(), nonzero) "
    "that functionalization cannot remove.",
))
