"""Legacy ops: callable like the torch op, forward by torch, backward by the legacy formula.

``funcbwd.legacy.diag(x, 1)`` runs ``torch.diag`` forward; its backward runs the historical
in-place formula through the strategy that was active when the forward ran. Each op is a
``torch.autograd.Function`` (separate ``forward``/``setup_context``, ``generate_vmap_rule=True``)
so every torch.func transform can see it; forwards return plain tuples (a structseq breaks the
generated vmap rule under primal batching).
"""

from __future__ import annotations

import functools
from typing import Any

import torch

from funcbwd.ops import registry
from funcbwd.ops.active import active_strategy


@functools.cache
def function_for(op: "registry.OpSpec | str") -> type[torch.autograd.Function]:
    spec = registry.get_op(op) if isinstance(op, str) else op

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
        ctx.mark_non_differentiable(*[o for i, o in enumerate(outs) if i not in spec.diff_outputs])
        ctx.strategy = active_strategy()  # None: no strategy, the formula runs as written

    def _restore(ctx) -> tuple[tuple, tuple]:
        template, tensor_pos, n_out = ctx.layout
        saved = ctx.saved_tensors
        args = list(template)
        for i, p in enumerate(tensor_pos):
            args[p] = saved[i]
        return tuple(args), tuple(saved[len(tensor_pos):])

    def backward(ctx, *grads: torch.Tensor) -> tuple:
        args, outs = _restore(ctx)
        dgrads = tuple(grads[i] for i in spec.diff_outputs)
        formula_args = spec.formula_args(args, outs, dgrads)
        result = (spec.formula(*formula_args) if ctx.strategy is None
                  else ctx.strategy.run_formula(spec, formula_args))
        result = result if isinstance(result, tuple) else (result,)
        out: list[Any] = [None] * len(args)
        for pos, g in zip(spec.grad_positions, result):
            if pos < len(args) and ctx.needs_input_grad[pos]:
                out[pos] = g
        return tuple(out)

    def jvp(ctx, *tangents: Any) -> Any:
        if spec.jvp is None:
            raise RuntimeError(f"legacy op {spec.name!r} has no jvp rule")
        args, outs = _restore(ctx)
        res = spec.jvp(args, outs, tangents)
        return res if len(outs) > 1 else res[0]

    name = f"Legacy_{spec.name}"
    return type(name, (torch.autograd.Function,), {
        "generate_vmap_rule": True,
        "forward": staticmethod(forward),
        "setup_context": staticmethod(setup_context),
        "backward": staticmethod(backward),
        "jvp": staticmethod(jvp),
        "__doc__": f"{spec.name}: torch forward, legacy backward ({spec.source}).",
    })


def call(name: str, *args: Any) -> Any:
    """Call legacy op ``name`` like the torch op (positional args)."""
    return function_for(registry.get_op(name)).apply(*args)


def __getattr__(name: str):
    if name.startswith("__"):
        raise AttributeError(name)
    spec = registry.get_op(name)  # raises UnknownNameError listing valid ops
    return functools.partial(call, spec.name)
