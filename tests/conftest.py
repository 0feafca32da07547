"""Shared pytest setup: markers, and a guard that every test leaves torch's transform state as it
found it (functorch interpreter stack, dispatch TLS, Functionalize inclusion, grad mode, fallback)."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("PYTHONHASHSEED", "0")


def pytest_addoption(parser):
    parser.addoption("--run-slow", action="store_true", default=False,
                     help="also run tests marked slow (fresh Binder venv build, long sweeps)")


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: long tests, skipped unless --run-slow")
    config.addinivalue_line("markers", "browser: drives a real Chromium against JupyterLab/the report")
    config.addinivalue_line("markers", "notebooks: notebook structure checks")


def pytest_collection_modifyitems(config, items):
    if config.getoption("--run-slow"):
        return
    skip = pytest.mark.skip(reason="slow: run with --run-slow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def test_ops_matrix():
    """One fresh run of the saved matrix (8 test ops x every sample, scenario and strategy), shared
    by every test that needs it (tests/test_readme.py, tests/test_expectations.py): about a minute,
    paid once per session."""
    from funcbwd_lab.studies.matrix import matrix

    return matrix.run_test_ops(slow=False)


@pytest.fixture(autouse=True)
def _no_leaked_transform_state(request):
    if request.node.get_closest_marker("browser") or request.node.fspath.ext == ".ipynb":
        yield
        return
    from funcbwd import internals

    before = internals.dispatch_state()
    yield
    after = internals.dispatch_state()
    assert before == after, f"test leaked transform state: {before.describe_difference(after)}"
