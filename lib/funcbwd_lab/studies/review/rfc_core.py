"""The RFC's "change in core" and its citations: where each piece would go in PyTorch, what it rests
on, and the upstream files read (each with the repository and commit of the copy read).

Corrected by issue 39: the prologue's place is shown in today's generated Node (the functional
apply variants of ``gen_autograd_functions.py``, which the earlier cited copy 0088d90bab predates);
compiled autograd's ``apply_with_saved`` is not a recorder of a formula's ATen calls; the trigger
is a vmap level, only for the generated list of formulas that write in place; scalars stay in the
cache key (nothing per formula), since formulas branch on them; forward mode is dropped (no
evidence). Every number is read from the saved data.
"""

from __future__ import annotations

from typing import Any, Mapping

from funcbwd_lab.tables import WIDTH, paragraph

#: upstream files cited: path -> (repository, commit of the copy read, what it is)
UPSTREAM: dict[str, tuple[str, str, str]] = {
    "tools/autograd/derivatives.yaml": (
        "pytorch/pytorch", "d327a787782618826890c323f8d7e51f3d28ec13",
        "every op's backward formula (this copy predates forward-mode formulas: for those and "
        "for docs/prs/copy-rules.diff, cyyever/pytorch@8e59b671d2, a fork)"),
    "tools/autograd/gen_autograd_functions.py": (
        "cyyever/pytorch", "23eadd2ab91c065e10cf61cc48fee933b68e07eb",
        "generates each backward Node; FUNCTION_DEFINITION: `${op}_apply_functional` (the pure "
        "formula), `${op}::apply` calling it, `apply_with_saved` proxying "
        "`${op}_apply_functional_ivalue` (a fork of pytorch/pytorch: the store's pytorch/pytorch "
        "copies, 0088d90bab and 397b329b20, predate the functional variants)"),
    "torch/csrc/autograd/FunctionsManual.cpp": (
        "pytorch/pytorch", "002ca6715ba1ab4d2369262b487eeb30bf249911",
        "the hand-written backward/JVP helpers"),
    "aten/src/ATen/functorch/DynamicLayer.h": (
        "pytorch/pytorch", "b4cd07a43e4b86eb625af70570ed8e8a2a380d43",
        "maybeCurrentDynamicLayer(): the innermost functorch transform, if any"),
    "aten/src/ATen/functorch/BatchedFallback.cpp": (
        "pytorch/pytorch", "ef825c2906ada3ab06e6da90b1fc5e05f2e1bae8",
        "vmap's slow per-sample fallback"),
    "aten/src/ATen/functorch/BatchRulesDecompositions.cpp": (
        "pytorch/pytorch", "29ccda8b48ddad254c03e81bd9f2d29e4df0d81e",
        "functorch's decompositions under vmap (docs/prs/batch-rule-decompositions.diff)"),
    "aten/src/ATen/FunctionalTensorWrapper.cpp": (
        "pytorch/pytorch", "bff395c81fa76581fdf81717032d42e9955465d5",
        "functionalization in core (C++)"),
    "aten/src/ATen/native/Copy.cpp": (
        "pytorch/pytorch", "2322f525a4d3c72faa9f97c317ee212432280373",
        "aten::copy (fresh memory with dst's strides)"),
    "torch/csrc/jit/frontend/tracer.cpp": (
        "pytorch/pytorch", "de7c85b2ae4438d2414d5a75210a8197403f2e68",
        "TorchScript's tracer, core's one C++ recorder of calls"),
    "torch/fx/experimental/proxy_tensor.py": (
        "pytorch/pytorch", "551bedd9c9104f0cefeb488513da72671cef7d8c",
        "make_fx, the tracer the prototype uses (a dispatch mode)"),
    "test/functorch/test_ops.py": (
        "pytorch/pytorch", "28a580b0d22161650a6f4131276dddbf3a4699f4",
        "functorch's composition tests and their xfail sets"),
    "torch/testing/_internal/composite_compliance.py": (
        "pytorch/pytorch", "9c40c0f4b9b0fd977623989f4cb1012f74dbe752",
        "the subclass-like checks the isTensorSubclassLike branches were written for"),
}
#: what torch 2.13.0's own installed files say (read by the studies, saved with the data)
INSTALLED = ("ATen/TensorSubclassLikeUtils.h (isTensorSubclassLike), "
             "torch/csrc/dynamo/compiled_autograd.h and torch/_dynamo/compiled_autograd.py")


def _p(text: str) -> list[str]:
    return [paragraph(text, WIDTH), ""]


def _b(text: str) -> str:
    return paragraph(f"- {text}", WIDTH, "", "  ")


def cite(path: str) -> str:
    repo, commit, _ = UPSTREAM[path]
    return f"{repo}@{commit[:10]}"


def change(inputs: Mapping[str, Any], pick: str) -> list[str]:
    """The section "The change in core" for the pick's mechanism."""
    inplace, trigger, branches = (inputs.get("inplace_formulas"), inputs.get("trigger"),
                                  inputs.get("branches"))
    cache = (inputs.get("objections") or {}).get("cache_hits")
    out = ["## The change in core", ""]
    out += _p(f"Mechanism (`{pick}`, the Python prototype's): under a vmap level each formula that "
              "writes in place runs as a graph traced once per signature with functionalization "
              "on, its aten::copy elided where sound, cached and replayed; with no vmap level "
              "nothing changes. Where each piece would go:")
    listed = (f"the {inplace['direct']} Node formulas the generated list finds writing in place "
              f"directly, and {inplace['nested_only']} more only inside a composite they call, of "
              f"{inplace['nodes_seen']} Nodes seen (data/review-inplace-formulas.json: every "
              "OpInfo's eager backward on CPU under torch.profiler; a lower bound: a branch no "
              "sample reaches is not seen)" if inplace else
              "the formulas that write in place (the generated list is **not yet measured**: "
              "data/review-inplace-formulas.json is not there)")
    out.append(_b(
        f"`tools/autograd/gen_autograd_functions.py` ({cite('tools/autograd/gen_autograd_functions.py')}, "
        "today's template): each Node's formula is already a pure function, "
        "`${op}_apply_functional(grads, needs_input_grad, saved...)`, which `${op}::apply` calls "
        "after unpacking its saved variables; `${op}_apply_functional_ivalue` is the same formula "
        "behind one uniform signature (grads and a list of packed IValues), generated for "
        "compiled autograd. The prologue goes in `${op}::apply`, before that call, and only for "
        f"{listed}: when a vmap level is on the functorch stack, pack the arguments as "
        "`apply_with_saved` already does and run `${op}_apply_functional_ivalue` through one "
        "generic functionalizing call (or its cached graph). Nothing per formula is written by "
        "hand: the packing is generated today."))
    if trigger is not None:
        s = trigger["summary"]

        def n(t: str, k: str = "pass") -> int:
            return s.get(t, {}).get(k, 0)

        def tot(t: str) -> int:
            return sum(v for k, v in s.get(t, {}).items() if k != "reference raises")

        vm = n("vmap_cotangents", "fail: vmap_inplace") + n("vmap_jvp", "fail: vmap_inplace")
        other = [r for r in trigger["rows"] if not r["vmap"]
                 and r["status"] not in ("pass", "reference raises")]
        excuse = "; ".join(f"the {r['transform']} {r['status']} of `{r['op']}` sample "
                           f"{r['sample']} is the out-of-place path's too"
                           for r in other if r.get("out_of_place") == r["status"])
        out.append(_b(
            "The trigger: a vmap level, not any functorch layer. The in-place formulas (legacy, "
            "and every counted live site's fast path) as written pass under `vjp` alone in "
            f"{n('vjp')} of {tot('vjp')} sample runs, under `grad` alone in {n('grad')} of "
            f"{tot('grad')}, under `jvp` alone in {n('jvp')} of {tot('jvp')}"
            + (f" ({excuse})" if excuse else "") + f"; under vmap {vm} of "
            f"{tot('vmap_cotangents') + tot('vmap_jvp')} fail with vmap's in-place error "
            "(data/review-trigger.json; runs where torch's own formula "
            "raises are not counted). Today a `grad` level alone already sends the C++ branches "
            "to their out-of-place side (`FuncTorchGradWrapper` is one of `isTensorSubclassLike`'s "
            "keys), which the fast path does not need."))
    scal = (branches or {}).get("scalar_branches")
    if scal:
        g = scal["graphs"]
        out.append(_b(
            "The cache key: the signature includes the values of scalar arguments, so nothing is "
            "written per formula; that costs a trace per new value ("
            + (f"a float scalar that changes every step misses on {cache['loops']['float_scalar_per_step']['misses']} of "
               f"{cache['loops']['float_scalar_per_step']['calls']} calls, objection 7" if cache else "objection 7")
            + "). Scalars cannot be graph inputs without per-formula knowledge, because formulas "
            f"branch on them: {scal['op']} (FunctionsManual.cpp at "
            f"{UPSTREAM['torch/csrc/autograd/FunctionsManual.cpp'][1][:10]}, as norm_backward) "
            + ", ".join(f"at p={p} records {len(ops)} ops" for p, ops in g.items())
            + " (data/review-branches.json). This withdraws the earlier \"scalars as graph "
            "inputs\": it would need a per-formula list of the scalars that steer control flow."))
    out.append(_b(
        "`aten/src/ATen/functorch/FunctionalizedFormulas.{h,cpp}` (new): the cache (per Node type "
        "and signature, bounded LRU, thread-safe, one trace per key) and the recorder. Core has "
        "no recorder of a formula's ATen calls to reuse: compiled autograd's `apply_with_saved` "
        "proxies one opaque call per Node (objection 5), and TorchScript's tracer records "
        "calls into its own IR. The alternative that needs none: graphs generated at build time "
        "(the C++ study's traced graphs emitted as C++)."))
    if branches is not None:
        from funcbwd_lab.studies.review import branches as br

        s = br.summary(branches)
        out.append(_b(
            "`torch/csrc/autograd/FunctionsManual.cpp`: delete the deletable branches (below), "
            "and what deleting changes beyond vmap: `isTensorSubclassLike` is also true for "
            "sparse, meta and Python-key tensors and under any dispatch mode, so fake tracing "
            f"(AOTAutograd) records the fast path's in-place calls in {s['fake_fast_inplace']} of "
            f"{s['fake_traced']} sites (their graphs equal the out-of-place path's after "
            f"functionalization in {s['functionalized_same']}), and CompositeCompliance fails "
            f"the fast path in {s['compliance_fast_fail']} of {s['sites']} sites (the out-of-place "
            f"path in {s['compliance_slow_fail']}); the candidates, above, compare it with "
            "rewriting each branch out of place."))
    out.append(_b(
        "`test/functorch/test_ops.py`: remove the expected failures the change retires (below), "
        "and test that every new graph equals its un-elided graph (the prototype's "
        "tests/test_elide.py)."))
    out.append(_b(
        "Forward mode (`tools/autograd/gen_variable_type.py`'s FW_DERIVATIVE_* formulas): "
        "**dropped** from this change. No strategy runs torch's own forward-mode formulas "
        "functionalized, so every `vmapjvpall` cell is not applicable to the prototype "
        "(objection 10): there is no evidence for it."))
    return out + [""]


def cited() -> list[str]:
    out = ["## Upstream files cited", ""]
    out += [_b(f"`{p}` at {repo}@{c[:12]}: {w}") for p, (repo, c, w) in UPSTREAM.items()]
    out.append(_b(f"torch 2.13.0's own installed files ({INSTALLED}), read by the studies at "
                  "the wheel's commit"))
    return out
