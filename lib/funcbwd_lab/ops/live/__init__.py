"""The live corpus: the in-place fast paths today's core still takes (docs/live-sites.md), one
module per helper family, each holding the helper (both branches, selected per site by ``fast=``)
and the registrations of its sites right below it.

:mod:`.backward` (backward and control sites) and :mod:`.jvp` (forward-mode sites) document the
contracts, import their families in registration order and hold the site tables (``SITES``,
``SITE_NAMES``, ...); :mod:`.common` has the site record and the registration helpers. Group
``live`` is opt-in (``funcbwd_lab.ops.registry.OPT_IN_GROUPS``). Importing the package registers the
backward sites, then the jvp sites.
"""

from funcbwd_lab.ops.live import backward  # noqa: F401  (registrations, in registry order)
from funcbwd_lab.ops.live import jvp  # noqa: F401
