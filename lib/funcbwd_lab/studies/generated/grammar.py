"""A grammar of in-place idioms, as a hypothesis strategy: :func:`programs` writes small programs.

A program is a module a user might write: a function ``f(x)`` of one sample ``x`` (a float
tensor of shape (4,)) whose body is a few statements drawn from :data:`FEATURES`, and what it
needs at module level (:mod:`funcbwd_lab.studies.generated.pieces`). Every local tensor has
shape (4,) or is a view of shape (4,) or (2,), so programs are mostly valid as written; those
that are not (eager autograd refuses them) are the harness's ``no_reference``.

Hypothesis shrinks a failing program by dropping features and statements and by moving each
choice to the first of its options, so the options are listed simplest first.
"""

from __future__ import annotations

from typing import Callable

from hypothesis import strategies as hs

from funcbwd_lab.studies.generated import pieces
from funcbwd_lab.studies.generated.program import Program

#: what a program can be made of (the body's statements, then the program-level features)
FEATURES = ("factory", "views", "index_write", "arith", "grad_mode", "detach", "captured",
            "nested", "function_old", "function_new", "random", "value_read",
            "requires_grad_read", "buffer", "module", "around", "threads", "closure")
PROGRAM_LEVEL = ("around", "threads")
#: statements any program may use besides its features
BASIC = ("factory", "views", "index_write", "arith")
#: features a program called from two threads at once leaves out (state the threads share)
NOT_THREADED = ("buffer", "module", "random")

CONSTS = ("2.0", "0.5", "-1.5", "3.0")
BASES = ("torch.zeros(4)", "torch.zeros_like({x})", "{x}.new_zeros(4)", "torch.ones(4)",
         "torch.full((4,), 0.5)", "torch.empty(4).fill_(1.5)", "torch.ones_like({x})",
         "torch.empty_like({x}).zero_()", "{x}.new_ones(4)", "{x}.new_full((4,), 2.0)",
         "{x}.new_empty(4).fill_(0.25)", "{x}.new_tensor([1.0, 2.0, 3.0, 4.0])",
         "torch.arange(4.0)", "{x}.clone()", "{x} * 1.0", "torch.zeros(4).copy_({x})")
VIEWS = (("[1:3]", 2), ("[:]", 4), ("[::2]", 2), (".narrow(0, 2, 2)", 2), (".view(2, 2)[1]", 2),
         (".view(4)", 4), (".unsqueeze(0)[0]", 4))
CONTEXTS = ("torch.no_grad()", "torch.enable_grad()", "torch.set_grad_enabled(False)",
            "torch.inference_mode()")


class Body:
    """The statements of one function body over input ``x`` (drawn with ``draw``)."""

    def __init__(self, draw: Callable, x: str = "x", captured: tuple = (),
                 closure: bool = False, prefix: str = "t"):
        self.draw, self.x, self.captured, self.has_c = draw, x, captured, closure
        self.prefix, self.lines, self.count = prefix, [], 0
        self.tensors: list[str] = []  # locals of shape (4,) made here (never views)
        self.views: list[tuple[str, int]] = []  # views of them, with their length
        self.scalars: list[str] = []

    # ------------------------------------------------------------------ choices
    def pick(self, options):
        return self.draw(hs.sampled_from(list(options)))

    def name(self, prefix: str | None = None) -> str:
        self.count += 1
        return f"{prefix or self.prefix}{self.count - 1}"

    def emit(self, line: str, indent: int = 0) -> None:
        self.lines.extend("    " * indent + ln for ln in line.splitlines())

    def vec(self) -> str:
        """An expression of shape (4,)."""
        x, c = self.x, self.pick(CONSTS)
        options = [f"{x} * {c}", f"{x}.sin()", f"{x} * {x}", f"{x}.flip(0)", f"{x}.cumsum(0)",
                   f"{x}.exp()"]
        options += [f"{t} * {x}" for t in self.tensors] + [f"{t} + {x}.cos()" for t in self.tensors]
        options += [f"{v} * {x}" for v, n in self.views if n == 4]
        e = self.pick(options)
        uses = list(self.captured) + (["c"] if self.has_c else [])
        if uses and self.draw(hs.booleans()):
            use = self.pick(uses)
            return f"{e} * c" if use == "c" else pieces.CAPTURED[use][2].format(e=e)
        return e

    def scalar(self) -> str:
        x, i = self.x, self.pick(range(4))
        options = [f"{x}.sum()", f"{x}[{i}]", f"{x}.max()", f"({x} * {x}).sum()", f"{x}.norm()"]
        options += [f"({x} * {t}).sum()" for t in self.tensors]
        options += [f"{t}[{i}]" for t in self.tensors]
        options += [f"{v}.sum()" for v, _ in self.views] + list(self.scalars)
        return self.pick(options)

    def pair(self) -> str:
        x, a = self.x, self.pick((0, 1, 2))
        options = [f"{x}[{a}:{a + 2}] * {self.pick(CONSTS)}", f"{x}[:2].exp()", f"{x}[1::2]"]
        options += [f"{t}[2:] * {x}[:2]" for t in self.tensors]
        return self.pick(options)

    def target(self) -> tuple[str, int]:
        """A tensor or view to write into (a fresh one if there is none)."""
        if not self.tensors:
            self.factory()
        return self.pick([(t, 4) for t in self.tensors] + self.views)

    # ------------------------------------------------------------------ statements
    def factory(self, indent: int = 0) -> None:
        t = self.name()
        base = self.pick(BASES).format(x=self.x)
        self.emit(f"{t} = {base}", indent)
        self.tensors.append(t)

    def views_(self, indent: int = 0) -> None:
        if not self.tensors:
            self.factory(indent)
        base = self.pick(self.tensors)
        view, size = self.pick(VIEWS)
        v = self.name("v")
        self.emit(f"{v} = {base}{view}", indent)
        self.views.append((v, size))

    def index_write(self, indent: int = 0) -> None:
        t, size = self.target()
        x, i = self.x, self.pick(range(size))
        if size == 2:
            line = self.pick([f"{t}[{i}] = {self.scalar()}", f"{t}.copy_({self.pair()})",
                              f"{t}[:] = {self.pair()}"])
        else:
            a = self.pick((0, 1, 2))
            line = self.pick([
                f"{t}[{i}] = {self.scalar()}", f"{t}[{a}:{a + 2}] = {self.pair()}",
                f"{t}[{x} > 0] = {self.pick(CONSTS)}", f"{t}.copy_({self.vec()})",
                f"{t}[{x} > 0] = ({self.vec()})[{x} > 0]",
                f"{t}[torch.tensor([True, False, True, False])] = {self.scalar()}",
                f"{t}.index_put_((torch.tensor([0, 2]),), {self.pair()})",
                f"{t}.index_add_(0, torch.tensor([1, 3]), {self.pair()})",
                f"{t}.masked_fill_({x} < 0, {self.pick(CONSTS)})",
                f"{t}.scatter_(0, torch.tensor([3, 0]), {self.pair()})"])
        self.emit(line, indent)

    def arith(self, indent: int = 0) -> None:
        t, size = self.target()
        e = self.vec() if size == 4 else self.pair()
        self.emit(self.pick([
            f"{t}.add_({e})", f"{t}.mul_({e})", f"{t} += {e}", f"{t}.sub_({e})",
            f"{t} *= {self.pick(CONSTS)}", f"{t}.div_({self.pick(CONSTS)})",
            f"{t}.mul_({self.scalar()})", f"{t}.add_({self.scalar()})", f"{t}.sin_()",
            f"{t}.relu_()", f"{t}.clamp_(min=-1.0, max=1.0)", f"{t}.neg_()",
            f"{t}.addcmul_({e}, {e})"]), indent)

    def in_place(self, indent: int) -> None:
        """One statement that makes no new name (for a branch)."""
        self.pick([self.index_write, self.arith])(indent)

    def ready(self, indent: int) -> None:
        """A tensor to write into exists (made before a block opens, not inside it)."""
        if not self.tensors:
            self.factory(indent)

    def grad_mode(self, indent: int = 0) -> None:
        self.ready(indent)
        self.emit(f"with {self.pick(CONTEXTS)}:", indent)
        s = self.name("s")
        inner = self.pick(["scalar", "factory", "in_place"])
        if inner == "scalar":  # then used, as issue 37's `y[0] = (x * s).sum()`
            self.emit(f"{s} = {self.scalar()}", indent + 1)
            self.emit(f"{self.pick(self.tensors)}.add_({self.x} * {s})", indent)
            self.scalars.append(s)
        elif inner == "factory":
            t = self.name()
            self.emit(f"{t} = {self.vec()}", indent + 1)
            self.tensors.append(t)
        else:
            self.in_place(indent + 1)

    def detach(self, indent: int = 0) -> None:
        t, size = self.target()
        i = self.pick(range(size))
        choice = self.pick(["value", "data", "data_arith", "detached_write", "detach_"])
        if choice == "value":
            new = self.name()
            self.emit(f"{new} = ({self.vec()}).detach()", indent)
            self.tensors.append(new)
        elif choice == "data":
            self.emit(f"{t}.data[{i}] = {self.scalar()}", indent)
        elif choice == "data_arith":
            self.emit(f"{t}.data.mul_({self.pick(CONSTS)})", indent)
        elif choice == "detached_write":
            self.emit(f"{t}.detach()[{i}] = {self.scalar()}", indent)
        else:
            base = self.pick(self.tensors)
            self.emit(f"{base}.detach_()", indent)

    def closure(self, indent: int = 0) -> None:
        new = self.name()
        self.emit(f"{new} = {self.vec()} * c", indent)
        self.tensors.append(new)

    def captured_(self, indent: int = 0) -> None:
        new, e = self.name(), self.vec()
        use = self.pick(self.captured) if self.captured else None
        self.emit(f"{new} = {pieces.CAPTURED[use][2].format(e=e) if use else e}", indent)
        self.tensors.append(new)

    def call(self, callee: str, indent: int = 0) -> None:
        new = self.name()
        self.emit(f"{new} = {callee}({self.vec()})", indent)
        self.tensors.append(new)

    def random(self, indent: int = 0) -> None:
        t, size = self.target()
        n, x = size, self.x
        line = self.pick([
            f"{t}.add_(torch.rand({n}))", f"{t}.mul_(torch.randn_like({t}))",
            f"{t}.uniform_()", f"{t}.normal_()", f"{t}.bernoulli_(0.5)",
            f"{t}.copy_(torch.nn.functional.dropout({t} * {x}[:{n}], 0.5, training=True))"])
        self.emit(line, indent)

    def value_read(self, indent: int = 0) -> None:
        self.ready(indent)
        kind = self.pick(["branch", "index", "item"])
        if kind == "branch":
            self.emit(f"if {self.scalar()} > 0:", indent)
            self.in_place(indent + 1)
            self.emit("else:", indent)
            self.in_place(indent + 1)
        elif kind == "index":
            t, size = self.target()
            k = self.name("k")
            self.emit(f"{k} = int({self.x}[:{size}].argmax())\n{t}[{k}] = {self.scalar()}", indent)
        else:
            t, _ = self.target()
            self.emit(f"{t}.mul_({self.scalar()}.item())", indent)

    def requires_grad_read(self, indent: int = 0) -> None:
        self.ready(indent)
        t, _ = self.target()
        self.emit(f"if {self.pick([self.x, t])}.requires_grad:", indent)
        self.in_place(indent + 1)

    def buffer(self, indent: int = 0) -> None:
        e, i = self.vec(), self.pick(range(4))
        t, size = self.target()
        read = f"{t}.add_(buf{'[:2]' if size == 2 else ''})"
        self.emit(self.pick([
            f"buf.mul_(0.5).add_({e})", read, f"buf[{i}] = {self.scalar()}", "buf.add_(1.0)",
            f"buf.copy_({e})", f'cache["last"] = ({e}).detach()',
            f'{t}.add_(cache["last"]{"[:2]" if size == 2 else ""})']), indent)

    def statement(self, kind: str, modules: dict) -> None:
        if kind in modules:
            self.call(modules[kind])
        else:
            getattr(self, {"views": "views_", "captured": "captured_"}.get(kind, kind))()

    def ret(self) -> str:
        """What ``f`` returns: every local of shape (4,) summed (so each write shows), the
        last two stacked, or a view."""
        live = (self.tensors + [v for v, n in self.views if n == 4])[-4:]
        if not live:
            return f"{self.x} * 2.0"
        how = self.pick(["sum", "stack", "view"])
        if how == "stack" and len(live) > 1:
            return f"torch.stack([{', '.join(live[-2:])}])"
        if how == "view" and self.views:
            return self.pick([v for v, _ in self.views])
        return " + ".join([f"{live[0]} * 1.0", *live[1:]])


# ------------------------------------------------------------------------------ programs
def _inner(draw: Callable) -> str:
    """A decorated function ``inner(v)`` of a few basic statements (for ``nested``)."""
    body = Body(draw, x="v", prefix="w")
    body.factory()
    for kind in draw(hs.lists(hs.sampled_from(BASIC[1:]), min_size=1, max_size=2)):
        body.statement(kind, {})
    lines = "\n".join("    " + ln for ln in body.lines)
    return f"@funcbwd.functionalized\ndef inner(v):\n{lines}\n    return {body.ret()}"


def _between(captured: tuple) -> str:
    rebound = [c for c in captured if c in pieces.REBOUND]
    lines = ([f"    global {', '.join(rebound)}"] if rebound else [])
    lines += [f"    {pieces.CAPTURED[c][1]}" for c in captured]
    return "def between():\n" + "\n".join(lines)


def _function(body: Body, ret: str, closure: bool) -> str:
    if not closure:
        lines = "\n".join("    " + ln for ln in body.lines)
        return f"def f(x):\n{lines}\n    return {ret}"
    lines = "\n".join("        " + ln for ln in body.lines)
    return (f"def make(c):\n    def f(x):\n{lines}\n        return {ret}\n\n    return f\n\n\n"
            f"f = make(2.0)\n\n\ndef rebuild():\n    return make(-1.5)")


@hs.composite
def programs(draw: Callable, require: tuple[str, ...] = (),
             exclude: tuple[str, ...] = ()) -> Program:
    """A program of up to three features of :data:`FEATURES` (always those in ``require``,
    never those in ``exclude``) and a few basic statements."""
    chosen = draw(hs.lists(hs.sampled_from([f for f in FEATURES if f not in exclude]),
                           max_size=3, unique=True))
    features = list(dict.fromkeys([*require, *chosen]))
    if "threads" in features:
        features = [f for f in features if f not in NOT_THREADED]
    pick = lambda options: draw(hs.sampled_from(list(options)))  # noqa: E731
    defs, state, calls = [], [], {}
    captured: tuple = ()
    if "captured" in features:
        captured = tuple(draw(hs.lists(hs.sampled_from(list(pieces.CAPTURED)), min_size=1,
                                       max_size=2, unique=True)))
        defs += [pieces.CAPTURED[c][0] for c in captured]
    if "buffer" in features:
        defs += list(pieces.BUFFERS.values())
        state += list(pieces.BUFFERS)
    if "module" in features:
        m = pick(pieces.MODULES)
        defs.append(pieces.MODULES[m])
        state.append(pieces.INSTANCE[m])
        calls["module"] = pieces.INSTANCE[m]
    for feature, names in (("function_old", pieces.OLD_STYLE), ("function_new", [
            n for n in pieces.FUNCTIONS if n not in pieces.OLD_STYLE])):
        if feature in features:
            fn = pick(names)
            defs.append(pieces.FUNCTIONS[fn])
            calls[feature] = f"{fn}.apply"
    if "nested" in features:
        defs.append(_inner(draw))
        calls["nested"] = "inner"
    statements = [f for f in features if f not in PROGRAM_LEVEL]
    kinds = draw(hs.lists(hs.sampled_from(BASIC + tuple(s for s in statements if s not in BASIC)),
                          min_size=0 if statements else 1, max_size=4))
    for f in statements:
        if f not in kinds:
            kinds.insert(draw(hs.integers(0, len(kinds))), f)
    body = Body(draw, captured=captured, closure="closure" in features)
    for kind in kinds:
        body.statement(kind, calls)
    ret = body.ret()
    imports = "import torch" + ("\nimport funcbwd" if "nested" in features else "")
    parts = [imports, *defs, _function(body, ret, "closure" in features)]
    if captured:
        parts.append(_between(captured))
    return Program("\n\n\n".join(parts) + "\n", tuple(features),
                   randomness="same" if "random" in features else "error",
                   around=pick(CONTEXTS) if "around" in features else "",
                   threads=2 if "threads" in features else 1, state=tuple(state),
                   between=bool(captured), rebuild="closure" in features,
                   seed=draw(hs.integers(0, 2 ** 16)))
