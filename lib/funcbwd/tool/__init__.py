"""tool: :func:`funcbwd.functionalized`, the workbench's recommendation (``traced``) for your own code.

:mod:`funcbwd.tool.functionalized` (functions), :mod:`funcbwd.tool.functions`
(``torch.autograd.Function`` subclasses), :mod:`funcbwd.tool.cache` (the bounded graph cache). It
sits on :mod:`funcbwd.fx` (tracing, copy elision, the check, codegen) and imports nothing above it.
"""
