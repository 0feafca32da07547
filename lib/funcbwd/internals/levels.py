"""Private torch internals the in-place mode needs (:mod:`funcbwd.inplace`): a tensor's vmap
levels, zeros batched and wrapped at every level of the current transforms, swapping a tensor's
contents in place, and the two entry points the mode routes through (``vmap_impl``,
``autograd.Function.apply``)."""

from __future__ import annotations

import contextlib
import contextvars
import threading
from typing import Any, Iterator

import torch

_F = torch._C._functorch
_DK = torch._C.DispatchKey
_VMAP = int(_F.TransformType.Vmap)
_FUNCTIONALIZE = int(_F.TransformType.Functionalize)


def forward_ad_active() -> bool:
    """True when a jvp level (jvp, jacfwd, hessian's outer transform) is on the functorch stack."""
    if not _F.get_dynamic_layer_stack_depth():
        return False
    jvp = int(_F.TransformType.Jvp)
    return any(int(i.key()) == jvp for i in (_F.get_interpreter_stack() or []))


def _levels(t: torch.Tensor) -> Iterator[tuple[torch.Tensor, str]]:
    """(tensor, kind: Functional/Batched/GradTracking/Dense) down ``t``'s wrappers, outermost first."""
    cur = t
    for _ in range(16):
        kind = ("Functional" if _F.is_functionaltensor(cur) else "Batched" if _F.is_batchedtensor(cur)
                else "GradTracking" if _F.is_gradtrackingtensor(cur) else "Dense")
        yield cur, kind
        if kind == "Dense":
            return
        cur = _F.get_unwrapped(cur)

def vmap_levels(t: torch.Tensor) -> frozenset[int]:
    """The vmap levels ``t`` is batched at: its wrapper chain and, at the current jvp level, its
    forward-AD tangent's (under ``jacfwd`` the batching is in the tangent, the primal is not)."""
    levels = set()
    for cur, kind in _levels(t):
        if kind == "Batched":
            levels.add(_F.maybe_get_level(cur))
    if _F.is_gradtrackingtensor(t):
        try:
            tangent = torch.autograd.forward_ad.unpack_dual(t).tangent
        except RuntimeError:
            tangent = None
        if tangent is not None:
            levels |= {_F.maybe_get_level(c) for c, k in _levels(tangent) if k == "Batched"}
    return frozenset(levels)


def all_vmap_levels() -> frozenset:
    """The levels of every vmap on the functorch stack."""
    return frozenset(i.level() for i in (_F.get_interpreter_stack() or [])
                     if int(i.key()) == _VMAP)


def vmap_randomness_same() -> bool:
    """True when a vmap on the stack draws the same random numbers for every entry."""
    return any(int(i.key()) == _VMAP and _F.CVmapInterpreterPtr(i).randomness()
               == _F.RandomnessType.Same for i in (_F.get_interpreter_stack() or []))


def innermost_vmap_level() -> int | None:
    """The level of the innermost vmap on the functorch stack (None if none)."""
    for interp in reversed(list(_F.get_interpreter_stack() or [])):
        if int(interp.key()) == _VMAP:
            return interp.level()
    return None


def grad_levels() -> frozenset:
    """The levels of every grad / jvp transform on the functorch stack: a tensor made outside
    one of them is *captured* there (torch refuses to write into it)."""
    return frozenset(i.level() for i in (_F.get_interpreter_stack() or [])
                     if int(i.key()) != _VMAP and int(i.key()) != _FUNCTIONALIZE)


def primal_vmap_levels(tensors) -> frozenset:
    """The vmap levels the given tensors' values are batched at (their wrapper chains, not their
    forward-AD tangents): under ``jacfwd`` the basis vectors batch the tangents only, so these are
    the levels that batch *samples* of a function's arguments."""
    levels = set()
    for t in tensors:
        for cur, kind in _levels(t):
            if kind == "Batched":
                levels.add(_F.maybe_get_level(cur))
    return frozenset(levels)


def zeros_at_every_level(shape: torch.Size, dtype: torch.dtype, device) -> torch.Tensor:
    """Zeros of logical ``shape``, batched at every vmap level of the current stack and wrapped at
    every grad/jvp level (a mutable wrapper, not a captured input): a tensor any value computed
    under these transforms can be written into. The raw tensor is made with functorch's
    dynamic-layer keys excluded (a factory under a grad level would come out wrapped already),
    then lifted outermost level first."""
    stack = list(_F.get_interpreter_stack() or [])
    sizes = [_F.CVmapInterpreterPtr(i).batchSize() for i in stack if int(i.key()) == _VMAP]
    keys = torch._C.DispatchKeySet(_DK.FuncTorchDynamicLayerFrontMode) | torch._C.DispatchKeySet(
        _DK.FuncTorchDynamicLayerBackMode)
    with torch._C._ExcludeDispatchKeyGuard(keys):
        t = torch.zeros((*sizes, *shape), dtype=dtype, device=device)
    for interp in stack:
        if int(interp.key()) == _VMAP:
            t = _F._add_batch_dim(t, 0, interp.level())
        else:
            t = _F._wrap_for_grad(t, interp.level())
    return t


def batched_copy(t: torch.Tensor) -> torch.Tensor:
    """``t``'s contents (and autograd history, through ``copy_``) in a new tensor batched at every
    vmap level and wrapped at every grad/jvp level (:func:`zeros_at_every_level`)."""
    new = zeros_at_every_level(t.shape, t.dtype, t.device)
    new.copy_(t)
    return new


def swap_impl(a: torch.Tensor, b: torch.Tensor) -> None:
    """Give ``a`` the contents (TensorImpl) of ``b`` and vice versa, keeping each Python object
    (what ``torch.utils.swap_tensors`` does, without its use-count checks)."""
    torch._C._swap_tensor_impl(a, b)


_WRAPPED = (_F.is_functionaltensor, _F.is_batchedtensor, _F.is_gradtrackingtensor)


def dense(t: torch.Tensor) -> torch.Tensor:
    """The plain tensor under ``t``'s functorch wrappers (``t`` itself if it has none)."""
    for _ in range(16):
        if not (_WRAPPED[0](t) or _WRAPPED[1](t) or _WRAPPED[2](t)):
            return t
        t = _F.get_unwrapped(t)
    return t


_dense = dense


def is_view(t: torch.Tensor) -> bool:
    """True if ``t`` (under its functorch wrappers) is a view of another tensor's storage."""
    return _dense(t)._is_view()


def alias_of(a: torch.Tensor, b: torch.Tensor) -> bool:
    """True if ``a`` and ``b`` share storage (under their functorch wrappers)."""
    return dense_alias_of(dense(a), b)


def dense_alias_of(dense_a: torch.Tensor, b: torch.Tensor) -> bool:
    """:func:`alias_of` with ``a`` already unwrapped (:func:`dense`): one unwrap per output."""
    try:
        return torch._C._is_alias_of(dense_a, dense(b))
    except RuntimeError:
        return False


@contextlib.contextmanager
def transforms_routed(make_vmap, make_grad) -> Iterator[None]:
    """Route every torch.func transform called in the block: ``vmap`` (``torch.func.vmap``, also
    inside jacfwd/hessian: ``apis.vmap_impl``) through ``make_vmap(original)``, and the grad
    transforms' implementations (``grad``/``grad_and_value``: ``grad_and_value_impl``; ``vjp``,
    ``jacrev``: ``_vjp_with_argnums``; ``jvp``, ``jacfwd``: ``_jvp_with_argnums``) through
    ``make_grad(original, name)``: each takes the transformed function first. In this context
    only (:func:`_routed`): another thread's calls run as torch's."""
    import torch._functorch.eager_transforms as et

    with contextlib.ExitStack() as stack:
        stack.enter_context(vmap_impl_replaced(make_vmap))
        for n in ("grad_and_value_impl", "_vjp_with_argnums", "_jvp_with_argnums"):
            stack.enter_context(_routed(et, n, lambda original, n=n: make_grad(original, n)))
        yield


#: (id(owner), name) -> the implementation routed to in this context (:func:`_routed`)
_ROUTES: contextvars.ContextVar[dict] = contextvars.ContextVar("funcbwd_routes", default={})
#: (id(owner), name) -> [blocks routing it now, torch's attribute, torch's implementation]
_INSTALLED: dict[tuple, list] = {}
_INSTALL_LOCK = threading.Lock()


@contextlib.contextmanager
def _routed(owner: Any, name: str, make, original=None, wrap=None) -> Iterator[None]:
    """``owner.name`` routed to ``make(previous)`` while the block runs, in this context only:
    the attribute is replaced once, process-wide, by a router that looks the implementation up
    in a ``ContextVar`` (torch's own where none is set), and put back when the last block using
    it ends. Blocks in two threads at once never see each other's routing, and however they
    interleave the attribute ends as torch's (a save-and-restore per block would leave one
    thread's routing installed for good). ``previous``: the enclosing block's implementation in
    this context, else torch's (``original(attribute)``: the attribute as a callable, itself by
    default); ``wrap(router)``: what is installed (the router itself by default)."""
    key = (id(owner), name)
    with _INSTALL_LOCK:
        entry = _INSTALLED.get(key)
        if entry is None:
            saved = owner.__dict__[name]
            base = original(saved) if original is not None else saved

            def route(*args, _key=key, _base=base, **kwargs):
                impl = _ROUTES.get().get(_key)
                return (_base if impl is None else impl)(*args, **kwargs)

            setattr(owner, name, wrap(route) if wrap is not None else route)
            entry = _INSTALLED[key] = [0, saved, base]
        entry[0] += 1
    try:
        routes = _ROUTES.get()
        token = _ROUTES.set({**routes, key: make(routes.get(key, entry[2]))})
        try:
            yield
        finally:
            _ROUTES.reset(token)
    finally:
        with _INSTALL_LOCK:
            entry[0] -= 1
            if entry[0] == 0:
                setattr(owner, name, entry[1])
                del _INSTALLED[key]


@contextlib.contextmanager
def vmap_impl_replaced(make) -> Iterator[None]:
    """Route every ``torch.func.vmap`` call (``jacfwd``/``hessian``'s inner vmaps too) through
    ``make(original_vmap_impl)`` while the block runs (torch._functorch.apis.vmap_impl), in this
    context only (:func:`_routed`)."""
    import torch._functorch.apis as apis

    with _routed(apis, "vmap_impl", make):
        yield


def torch_transform_internal(func) -> bool:
    """True for a function torch's own transforms vmap over basis vectors (``jacrev``'s
    ``vjp_fn``, ``jacfwd``'s ``push_jvp``): its batch entries are not samples."""
    module = getattr(getattr(func, "func", func), "__module__", "") or ""
    return module.startswith("torch._functorch") or getattr(func, "funcbwd_basis", False)


def original_vmap_impl():
    import torch._functorch.vmap as v
    return v.vmap_impl


def function_has_vmap_support(cls: type) -> bool:
    """True for a setup_context-style Function vmap can run: a ``vmap`` staticmethod of its own
    or ``generate_vmap_rule = True`` (torch: "does not have vmap support" otherwise)."""
    return bool(getattr(cls, "generate_vmap_rule", False)) or (
        getattr(cls, "vmap", None) is not getattr(torch.autograd.Function, "vmap", None))


def function_defines_jvp(cls: type) -> bool:
    """True for a Function with a forward-mode rule of its own (``jvp``)."""
    return getattr(cls, "jvp", None) is not getattr(torch.autograd.Function, "jvp", None)


def function_is_old_style(cls: type) -> bool:
    """True for a ``torch.autograd.Function`` whose ``forward`` takes ``ctx`` (no
    ``setup_context``): torch.func transforms refuse it."""
    return cls.setup_context is torch.autograd.Function.setup_context  # type: ignore[attr-defined]


@contextlib.contextmanager
def function_apply_replaced(make) -> Iterator[None]:
    """``torch.autograd.Function.apply`` as ``make(original)`` while the block runs, in this
    context only (:func:`_routed`), where ``original(cls, *args, **kwargs)`` is torch's ``apply``
    for ``cls``: a Python classmethod up to torch 2.13, a C++ ``classmethod_descriptor`` (no
    ``__func__``) from 2.14 on; ``__get__`` binds either to ``cls``."""
    def original(descriptor):
        def apply(cls: type, *args, **kwargs):
            return descriptor.__get__(None, cls)(*args, **kwargs)
        return apply

    with _routed(torch.autograd.Function, "apply", make, original=original, wrap=classmethod):
        yield


def leaves(tree) -> list:
    """The leaves of a nest of tuples, lists and dicts (torch's pytree)."""
    from torch.utils._pytree import tree_flatten
    return tree_flatten(tree)[0]


def wrapper_levels(t: torch.Tensor) -> frozenset[int]:
    """Every functorch level ``t`` is wrapped or batched at (and, at the current jvp level, its
    tangent's): a tensor lacking one of a value's levels was made outside that transform."""
    levels = {_F.maybe_get_level(c) for c, k in _levels(t) if k != "Dense"}
    if _F.is_gradtrackingtensor(t):
        try:
            tangent = torch.autograd.forward_ad.unpack_dual(t).tangent
        except RuntimeError:
            tangent = None
        if tangent is not None:
            levels |= {_F.maybe_get_level(c) for c, k in _levels(tangent) if k != "Dense"}
    return frozenset(levels)


def vmap_inputs(in_dims, args: tuple, func) -> tuple[int, list, list, object]:
    """(batch size, flat in_dims, flat args, the args' tree spec), as torch's vmap reads them."""
    from torch._functorch.vmap import _process_batched_inputs
    return _process_batched_inputs(in_dims, args, func)


def flatten(tree) -> tuple[list, object]:
    """(leaves, spec) of a nest of tuples, lists and dicts (torch's pytree)."""
    from torch.utils._pytree import tree_flatten
    return tree_flatten(tree)


def unflatten(leaves: list, spec):
    from torch.utils._pytree import tree_unflatten
    return tree_unflatten(leaves, spec)


def stack_outputs(outs: list, out_dims):
    """Per-sample outputs stacked as vmap returns them (``out_dims``: an int, None, or a tree)."""
    from torch._functorch.vmap import _broadcast_to_and_flatten
    from torch.utils._pytree import tree_flatten, tree_unflatten

    flats = [tree_flatten(o) for o in outs]
    spec = flats[0][1]
    dims = _broadcast_to_and_flatten(out_dims, spec)
    if dims is None:
        raise ValueError(f"out_dims {out_dims!r} does not match the outputs")
    stacked = [leaves[0] if d is None else torch.stack(list(leaves), dim=d)
               for d, leaves in zip(dims, zip(*(f[0] for f in flats)))]
    return tree_unflatten(stacked, spec)


def accelerator_rng() -> dict:
    """``{device type: (get, set)}`` of every accelerator generator torch has initialized (CUDA,
    XPU: all devices at once; MPS): what a call may draw from besides the CPU's."""
    out = {}
    for name in ("cuda", "xpu"):
        mod = getattr(torch, name, None)
        if mod is not None and mod.is_available() and mod.is_initialized():
            out[name] = (mod.get_rng_state_all, mod.set_rng_state_all)
    mps = getattr(torch, "mps", None)
    if mps is not None and torch.backends.mps.is_available():
        out["mps"] = (mps.get_rng_state, mps.set_rng_state)
    return out


def rng_states() -> dict:
    """The state of every random generator a call could draw from: the CPU's, and each
    accelerator's torch has initialized (:func:`accelerator_rng`)."""
    states = {"cpu": torch.get_rng_state()}
    for name, (get, _) in accelerator_rng().items():
        states[name] = get()
    return states


def set_rng_states(states: dict) -> None:
    setters = accelerator_rng()
    for name, state in states.items():
        if name == "cpu":
            torch.set_rng_state(state)
        else:
            setters[name][1](state)


@contextlib.contextmanager
def rng_forked(seed: int | None = None) -> Iterator[None]:
    """Every generator's state kept across the block (``seed``: every generator seeded first)."""
    states = rng_states()
    try:
        if seed is not None:
            torch.manual_seed(seed)
        yield
    finally:
        set_rng_states(states)
