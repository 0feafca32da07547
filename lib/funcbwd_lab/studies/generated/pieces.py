"""The module-level pieces a generated program may define, as source text.

Each piece is what a user writes at the top of a module: a captured object (with how it is
rebound between two calls), a caller-owned buffer, a module with buffers, a custom
``torch.autograd.Function`` in either style. Generated bodies refer to them by name.
"""

from __future__ import annotations

#: captured objects: name -> (definition, how ``between()`` rebinds it, an expression using it
#: of shape (4,) given a (4,) expression ``{e}``)
CAPTURED = {
    "scale": ("scale = torch.tensor(2.0)", "scale = torch.tensor(5.0)", "{e} * scale"),
    "weights": ("weights = torch.tensor([1.0, -1.0, 0.5, 2.0])", "weights.copy_(torch.tensor("
                "[3.0, 0.5, -2.0, 1.0]))", "{e} * weights"),
    "alpha": ("alpha = 0.5", "alpha = 2.0", "{e} * alpha"),
    "steps": ("steps = 1", "steps = 3", "{e} * steps"),
    "table": ('table = {"w": 1.5}', 'table["w"] = -2.0', '{e} * table["w"]'),
}
#: names ``between()`` rebinds (a ``global`` statement); the others are mutated in place
REBOUND = ("scale", "alpha", "steps")

#: caller-owned objects the function reads and writes: name -> definition
BUFFERS = {
    "buf": "buf = torch.zeros(4)",
    "cache": 'cache = {"last": torch.zeros(4)}',
}

MODULES = {
    "RunningMean": '''\
class RunningMean(torch.nn.Module):
    """A running mean of what it sees (BatchNorm's running statistics, alone)."""

    def __init__(self):
        super().__init__()
        self.register_buffer("running_mean", torch.zeros(4))
        self.momentum = 0.1

    def forward(self, v):
        self.running_mean.mul_(1 - self.momentum).add_(self.momentum * v)
        return v - self.running_mean


running = RunningMean()''',
    "Queue": '''\
class Queue(torch.nn.Module):
    """A memory queue of keys and the pointer to its next slot (MoCo's, small)."""

    def __init__(self):
        super().__init__()
        self.register_buffer("keys", torch.zeros(3, 4))
        self.register_buffer("ptr", torch.zeros((), dtype=torch.long))

    def forward(self, v):
        i = int(self.ptr)
        self.keys[i] = v.detach()
        self.ptr.fill_((i + 1) % 3)
        return v + self.keys.mean(0)


queue = Queue()''',
}
#: a module piece's instance name
INSTANCE = {"RunningMean": "running", "Queue": "queue"}

#: custom Functions: name -> source. ``Clamp*``: max(v, 0) with the backward's mask written in
#: place; ``Square*``: v * v with the forward written in place.
FUNCTIONS = {
    "ClampOld": '''\
class ClampOld(torch.autograd.Function):
    @staticmethod
    def forward(ctx, v):
        ctx.save_for_backward(v)
        return v.clamp(min=0)

    @staticmethod
    def backward(ctx, g):
        (v,) = ctx.saved_tensors
        g = g.clone()
        g[v < 0] = 0
        return g''',
    "SquareOld": '''\
class SquareOld(torch.autograd.Function):
    @staticmethod
    def forward(ctx, v):
        ctx.save_for_backward(v)
        out = v.clone()
        out.mul_(v)
        return out

    @staticmethod
    def backward(ctx, g):
        (v,) = ctx.saved_tensors
        return 2 * v * g''',
    "ClampNew": '''\
class ClampNew(torch.autograd.Function):
    @staticmethod
    def forward(v):
        return v.clamp(min=0)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])

    @staticmethod
    def backward(ctx, g):
        (v,) = ctx.saved_tensors
        g = g.clone()
        g[v < 0] = 0
        return g''',
    "ClampVmap": '''\
class ClampVmap(torch.autograd.Function):
    generate_vmap_rule = True

    @staticmethod
    def forward(v):
        return v.clamp(min=0)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])
        ctx.save_for_forward(inputs[0])

    @staticmethod
    def backward(ctx, g):
        (v,) = ctx.saved_tensors
        g = g.clone()
        g[v < 0] = 0
        return g

    @staticmethod
    def jvp(ctx, t):
        (v,) = ctx.saved_tensors
        return t * (v >= 0)''',
    "SquareNew": '''\
class SquareNew(torch.autograd.Function):
    generate_vmap_rule = True

    @staticmethod
    def forward(v):
        out = torch.zeros_like(v)
        out.copy_(v)
        out.mul_(v)
        return out

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])

    @staticmethod
    def backward(ctx, g):
        (v,) = ctx.saved_tensors
        return 2 * v * g''',
}
OLD_STYLE = ("ClampOld", "SquareOld")
