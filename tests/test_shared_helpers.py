"""The helpers the studies share instead of keeping copies: each does what its callers rely on."""

from __future__ import annotations

import json
import math

import pytest
import torch

from funcbwd_lab.studies.bench import results, timing


def test_strict_json_writes_what_was_not_measured_as_null():
    doc = {"a": [1.0, math.nan, (math.inf, -math.inf)], "b": {"c": 2}}
    out = results.strict_json(doc)
    assert out == {"a": [1.0, None, [None, None]], "b": {"c": 2}}
    json.dumps(out, allow_nan=False)  # standard JSON: a NaN left in would raise here


def test_one_torch_thread_restores_the_count_even_on_error():
    before = torch.get_num_threads()
    with pytest.raises(RuntimeError):
        with timing.one_torch_thread():
            assert torch.get_num_threads() == 1
            raise RuntimeError("inside")
    assert torch.get_num_threads() == before
