"""The op registry: one :class:`OpSpec` per op, tying the modern torch op to its legacy formula.

Adding a formula is one call to :func:`register` (docs/adding-a-formula.md): the matrix,
traces, graphs, bench and notebooks iterate over the registry and pick it up. The built-in
registrations live beside this module, each next to its formulas (``funcbwd_lab.ops.corpus``,
``funcbwd_lab.ops.live``, ``funcbwd_lab.ops.discussion``), and are loaded by ``funcbwd_lab.ops``; user formulas
load as plugins (:mod:`funcbwd_lab.ops.plugins`).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import torch

from funcbwd.errors import BadInputError, FuncbwdError, UnknownNameError, first_line
from funcbwd_lab.ops.plugins import load_entry_points

Args = tuple[Any, ...]

#: The 8 test ops of the design discussion (functorch#241).
TEST_OPS = ("masked_select", "clamp", "diag", "index_select", "topk", "prod", "mode", "sort")


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
    #: the legacy formula; None for an op that is torch's own only (an OpInfo op in the sweep:
    #: only strategies acting on torch's own backward nodes apply)
    formula: Callable[..., Any] | None
    formula_args: Callable[[Args, tuple, tuple], Args] | None
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
    #: Optional per-entry rule for scenarios that batch this op's args (see
    #: :mod:`funcbwd_lab.run.entries`): ``batch_entry(position, entry, b)`` gets the generic entry
    #: ``b >= 1`` of the sample arg at ``position`` and returns the one to use (same shape and
    #: dtype). For samples whose entries must differ in more than order (prod: zero counts).
    batch_entry: Callable[[int, torch.Tensor, int], torch.Tensor] | None = None

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
    if not isinstance(sample, Sample):
        raise BadInputError(f"sample must be a funcbwd_lab.ops.registry.Sample, got {type(sample).__name__}")
    if not sample.diff:
        raise BadInputError(f"sample {sample.name!r} of {spec.name} has no differentiable arg (diff=())")
    for p in sample.diff:
        a = sample.args[p] if p < len(sample.args) else None
        if not isinstance(a, torch.Tensor):
            raise BadInputError(f"{spec.name}: differentiable arg {p} must be a tensor, got "
                                f"{type(a).__name__}")
        if spec.formula is None and a.is_complex():
            continue  # torch's own op (OpInfo): complex inputs are fine, results compare as real pairs
        if a.is_complex() or not a.is_floating_point():
            raise BadInputError(f"{spec.name}: differentiable arg {p} has dtype {a.dtype}; use "
                                "float32 or float64 (integer and complex inputs are not supported)")
    try:
        with torch.no_grad():
            spec.torch_op(*sample.args)
    except (RuntimeError, TypeError, IndexError, ValueError) as e:
        first = first_line(str(e)) or type(e).__name__
        raise BadInputError(f"sample {sample.name!r} is not valid input for {spec.name}: {first}") from e


_REGISTRY: dict[str, OpSpec] = {}


def register(spec: OpSpec) -> OpSpec:
    """Add ``spec`` to the registry (and so to the matrix, traces, graphs, bench and CLI); returns
    it. A name can be registered once: a second registration raises, naming the first one's
    formula module."""
    if not isinstance(spec, OpSpec):
        raise BadInputError(f"register takes a funcbwd_lab.OpSpec, got {type(spec).__name__}")
    if not isinstance(spec.name, str) or not spec.name.isidentifier():
        raise BadInputError(f"op name must be a Python identifier (it is an attribute of "
                            f"funcbwd_lab.legacy and a torch.library op name), got {spec.name!r}")
    if spec.name in _REGISTRY:
        first = getattr(_REGISTRY[spec.name].formula, "__module__", "?")
        raise FuncbwdError(f"op {spec.name!r} is already registered (formula from {first}); "
                           "choose another name")
    _REGISTRY[spec.name] = spec
    return spec


def _registry() -> dict[str, OpSpec]:
    """The registry, after the installed plugins (entry-point group ``funcbwd.formulas``)
    registered theirs: loaded once, on the first read."""
    load_entry_points()
    return _REGISTRY


def get_op(name: str) -> OpSpec:
    """The registered op ``name``; an unknown name raises, listing the valid ones."""
    reg = _registry()
    if not isinstance(name, str) or name not in reg:
        raise UnknownNameError("op", name, op_groups(include_opt_in=True))
    return reg[name]


#: Groups that are registered (``get_op`` finds them, ``op_names(group)`` lists them) but left out
#: of the default op set that ``op_names()`` / ``all_ops()`` return with no group (the matrix,
#: report, bench and notebook defaults): "live", today's core sites (funcbwd_lab.ops.live), are
#: asked for by group or by name.
OPT_IN_GROUPS = frozenset({"live"})


def op_names(group: str | None = None, *, include_opt_in: bool = False) -> list[str]:
    """Registered op names in registration order: only ``group``'s if given, else the default set
    (every group but :data:`OPT_IN_GROUPS`, unless ``include_opt_in``)."""
    if group is not None:
        return [n for n, s in _registry().items() if s.group == group]
    return [n for n, s in _registry().items() if include_opt_in or s.group not in OPT_IN_GROUPS]


def all_ops(group: str | None = None, *, include_opt_in: bool = False) -> list[OpSpec]:
    """The registered :class:`OpSpec` s in registration order (as :func:`op_names` selects)."""
    return [_REGISTRY[n] for n in op_names(group, include_opt_in=include_opt_in)]


#: the order groups are listed in (the test ops first); plugin groups follow, sorted
GROUP_ORDER = ("test", "extended", "negative_control", "live")


def op_groups(*, include_opt_in: bool = False) -> dict[str, list[str]]:
    """group -> its op names in registration order, groups in :data:`GROUP_ORDER` (what an
    unknown op's error lists)."""
    out: dict[str, list[str]] = {}
    for n in op_names(include_opt_in=include_opt_in):
        out.setdefault(_REGISTRY[n].group, []).append(n)
    rank = {g: i for i, g in enumerate(GROUP_ORDER)}
    return dict(sorted(out.items(), key=lambda kv: (rank.get(kv[0], len(rank)), kv[0])))


def groups() -> list[str]:
    """Every registered group, opt-in ones included (sorted)."""
    return sorted({s.group for s in _registry().values()})
