"""docs/adding-a-formula.md's example is real: this exact block is one module with the three
parts (citations, legacy formula, modern formula, registration) and registers an op whose legacy
formula equals torch's gradient unbatched, fails under vmap as written (plain) and passes
functionalized (per_formula), and whose modern formula passes under vmap (handfixed), each checked
against the per-sample loop."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from funcbwd_lab import legacy
from funcbwd_lab.ops import registry
from funcbwd_lab.studies.matrix import matrix

DOC = Path(__file__).resolve().parents[1] / "docs" / "adding-a-formula.md"


def doc_example() -> str:
    text = DOC.read_text()
    m = re.search(r"<!-- example:begin -->\n```python\n(.*?)```\n<!-- example:end -->", text, re.S)
    assert m, "docs/adding-a-formula.md lost its example block"
    return m.group(1)


def _grads(fn, spec, smp):
    x = smp.args[0].detach().clone().requires_grad_()
    out = spec.diff_out(fn(x, *smp.args[1:]))[0]
    ct = torch.randn(out.shape, generator=torch.Generator().manual_seed(0))
    return torch.autograd.grad(out, x, ct)[0]


def problems_of(code: str) -> list[str]:
    """Register ``code``'s op, check it, unregister it; returns what is wrong (empty: all good)."""
    before = set(registry.op_names())
    try:
        exec(compile(code, str(DOC), "exec"), {"__name__": "adding_a_formula_example"})
        (name,) = set(registry.op_names()) - before
        spec, found = registry.get_op(name), []
        for smp in spec.samples():
            if not torch.allclose(_grads(legacy.function_for(spec).apply, spec, smp),
                                  _grads(spec.torch_op, spec, smp), atol=1e-6):
                found.append(f"{smp.name}: legacy formula != torch's gradient")
        plain = matrix.run(name, "vmap_cotangents", "plain")
        if (plain.status, plain.reason) != ("fail", "vmap_inplace"):
            found.append(f"plain under vmap: {plain.status} {plain.reason}")
        for strategy in ("per_formula", "handfixed"):
            cell = matrix.run(name, "vmap_cotangents", strategy)
            if cell.status != "pass":
                found.append(f"{strategy} under vmap: {cell.status} {cell.reason} {cell.message}")
        return found
    finally:
        for added in set(registry.op_names()) - before:
            del registry._REGISTRY[added]


def test_the_example_is_one_short_module_in_the_built_in_layout():
    code = doc_example()
    lines = [ln for ln in code.splitlines() if ln.strip()]
    assert len(lines) <= 15, f"{len(lines)} lines"
    # citations, then the legacy formula, the modern one right below it, then the registration
    order = [code.index(part) for part in ("pytorch#76731", "def kthvalue_backward(",
                                           "def kthvalue_backward_modern(", "register(OpSpec(")]
    assert order == sorted(order), order
    assert "formula=kthvalue_backward," in code and "handfixed=kthvalue_backward_modern," in code


def test_the_doc_example_works():
    assert problems_of(doc_example()) == []


@pytest.mark.parametrize("mutation", [
    ("grad.unsqueeze(dim))", "2 * grad.unsqueeze(dim))"),  # a transcription error
    ("zeros_like_grad(sizes, grad).scatter_(", "grad.new_zeros(sizes).scatter("),
    ("zeros_like_grad(sizes, grad).scatter(", "zeros_like_grad(sizes, grad).scatter_("),
])
def test_the_checks_can_fail(mutation):
    # A wrong formula must fail the unbatched check; an out-of-place legacy formula must not fail
    # under vmap; an in-place modern formula must.
    # (A fresh op name: strategies may cache per op name within a process.)
    code = doc_example().replace('name="kthvalue"', f'name="kthvalue_mutant{len(mutation[1])}"')
    assert mutation[0] in code
    assert problems_of(code.replace(*mutation)) != []
