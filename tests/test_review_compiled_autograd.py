"""Objection 5 (issue 28): compiled autograd is bypassed by torch.func's backward passes (no
capture under vmap(grad) or vmap over a vjp), so it does not fix the legacy formula under vmap;
the saved data (data/review-compiled-autograd.json) is a fresh run."""

from __future__ import annotations

from pathlib import Path

from funcbwd_lab.studies.review import compiled_autograd

DATA = Path(__file__).resolve().parents[1] / "data"


def test_saved_is_a_fresh_run_and_torch_func_is_not_captured():
    saved = compiled_autograd.load(DATA)
    assert saved is not None and saved["schema"] == compiled_autograd.SCHEMA
    fresh = compiled_autograd.run()
    assert {n: c["captures"] for n, c in saved["calls"].items()} == \
        {n: c["captures"] for n, c in fresh["calls"].items()}
    calls = fresh["calls"]
    assert calls["backward"]["captures"] >= 1  # the control: compiled autograd is on
    assert all(calls[n]["captures"] == 0 for n in ("vmap_grad", "vmap_vjp", "vmap_vjp_legacy_diag"))
    assert calls["vmap_vjp_legacy_diag"]["compiled_autograd"].startswith("RuntimeError: vmap: inplace")


def test_apply_with_saved_proxies_one_opaque_call_per_node():
    """Issue 39: compiled autograd records no ATen call of a formula, one call per Node, and its
    Python side returns dummy tensors; the saved facts are a fresh reading."""
    saved = compiled_autograd.load(DATA)
    graph, source = compiled_autograd.captured_graph(), compiled_autograd.proxy_source()
    assert graph == saved["graph"] and source == saved["source"]
    assert graph["aten_calls_in_graph"] == [] and graph["eager_inplace_calls"]
    assert all("Backward" in n for n in graph["node_calls"])
    assert source["proxy_call_returns_dummies"] and source["apply_functional_proxies"]
