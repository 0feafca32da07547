"""``plain``: the legacy formula exactly as written. Reproduces the historical failure."""

from funcbwd.strategies.base import Strategy


class Plain(Strategy):
    name = "plain"
    summary = "legacy in-place formula as written (reproduces the failure)"
