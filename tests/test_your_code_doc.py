"""docs/your-code.md says what the tool does (issue 36, item 9): its code blocks run, and what
they claim is checked.

* "Fix your own code": the two blocks run as written, in order, in one namespace (the second uses
  the first's import). Each makes a call torch.func alone refuses: the same block with
  ``funcbwd.vmap`` put back to ``torch.func.vmap`` and ``funcbwd.allow_inplace`` to a no-op raises
  vmap's in-place error, which the block's comment quotes. The results equal a per-sample loop of
  the code as written. A block whose call torch.func already runs would show nothing: the doc's
  old second block does, and the refusal check catches it (``test_a_block_torch_runs_is_caught``).
* "The contract": an old-style ``forward(ctx, ...)`` ``autograd.Function`` decorated with
  ``funcbwd.functionalized`` is converted and works under transforms (equal to the loop), where
  torch.func refuses the class as written.
"""

from __future__ import annotations

import contextlib
import re
from pathlib import Path

import pytest
import torch

import funcbwd

DOC = Path(__file__).resolve().parents[1] / "docs" / "your-code.md"
REFUSAL = "vmap: inplace arithmetic"
#: the doc's second block before issue 36: torch.func runs it without funcbwd
OLD_BLOCK = ("with funcbwd.allow_inplace():\n"
             "    torch.func.hessian(lambda x: f(x).sum())(torch.randn(3, 4))\n")


def fix_blocks() -> list[str]:
    """The ```python blocks of the doc's first section ("Fix your own code")."""
    text = DOC.read_text()
    section = text[text.index("## Fix your own code"):]
    section = section[:section.index("\n## ", 1)]
    return re.findall(r"```python\n(.*?)```", section, re.S)


def run(blocks: list[str], ns: dict | None = None, *, plain: bool = False) -> dict:
    """Run ``blocks`` in ``ns`` (a new namespace by default); ``plain``: torch.func alone
    (funcbwd.vmap is torch.func.vmap, funcbwd.allow_inplace a no-op)."""
    ns = {} if ns is None else ns
    with pytest.MonkeyPatch.context() as mp:
        if plain:
            mp.setattr(funcbwd, "vmap", torch.func.vmap)
            mp.setattr(funcbwd, "allow_inplace", contextlib.nullcontext)
        for block in blocks:
            exec(compile(block, str(DOC), "exec"), ns)
    return ns


def refuses(block: str, ns: dict) -> bool:
    """Does torch.func alone refuse ``block`` with vmap's in-place error?"""
    try:
        run([block], dict(ns), plain=True)
    except RuntimeError as e:
        return REFUSAL in str(e)
    return False


def test_the_blocks_run_and_equal_a_per_sample_loop():
    blocks = fix_blocks()
    assert len(blocks) == 2
    torch.manual_seed(0)
    ns = run(blocks)
    f, x, g, xs, hs = ns["f"], ns["x"], ns["g"], ns["xs"], ns["hs"]
    jac = funcbwd.vmap(torch.func.jacrev(f))(x)
    assert torch.allclose(jac, torch.stack([torch.autograd.functional.jacobian(f, xi) for xi in x]))
    assert hs.shape == (8, 3, 3)
    assert torch.allclose(hs, torch.stack([torch.autograd.functional.hessian(g, xi) for xi in xs]))


def test_torch_func_alone_refuses_each_block_as_its_comment_says():
    blocks = fix_blocks()
    ns = {}
    for block in blocks:
        assert REFUSAL in block, f"the block's comment does not quote torch's error:\n{block}"
        assert refuses(block, ns), f"torch.func alone runs this block: it shows nothing\n{block}"
        run([block], ns)  # names for the next block


def test_a_block_torch_runs_is_caught():
    """Mutation: the doc's old second block (``allow_inplace`` around a ``hessian`` torch.func
    runs by itself) is not refused: the check above would fail on it."""
    ns = run(fix_blocks()[:1])
    assert not refuses(OLD_BLOCK, ns)


class OldStyleRelu(torch.autograd.Function):
    """Old style (``forward(ctx, ...)``), with an in-place backward."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.clamp(min=0)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        grad_input = grad.clone()
        grad_input[x < 0] = 0
        return grad_input


def test_an_old_style_function_is_converted_and_works():
    xs = torch.randn(5, 4, generator=torch.Generator().manual_seed(0))
    with pytest.raises(RuntimeError, match="setup_context"):
        torch.func.vmap(torch.func.jacrev(OldStyleRelu.apply))(xs)
    wrapped = funcbwd.functionalized(OldStyleRelu)
    jac = torch.func.vmap(torch.func.jacrev(wrapped.apply))(xs)
    loop = torch.stack([torch.autograd.functional.jacobian(lambda t: t.clamp(min=0), x) for x in xs])
    assert torch.allclose(jac, loop)
    assert "gets one `FuncbwdError`" not in DOC.read_text()
