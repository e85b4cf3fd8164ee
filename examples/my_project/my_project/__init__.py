"""An example project trained by the launcher: its own model, data, loss and metric (not part of the launcher)."""
