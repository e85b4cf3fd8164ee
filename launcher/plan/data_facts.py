"""What the loaded data tells the resolver: facts only the data has (the machine's are in `environment`).

The rules decide by them as they decide by the machine: a model that takes string inputs (raw text, string
categories read by a StringLookup, TextVectorization or Hashing inside it) cannot be compiled by XLA, and Keras's
adapted preprocessing layers beside them are built for float32. The launch loads the data after the first
resolve (TensorFlow's devices must be set before), finds these facts and resolves again with them; the Plan
records why `auto` kept off what the model cannot run.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DataFacts:
    """The model's inputs as the training step receives them (after the loader's preprocess)."""

    string_inputs: tuple[str, ...] = ()  # inputs that are strings, by feature name (`inputs` for one array)

    @property
    def strings(self) -> str:
        """The string inputs as the Plan names them ("" when there are none)."""
        return ", ".join(repr(name) for name in self.string_inputs)


NO_FACTS = DataFacts()  # before the data is loaded, or data of numbers only
