"""funcbwd.functionalized under torch.compile (issue 28, objection 3): a signature first seen while
dynamo compiles the transforms around it traces eagerly (dynamo graph-breaks at the wrapper), the
result equals the eager one, and the cache never holds a failure caused by its environment, so a
later eager call with that signature still works."""

from __future__ import annotations

import pytest
import torch
from torch.func import jacrev, vmap

import funcbwd
from funcbwd.errors import FuncbwdError
from funcbwd.fx import formula_graphs as FG
from funcbwd import decorator as tool


def writes_row(x):
    """pytorch#103329's pattern: a fresh zeros written in place with a batched value."""
    y = torch.zeros(x.shape, dtype=x.dtype)
    y[0] = x[0] * 2
    return y * x


def reference(x):
    return torch.cat([(x[0] * 2 * x[0])[None], torch.zeros_like(x[1:])])


@pytest.fixture
def fresh_dynamo():
    torch.compiler.reset()
    yield
    torch.compiler.reset()


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_compile_around_the_transforms_works_and_caches_no_failure(backend, fresh_dynamo):
    f = funcbwd.functionalized(writes_row, warn=False)
    x = torch.randn(3, 4)  # (4,) per sample: a signature this wrapper never traced
    expected = vmap(jacrev(reference))(x)
    try:
        got = torch.compile(vmap(jacrev(f)), backend=backend)(x)
    except FuncbwdError as e:  # the other allowed outcome: one clear line
        assert "\n" not in str(e) and "torch.compile" in str(e)
    else:
        torch.testing.assert_close(got, expected)
    entries = f.functionalizer.cache.values()
    assert not any(isinstance(e, tool.Untraceable) for e in entries), entries
    torch.testing.assert_close(vmap(jacrev(f))(x), expected)  # the eager call after compile
    assert [type(e) for e in f.functionalizer.cache.values()] == [FG.FormulaGraph]


def test_a_trace_failing_in_dynamo_is_refused_in_one_line_and_not_cached(monkeypatch):
    """The rule behind the test above, without torch.compile's nondeterministic paths: a trace
    failure raised by dynamo's machinery is the environment's, not the code's."""
    from torch._dynamo.exc import InternalTorchDynamoError

    f = funcbwd.functionalized(writes_row, warn=False)
    real_build = tool.build

    def build_under_dynamo(*a, **k):
        raise InternalTorchDynamoError("RuntimeError: dynamicLayerStack.size() >= level INTERNAL ASSERT")

    monkeypatch.setattr(tool, "build", build_under_dynamo)
    x = torch.randn(3, 4)
    with pytest.raises(FuncbwdError) as info:
        vmap(jacrev(f))(x)
    assert "\n" not in str(info.value) and "nothing was cached" in str(info.value)
    assert f.cache_info().currsize == 0
    monkeypatch.setattr(tool, "build", real_build)
    torch.testing.assert_close(vmap(jacrev(f))(x), vmap(jacrev(reference))(x))


def test_a_trace_while_dynamo_traces_is_refused(monkeypatch):
    """Mutation-style check of the guard itself: if a trace ever starts while dynamo is tracing
    (is_compiling), it raises one line instead of tracing with fake tensors."""
    f = funcbwd.functionalized(writes_row, warn=False)
    monkeypatch.setattr(tool.dynamo, "is_compiling", lambda: True)
    with pytest.raises(FuncbwdError, match="torch.compile is tracing"):
        vmap(jacrev(f))(torch.randn(3, 4))
    assert f.cache_info().currsize == 0


def test_saved_compile_evidence_says_works_and_caches_a_graph():
    from pathlib import Path

    from funcbwd_lab.studies.review import compile_tool

    saved = compile_tool.load(Path(__file__).resolve().parents[1] / "data")
    assert saved is not None and set(saved["backends"]) == set(compile_tool.BACKENDS)
    for b in saved["backends"].values():
        assert b["compiled"] == "works" and b["equals_eager"]
        assert b["cache_after_compile"] == ["FormulaGraph"]
