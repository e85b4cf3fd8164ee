"""What the loaded data and the built model tell the resolver: facts only they have (the machine's are in
`environment`).

The rules decide by them as they decide by the machine: a model that takes string inputs (raw text, string
categories read by a StringLookup, TextVectorization or Hashing inside it) cannot be compiled by XLA, and Keras's
adapted preprocessing layers beside them are built for float32; a model holding layers Keras marks
`supports_jit=False` (IntegerLookup or Hashing on ids) cannot be compiled by XLA either. The launch loads the data
after the first resolve (TensorFlow's devices must be set before), finds these facts and resolves again with them;
the built model's layers are known once it is built, and a launch where `xla=auto` chose XLA for such a model
(or `precision=auto` a mixed policy for a builder that fails under it and runs under float32) resolves again and
builds again (`launcher.launch.building`). The Plan records why `auto` kept off what the model
cannot run.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DataFacts:
    """The model's inputs as the training step receives them (after the loader's preprocess)."""

    string_inputs: tuple[str, ...] = ()  # inputs that are strings, by feature name (`inputs` for one array)
    uncompilable_layers: tuple[str, ...] = ()  # the built model's layers Keras marks supports_jit=False, by name
    float32_builder: str = ""  # the mixed policy the builder failed under while it runs under float32 ("" none)

    @property
    def shown_strings(self) -> str:
        """The string inputs as the Plan names them ("" when there are none)."""
        return ", ".join(repr(name) for name in self.string_inputs)

    @property
    def shown_layers(self) -> str:
        """The uncompilable layers as the Plan names them (the first five)."""
        more = len(self.uncompilable_layers) - 5
        shown = ", ".join(repr(name) for name in self.uncompilable_layers[:5])
        return shown + (f" and {more} more" if more > 0 else "")


NO_FACTS = DataFacts()  # before the data is loaded, or data of numbers only
