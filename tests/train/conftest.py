"""Fixtures the layer tests share."""

from __future__ import annotations

import keras
import pytest


@pytest.fixture
def policy(request):
    """The global dtype policy `request.param` for one test (parametrize with indirect=True), float32 after it."""
    keras.mixed_precision.set_global_policy(request.param)
    yield request.param
    keras.mixed_precision.set_global_policy("float32")
