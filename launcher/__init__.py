"""launcher: a declarative training launcher for TensorFlow / Keras 3, tracked in MLflow."""

__version__ = "0.1.0"
