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


@pytest.fixture(scope="session")
def stock_keras(tmp_path_factory):
    """The interpreter without the launcher that loads the swapped layers' `.keras` files, one per test process
    (`support.replicas.StockKeras`): the fused BatchNormalization's and the fused Dense's files both go to it."""
    from support.replicas import StockKeras

    server = StockKeras(tmp_path_factory.mktemp("stock_keras"))
    yield server
    server.close()
