"""Legacy ops: callable like the torch op, forward by torch, backward by the legacy formula.

``funcbwd_lab.legacy.diag(x, 1)`` runs ``torch.diag`` forward; its backward runs the historical
in-place formula through the strategy it is bound to (:func:`function_for`). Each op is a
``torch.autograd.Function`` (separate ``forward``/``setup_context``, ``generate_vmap_rule=True``)
so every torch.func transform can see it; forwards return plain tuples (a structseq breaks the
generated vmap rule under primal batching).

For a jvp-kind op (``OpSpec.kind == "jvp"``, the live forward-mode sites) the roles swap: the
formula under study is the op's forward-mode rule, so ``jvp`` runs ``formula`` through the bound
strategy exactly as ``backward`` does for a backward formula (``ctx.strategy.run_formula``; no
strategy: as written), and ``backward`` is torch's own gradient of ``torch_op``
(``torch.func.vjp`` of it, composable with every transform and with double backward).
"""

from __future__ import annotations

import functools
from typing import Any

import torch

from funcbwd_lab.ops import registry


def differentiable_outputs(spec: "registry.OpSpec", outs: tuple) -> list[int]:
    """The outputs that carry grads and tangents: ``diff_outputs``, and for a jvp-kind op every
    other floating output too (the saved statistics its formula reads, e.g. layer_norm's mean and
    rstd: reverse mode over the formula must reach through them to the input)."""
    if spec.kind != "jvp":
        return list(spec.diff_outputs)
    return [i for i, o in enumerate(outs)
            if i in spec.diff_outputs or o.is_floating_point() or o.is_complex()]


def _torch_outputs(spec: "registry.OpSpec", args: tuple, pos: list[int], idx: list[int]):
    """``torch_op`` as a function of the args at ``pos``, returning its outputs at ``idx``."""

    def f(*xs: torch.Tensor) -> tuple:
        full = list(args)
        for p, x in zip(pos, xs):
            full[p] = x
        outs = spec.outputs_tuple(spec.torch_op(*full))
        return tuple(outs[i] for i in idx)

    return f


def function_for(op: "registry.OpSpec | str", strategy: Any = None) -> type[torch.autograd.Function]:
    """The legacy op of ``op`` as a ``torch.autograd.Function`` whose backward (jvp, for a
    jvp-kind op) runs the formula through ``strategy.run_formula`` (``strategy`` None: the
    formula as written, ``funcbwd_lab.legacy.<op>``). One class per op and strategy, made once: the
    strategy is bound to the class, so the formula is reached explicitly, from any thread or
    transform."""
    spec = registry.get_op(op) if isinstance(op, str) else op
    return _function_for(spec, strategy)


@functools.cache
def _function_for(spec: "registry.OpSpec", strategy: Any) -> type[torch.autograd.Function]:

    def forward(*args: Any) -> Any:
        return spec.torch_op(*args)

    def setup_context(ctx, inputs, output) -> None:
        outs = spec.outputs_tuple(output)
        tensor_pos = [i for i, a in enumerate(inputs) if isinstance(a, torch.Tensor)]
        tensors = [inputs[i] for i in tensor_pos] + list(outs)
        ctx.save_for_backward(*tensors)
        ctx.save_for_forward(*tensors)
        ctx.layout = (tuple(None if i in tensor_pos else a for i, a in enumerate(inputs)),
                      tuple(tensor_pos), len(outs))
        keep = differentiable_outputs(spec, outs)
        ctx.mark_non_differentiable(*[o for i, o in enumerate(outs) if i not in keep])
        ctx.strategy = strategy  # None: no strategy, the formula runs as written

    def _restore(ctx) -> tuple[tuple, tuple]:
        template, tensor_pos, n_out = ctx.layout
        saved = ctx.saved_tensors
        args = list(template)
        for i, p in enumerate(tensor_pos):
            args[p] = saved[i]
        return tuple(args), tuple(saved[len(tensor_pos):])

    def _run_formula(ctx, formula_args: tuple) -> tuple:
        result = (spec.formula(*formula_args) if ctx.strategy is None
                  else ctx.strategy.run_formula(spec, formula_args))
        return result if isinstance(result, tuple) else (result,)

    def _torch_backward(ctx, args: tuple, outs: tuple, grads: tuple) -> tuple:
        """jvp-kind ops: torch's own gradient of ``torch_op`` w.r.t. the args that need one."""
        out: list[Any] = [None] * len(args)
        pos = [p for p in spec.grad_positions if p < len(args) and ctx.needs_input_grad[p]]
        idx = differentiable_outputs(spec, outs)
        if not pos:
            return tuple(out)
        outs_, vjp_fn = torch.func.vjp(_torch_outputs(spec, args, pos, idx), *[args[p] for p in pos])
        cts = tuple(torch.zeros_like(o) if grads[i] is None else grads[i] for o, i in zip(outs_, idx))
        for p, g in zip(pos, vjp_fn(cts)):
            out[p] = g
        return tuple(out)

    def _formula_jvp(ctx, args: tuple, outs: tuple, tangents: tuple) -> tuple:
        """jvp-kind ops: the formula under study gives the tangents of the ``diff_outputs``.
        The other floating outputs (saved statistics, differentiable for reverse mode) get NaN
        tangents: not computed, and loud if anything ever reads them (torch's own jvp cannot run
        here: a plain forward-mode caller would make it nested forward AD, which torch rejects)."""
        # tangents of the differentiable args (None: zero tangent)
        dtangents = tuple(tangents[p] if p < len(tangents) else None for p in spec.grad_positions)
        result = _run_formula(ctx, spec.formula_args(args, outs, dtangents))
        res: list[Any] = [None] * len(outs)  # non-differentiable outputs get no tangent
        for i in differentiable_outputs(spec, outs):
            res[i] = torch.full_like(outs[i], float("nan"))
        for i, t in zip(spec.diff_outputs, result):
            res[i] = t
        return tuple(res)

    def backward(ctx, *grads: torch.Tensor) -> tuple:
        args, outs = _restore(ctx)
        if spec.kind == "jvp":
            return _torch_backward(ctx, args, outs, grads)
        dgrads = tuple(grads[i] for i in spec.diff_outputs)
        result = _run_formula(ctx, spec.formula_args(args, outs, dgrads))
        out: list[Any] = [None] * len(args)
        for pos, g in zip(spec.grad_positions, result):
            if pos < len(args) and ctx.needs_input_grad[pos]:
                out[pos] = g
        return tuple(out)

    def jvp(ctx, *tangents: Any) -> Any:
        args, outs = _restore(ctx)
        if spec.kind == "jvp":
            res = _formula_jvp(ctx, args, outs, tangents)
            return res if len(outs) > 1 else res[0]
        if spec.jvp is None:
            raise RuntimeError(f"legacy op {spec.name!r} has no jvp rule")
        res = spec.jvp(args, outs, tangents)
        return res if len(outs) > 1 else res[0]

    name = f"Legacy_{spec.name}"
    return type(name, (torch.autograd.Function,), {
        "generate_vmap_rule": True,
        "forward": staticmethod(forward),
        "setup_context": staticmethod(setup_context),
        "backward": staticmethod(backward),
        "jvp": staticmethod(jvp),
        "__doc__": (f"{spec.name}: torch forward, legacy "
                    f"{'forward-mode rule' if spec.kind == 'jvp' else 'backward'} ({spec.source})."),
    })


def call(name: str, *args: Any) -> Any:
    """Call legacy op ``name`` like the torch op (positional args)."""
    return function_for(registry.get_op(name)).apply(*args)


def __getattr__(name: str):
    if name.startswith("__"):
        raise AttributeError(name)
    spec = registry.get_op(name)  # raises UnknownNameError listing valid ops
    return functools.partial(call, spec.name)
