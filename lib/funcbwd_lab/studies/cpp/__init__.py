"""The design question in C++ (issue 39): the approaches of functorch#241 built as a C++
extension against the installed torch, run through the same matrix as the Python strategies,
and measured in instructions and time beside torch's own C++ formula (docs/cpp.md).

* :mod:`.build`: the extension (``csrc/``), built on first use and cached under ``build/cpp``;
  :func:`.build.load` loads it, :func:`.build.unavailable` says why it cannot be built here;
* :mod:`.generate`: ``traced``'s graphs emitted as C++ at build time;
* the strategies (:mod:`funcbwd_lab.strategies.cpp`) find the extension through this package,
  which wires it in when imported.
"""

from funcbwd_lab.strategies import cpp as _strategies
from funcbwd_lab.studies.cpp import build as _build

_strategies.use_extension(_build.load, _build.unavailable)
