"""Hydra discovers the launcher's sweeper here (plugins must live under `hydra_plugins`)."""
