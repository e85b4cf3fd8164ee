"""The launcher's Optuna search as a Hydra sweeper plugin (`hydra/sweeper=search`); the logic is
`launcher.sweep.search`. Hydra imports this module in every process it starts: keep it this small."""

from launcher.sweep import search


class SearchSweeper(search.Search):
    """`-m hparams_search=optuna`: see launcher.sweep.search."""
