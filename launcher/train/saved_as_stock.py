"""A swapped layer class that `.keras` and `.weights.h5` files name as the stock Keras class it stands in for.

Two things name a layer in those files. Its config's class: Keras writes a class's public API name when it has one
(`api_export.REGISTERED_OBJS_TO_NAMES`); only the object-to-name direction is added, so loading that name still gives
the stock class. Its weights' place: Keras files them under the snake-cased class `__name__` (`dense_3`, numbered
among the layers of the same name), so the class keeps the stock name. Files written by a swapped model are then the
stock model's, and load in a Keras without the launcher. This uses a private Keras table: the swaps' `.keras` tests
fail if a Keras release moves it.
"""

from __future__ import annotations

from keras.src import api_export


def save_as_stock(swapped: type, stock: type, api_name: str) -> None:
    """Name `swapped` as `stock` (public API name `api_name`) in every file Keras writes."""
    swapped.__name__ = swapped.__qualname__ = stock.__name__
    api_export.REGISTERED_OBJS_TO_NAMES[swapped] = api_name
