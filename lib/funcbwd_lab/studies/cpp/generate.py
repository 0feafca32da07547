"""``traced``'s graphs emitted as C++ at build time: ``traced_graphs.cpp`` for the extension.

For each formula of the 8 test ops (:data:`FORMULAS`: the C++ entry point declared in
``csrc/traced.h`` and the ops whose formula it is), every signature the study runs (each catalog
sample's formula arguments, and the bench's large input) is traced by the ``traced`` strategy
(:meth:`funcbwd_lab.strategies.traced.Traced.entry_for`: functionalized, ``aten.copy`` elided,
checked, the graph passes applied) and its FX graph written out as C++: a guard on the signature
(every tensor's sizes and dtype, every other argument's value), then one ``at::_ops::<op>::call``
per graph node, the outputs stored in ``out``. A signature that cannot be traced (prod's
``nonzero``/``.item()``) gets no graph: at run time the formula is then functionalized at call
time (``csrc/approaches.h``, ``traced_call``). A graph node this emitter cannot write (a constant
tensor, an argument type it does not know) refuses that signature the same way, with the reason
kept in :attr:`Generated.skipped`.

The graphs are per signature, as ``traced``'s are: nothing here makes a graph general over
shapes (that would need symbolic tracing). Strides are not part of the C++ guard: every op in
the graphs computes the same values whatever its inputs' strides.
"""

from __future__ import annotations

import dataclasses
import math
import operator
import re
from typing import Any, Callable, Iterable, Sequence

import torch

#: C++ entry point -> the ops whose legacy formula it is (their samples give the signatures)
FORMULAS: dict[str, tuple[str, ...]] = {
    "diag": ("diag",), "index_select": ("index_select",),
    "value_selecting": ("topk", "sort", "mode"), "masked_select": ("masked_select",),
    "clamp": ("clamp",), "prod": ("prod",),
}
#: the order of the C++ ``Op`` enum (csrc/functionalize.h): the counters' columns
FORMULA_ORDER = tuple(FORMULAS)

_DTYPES = {torch.float32: "Float", torch.float64: "Double", torch.int64: "Long", torch.bool: "Bool",
           torch.int32: "Int", torch.float16: "Half", torch.bfloat16: "BFloat16"}
_FORMATS = {torch.preserve_format: "Preserve", torch.contiguous_format: "Contiguous",
            torch.channels_last: "ChannelsLast"}


class Unsupported(Exception):
    """A graph (or an argument) this emitter cannot write as C++."""


@dataclasses.dataclass
class Generated:
    """The emitted source, the graphs per formula (count and signatures), what was skipped."""

    source: str
    graphs: dict[str, list[str]]
    skipped: dict[str, list[str]]


# ------------------------------------------------------------------ schema types
def _schema_args(schema_text: str) -> list[tuple[str, str, bool]]:
    """(declared type, name, kwarg_only) per argument of a schema string ``name(args) -> ret``."""
    inner = schema_text[schema_text.index("(") + 1:schema_text.rindex(") ->")]
    out, depth, cur, kw = [], 0, "", False
    for ch in inner + ",":
        if ch == "," and depth == 0:
            part = cur.strip()
            cur = ""
            if part == "*":
                kw = True
            elif part:
                decl = part.split("=")[0].strip()
                typ, name = decl.rsplit(" ", 1)
                out.append((typ.strip(), name.strip(), kw))
            continue
        depth += (ch in "([") - (ch in ")]")
        cur += ch
    return out


def _base_type(typ: str) -> str:
    """``Tensor(a!)`` -> ``Tensor``; ``int[1]?`` -> ``int[]?``."""
    typ = re.sub(r"\([a-z!]*\)", "", typ)
    return re.sub(r"\[\d+\]", "[]", typ)


def _ints(values: Sequence[int]) -> str:
    if not len(values):
        return "at::IntArrayRef()"
    return "at::IntArrayRef({" + ", ".join(str(int(v)) for v in values) + "})"


def _literal(typ: str, value: Any, names: dict[Any, str]) -> str:
    """The C++ expression of ``value`` as an argument of declared type ``typ``."""
    base = _base_type(typ)
    if isinstance(value, torch.fx.Node):
        if base in ("Tensor", "Tensor?"):
            return names[value]
        raise Unsupported(f"a graph value as a {typ} argument")
    if base.endswith("?") and value is None:
        return "std::nullopt"
    core = base.rstrip("?")
    if core == "Tensor":
        raise Unsupported(f"a constant tensor argument ({type(value).__name__})")
    if core == "int" or core == "SymInt":
        return f"int64_t({int(value)})" if core == "int" else f"c10::SymInt({int(value)})"
    if core == "bool":
        return "true" if value else "false"
    if core == "float":
        if not math.isfinite(value):
            raise Unsupported(f"a non-finite float {value!r}")
        return repr(float(value))
    if core == "Scalar":
        if isinstance(value, bool):
            return f"at::Scalar({'true' if value else 'false'})"
        if isinstance(value, int):
            return f"at::Scalar(int64_t({value}))"
        if isinstance(value, float) and math.isfinite(value):
            return f"at::Scalar({value!r})"
        raise Unsupported(f"a Scalar {value!r}")
    if core == "int[]":
        return _ints(value) if not base.endswith("?") else f"at::OptionalIntArrayRef({_ints(value)})"
    if core == "SymInt[]" and not base.endswith("?"):
        return f"c10::fromIntArrayRefSlow({_ints(value)})"
    if core == "ScalarType" and value in _DTYPES:
        return f"std::optional<at::ScalarType>(at::ScalarType::{_DTYPES[value]})"
    if core == "Layout" and value == torch.strided:
        return "std::optional<at::Layout>(at::kStrided)"
    if core == "Device" and isinstance(value, torch.device) and value.type == "cpu":
        return "std::optional<at::Device>(at::Device(at::kCPU))"
    if core == "MemoryFormat" and value in _FORMATS:
        return f"std::optional<at::MemoryFormat>(at::MemoryFormat::{_FORMATS[value]})"
    if core == "str":
        return f'c10::string_view("{value}")'
    raise Unsupported(f"argument type {typ} with value {value!r}")


def _call(node: torch.fx.Node, names: dict[Any, str]) -> str:
    target = node.target
    if target is operator.getitem:
        return f"std::get<{int(node.args[1])}>({names[node.args[0]]})"
    schema = getattr(target, "_schema", None)
    if schema is None:
        raise Unsupported(f"a call of {target!r} (not an aten overload)")
    ns, name = schema.name.split("::")
    if ns != "aten":
        raise Unsupported(f"an op outside aten: {schema.name}")
    fn = name + (f"_{schema.overload_name}" if schema.overload_name else "")
    args = []
    for i, (typ, arg_name, _kw) in enumerate(_schema_args(str(schema))):
        if i < len(node.args):
            value = node.args[i]
        elif arg_name in node.kwargs:
            value = node.kwargs[arg_name]
        else:
            value = schema.arguments[i].default_value
        args.append(_literal(typ, value, names))
    return f"at::_ops::{fn}::call({', '.join(args)})"


# ------------------------------------------------------------------ one formula's entry point
@dataclasses.dataclass(frozen=True)
class Param:
    """One argument of the formula (its OpSpec.schema): declared type and name."""

    typ: str
    name: str

    def cpp(self) -> str:
        return {"Tensor": "const at::Tensor& ", "Tensor?": "const std::optional<at::Tensor>& ",
                "int": "int64_t ", "int?": "std::optional<int64_t> ", "bool": "bool ",
                "SymInt[]": "at::IntArrayRef ", "int[]": "at::IntArrayRef "}[self.typ] + self.name

    def tensor(self) -> str | None:
        """The C++ expression of this parameter's tensor (None: not a tensor parameter)."""
        return {"Tensor": self.name, "Tensor?": f"(*{self.name})"}.get(self.typ)


def params(schema: str) -> list[Param]:
    return [Param(_base_type(t), n) for t, n, _ in _schema_args("f" + schema)]


def _guard(ps: Sequence[Param], args: Sequence[Any]) -> list[str]:
    """The C++ conditions that hold exactly for arguments of ``args``' signature."""
    conds = []
    for p, a in zip(ps, args):
        if p.typ == "Tensor?" and a is None:
            conds.append(f"!({p.name}.has_value() && {p.name}->defined())")
            continue
        if p.typ == "Tensor?":
            conds.append(f"{p.name}.has_value() && {p.name}->defined()")
        if p.tensor() is not None:
            t = p.tensor()
            if a.dtype not in _DTYPES:
                raise Unsupported(f"dtype {a.dtype}")
            conds.append(f"{t}.dim() == {a.dim()}")
            if a.dim():
                conds.append(f"{t}.sizes() == {_ints(a.shape)}")
            conds.append(f"{t}.scalar_type() == at::ScalarType::{_DTYPES[a.dtype]}")
        elif p.typ in ("int[]", "SymInt[]"):
            conds.append(f"{p.name}.size() == {len(a)}")
            if len(a):
                conds.append(f"{p.name} == {_ints(a)}")
        elif p.typ == "int?":
            conds.append(f"!{p.name}.has_value()" if a is None
                         else f"{p.name}.has_value() && *{p.name} == {int(a)}")
        elif p.typ == "int":
            conds.append(f"{p.name} == {int(a)}")
        elif p.typ == "bool":
            conds.append(p.name if a else f"!{p.name}")
        else:
            raise Unsupported(f"parameter type {p.typ}")
    return conds


def _body(gm: torch.fx.GraphModule, ps: Sequence[Param], args: Sequence[Any]) -> list[str]:
    tensor_exprs = [p.tensor() for p, a in zip(ps, args)
                    if p.tensor() is not None and a is not None]
    names: dict[Any, str] = {}
    lines, placeholder = [], 0
    for i, node in enumerate(gm.graph.nodes):
        if node.op == "placeholder":
            names[node] = tensor_exprs[placeholder]
            placeholder += 1
        elif node.op == "call_function":
            names[node] = f"v{i}"
            lines.append(f"auto v{i} = {_call(node, names)};")
        elif node.op == "output":
            outs = node.args[0]
            outs = outs if isinstance(outs, (tuple, list)) else (outs,)
            for j, o in enumerate(outs):
                if o is not None:
                    lines.append(f"out[{j}] = {names[o]};")
        else:
            raise Unsupported(f"a graph node of kind {node.op}")
    if placeholder != len(tensor_exprs):
        raise Unsupported(f"{placeholder} graph inputs for {len(tensor_exprs)} tensor arguments")
    return lines


def signature_text(args: Sequence[Any]) -> str:
    return ", ".join("x".join(map(str, a.shape)) or "0-d" if isinstance(a, torch.Tensor) else repr(a)
                     for a in args)


def emit_formula(name: str, schema: str, signatures: Iterable[tuple[Any, Callable[[], Any]]]
                 ) -> tuple[list[str], list[str], list[str]]:
    """(C++ lines of ``bool generated::<name>(...)``, signatures emitted, signatures skipped
    with why). ``signatures``: (args, a callable returning the FX graph or raising)."""
    ps = params(schema)
    decl = f"bool {name}(" + ", ".join(p.cpp() for p in ps) + ", at::Tensor* out) {"
    lines, done, skipped, seen = [decl], [], [], set()
    for args, graph_of in signatures:
        text = signature_text(args)
        if text in seen:
            continue
        seen.add(text)
        try:
            gm = graph_of()
            conds, body = _guard(ps, args), _body(gm, ps, args)
        except Exception as e:  # noqa: BLE001 - a refused signature is recorded, not fatal
            skipped.append(f"{text}: {type(e).__name__}: {str(e).splitlines()[0][:160]}")
            continue
        done.append(text)
        lines.append(f"  // {text}")
        lines.append("  if (" + " &&\n      ".join(conds) + ") {")
        lines += [f"    {ln}" for ln in body] + ["    return true;", "  }"]
    lines += ["  return false;", "}"]
    return lines, done, skipped


# ------------------------------------------------------------------ the file
def _signatures(op_names: Sequence[str]) -> list[tuple[tuple, Any]]:
    """Each op's formula arguments on every catalog sample and on the bench's large input,
    each with the op spec (clamp's also with min_max_grads False: the C++ node passes False when
    neither bound needs a gradient)."""
    from funcbwd.fx.formula_graphs import formula_args_for
    from funcbwd_lab.ops import registry
    from funcbwd_lab.studies.bench.inputs import resize

    out = []
    for op in op_names:
        spec = registry.get_op(op)
        for smp in [*spec.samples(), resize(spec, "large")]:
            args = tuple(formula_args_for(spec, smp))
            out.append((args, spec))
            if op == "clamp" and args[-1] is True:
                out.append((args[:-1] + (False,), spec))
    return out


def generate() -> Generated:
    """The source of ``traced_graphs.cpp``, tracing every signature with the traced strategy."""
    from funcbwd_lab.strategies.traced import Traced, Untraceable

    traced = Traced()  # its own cache: the study's graphs, not another run's
    src = ["// GENERATED by lib/funcbwd_lab/studies/cpp/generate.py from the FX graphs of the",
           "// traced strategy; do not edit (rebuilt with the extension).",
           '#include "traced.h"', "", "#include <ATen/Operators.h>", "",
           "namespace funcbwd_cpp {", "namespace generated {", ""]
    graphs, skipped, counts = {}, {}, []
    from funcbwd_lab.ops import registry

    for name, ops in FORMULAS.items():
        schema = registry.get_op(ops[0]).schema

        def graph_for(args, spec):
            def get():
                hit = traced.entry_for(spec, args)
                if isinstance(hit, Untraceable):
                    raise Unsupported(f"untraceable ({hit.reason.split(';')[0]})")
                return hit.graph
            return get

        lines, done, skip = emit_formula(
            name, schema, [(args, graph_for(args, spec)) for args, spec in _signatures(ops)])
        src += lines + [""]
        graphs[name], skipped[name] = done, skip
        counts.append(len(done))
    src += ["int64_t graph_count(int formula) {",
            f"  static const int64_t counts[] = {{{', '.join(map(str, counts))}}};",
            f"  return formula >= 0 && formula < {len(counts)} ? counts[formula] : -1;", "}", "",
            "}  // namespace generated", "}  // namespace funcbwd_cpp", ""]
    return Generated("\n".join(src), graphs, skipped)
