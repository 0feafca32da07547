# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     notebook_metadata_filter: -jupytext.text_representation.jupytext_version
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # The design question in C++
#
# functorch#241 asks how backward formulas that write in place should be functionalized so that
# `vmap(vjp(f))` works, and every place it would change is C++: a guard in `FunctionsManual.cpp`,
# a composite operator, a prologue in generated code. This chapter reads the C++ study
# (`python -m funcbwd_lab.studies.cpp --out data/cpp.json`, about an hour and a half, mostly
# valgrind): the 8 test ops' historical formulas written in C++ as they were, each approach of
# the discussion built around them as an extension against the installed torch, run through the
# workbench's matrix, and measured beside torch's own C++ formula. Reading the saved run needs no
# compiler; every number below comes from `funcbwd_lab.studies.cpp.saved.load`, and the tables
# are `funcbwd_lab.studies.cpp.render`'s. How each piece is built: [docs/cpp.md](../docs/cpp.md).

# %%
import os
from pathlib import Path

os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")  # read when torch loads: no C++ warnings

from funcbwd_lab.studies.cpp import render, saved
from funcbwd_lab.studies.cpp.saved import APPROACHES
from funcbwd_lab.tables import Rich, fit
from funcbwd_lab.views import display

display.setup_notebook()
s = saved.load(os.path.join("..", "data", "cpp.json"))
CSRC = Path("..", "lib", "funcbwd_lab", "studies", "cpp", "csrc")


def md(text: str) -> Rich:
    return Rich(text, markdown=text)


print(fit(f"torch {s['torch']}, run of {s['when']}, extension {s['extension']['name']}"))
assert s["schema"] == "funcbwd-cpp/1"

# %% [markdown]
# ## The formula as it was written
#
# diag's backward around PyTorch 1.10, as `csrc/legacy.h` has it: for a non-square matrix, the
# gradient is copied in place into a view of an unbatched zeros. Under vmap the gradient is
# batched and the zeros are not: vmap refuses the write.


# %%
def snippet(path: Path, start: str, lines: int) -> str:
    text = path.read_text().splitlines()
    i = next(k for k, line in enumerate(text) if start in line)
    return "\n".join(text[i:i + lines])


legacy_diag = snippet(CSRC / "legacy.h", "inline Tensor diag_backward(", 12)
assert "diag.copy_(grad);" in legacy_diag
md(f"```cpp\n{legacy_diag}\n```")

# %% [markdown]
# ## The matrix, in C++
#
# Each C++ strategy runs the workbench's 8 backward scenarios on every sample of the 8 test ops,
# checked against `cpp_legacy`'s per-sample loop and torch's own gradient. Each mirrors a Python
# strategy: the same formula and the same mechanism, in C++. The first check: does every C++ cell
# say what its Python counterpart's says (status, reason, whether the mechanism ran)?

# %%
diffs = s["python_matrix_differences"]
print(fit("every C++ cell equals its Python counterpart's" if diffs == [] else f"differences: {diffs}"))
assert diffs == []
md(render.matrix_table(s))

# %% [markdown]
# So on every matrix criterion the C++ approaches rank as the Python ones do; what can separate
# them in C++ is cost, and what each takes to build.
#
# ## What option 2 takes beyond the guard
#
# The guard is one condition: under vmap, run the formula with Functionalize. The study left out
# each further piece once and ran the result under vmap on a real formula:

# %%
for p in s["probes"]:
    assert p["outcome"] != "right values" and p["open_scopes_after"] == 0, p
md(render.probes_table(s))

# %% [markdown]
# Each piece is needed: a TLS include of the Functionalize key is undone by the vmap layer (the
# formula needs a Functionalize *layer*); the tensors the node saved must be wrapped as well as
# the gradient; outputs must be synced before they are unwrapped, or a write through a view is
# silently lost. The guard as built (`guarded` in `csrc/approaches.h`, the helper in
# `csrc/functionalize.h`) also pops the layer on every exit path and stops its own recursion.

# %%
guard = snippet(CSRC / "approaches.h", "auto guarded(Op op", 9)
assert "functionalize_call" in guard
md(f"```cpp\n{guard}\n```")

# %% [markdown]
# ## Cost with vmap off: what every user pays
#
# With no transform active, an approach with a trigger evaluates it on every formula call. Below
# that, one backward node in a C++ loop: builtin's, `cpp_legacy`'s (the formula as written, through
# the same C++ machinery as the approaches), and what each approach adds to `cpp_legacy`'s count.

# %%
print(fit(render.triggers_line(s)))
print(fit(render.noise_line(s)))
assert all(s["triggers"][a] < 1000 for a in s["triggers"])
md(render.off_table(s))

# %% [markdown]
# ## Cost under vmap
#
# One backward node at B=64, instructions as a ratio to builtin's; `cpp_handfixed` is core's modern
# out-of-place formula through the same machinery, the floor any formula-level approach could
# reach with this machinery.

# %%
md(render.batched_table(s))

# %% [markdown]
# What a torch.func user sees: `vmap(vjp_fn)` time as a ratio to builtin's, per batch, small and
# large inputs (median over the 8 ops, range over them). Timings share the machine with other
# runs; the targets below judge them on their intervals.

# %%
md(render.time_table(s))

# %% [markdown]
# ## Targets and the summary
#
# Instruction targets are judged on the worst case (counts repeat to within the noise shown
# above); time targets on each case's 95% interval, "not resolved" where it straddles the
# threshold.

# %%
for label in APPROACHES:
    assert {t["status"] for t in s["targets"][label]} <= {"met", "missed", "not resolved",
                                                           "not measured"}
print(render.targets_legend())
md(render.targets_table(s))

# %%
print(render.reading(s))
md(render.summary_table(s))
