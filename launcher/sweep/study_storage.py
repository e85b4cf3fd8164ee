"""An Optuna search's study database, made ready before the sweeper opens it.

The Hydra Optuna sweeper (1.3) allows only optuna 2.x, whose SQL storage records its schema
revision on a connection it never commits: under SQLAlchemy 2 (which MLflow brings) the revision
is rolled back and every open of the database after creating it fails with a bare
`assert version is not None`. Creating the tables and recording the revision in one committed
transaction first leaves optuna a database it accepts, so `load_if_exists` can continue a study.
"""

from __future__ import annotations

import os


def prepare(storage: object) -> None:
    """Make an `sqlite:///` study storage openable by optuna 2.x; anything else is left alone."""
    if not isinstance(storage, str) or not storage.startswith("sqlite:///"):
        return
    try:
        import optuna
    except ImportError:  # no Optuna search without the sweeps extra; the sweeper will say so
        return
    if int(optuna.__version__.split(".")[0]) >= 3:
        return
    import alembic.config
    import alembic.migration
    import alembic.script
    import optuna.storages._rdb as rdb
    import sqlalchemy
    from optuna.storages._rdb import models

    engine = sqlalchemy.create_engine(storage)
    try:
        with engine.begin() as connection:
            context = alembic.migration.MigrationContext.configure(connection)
            if context.get_current_revision() is not None:
                return
            models.BaseModel.metadata.create_all(connection)
            here = os.path.dirname(rdb.__file__)
            settings = alembic.config.Config(os.path.join(here, "alembic.ini"))
            settings.set_main_option("script_location", os.path.join(here, "alembic"))
            scripts = alembic.script.ScriptDirectory.from_config(settings)
            context.stamp(scripts, scripts.get_current_head())
    finally:
        engine.dispose()
