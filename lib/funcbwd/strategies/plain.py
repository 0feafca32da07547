"""``plain``: the legacy formula exactly as written. Reproduces the historical failure."""

from .base import Strategy


class Plain(Strategy):
    name = "plain"
    summary = "legacy in-place formula as written (reproduces the failure)"
