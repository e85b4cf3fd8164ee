"""Hydra multirun into MLflow: parent + children, failed jobs recorded, isolation, summary artifacts."""

from __future__ import annotations

import csv
import io
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import warm
import yaml
from support.config import ROOT
from support.tracking import SHARED_SERVER_GROUP, store

SMALL = ["model.hidden_units=[16]", "train.epochs=2", "scaling.batch_size=64", "checkpoint.enabled=false"]


def sweep(
    tmp_path: Path, *overrides: str, uri: str | None = None, own_session: bool = False
) -> subprocess.CompletedProcess:
    """`own_session`: the sweep leads a session of its own (as a person's from a terminal does), so it starts its
    own forkserver (the test process's is in another session)."""
    uri = uri or store(tmp_path / "mlflow.db")
    args = [
        sys.executable,
        "-m",
        "launcher",
        "-m",
        *overrides,
        *SMALL,
        f"hydra.sweep.dir={tmp_path}/sweep",
        f"tracking.uri={uri}",
    ]
    if not own_session:
        return warm.run(args, cwd=ROOT, timeout=900)
    process = warm.Popen(
        args, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    out, err = process.communicate(timeout=900)
    return subprocess.CompletedProcess(args, process.returncode, out, err)


def parent_and_children(uri: str):
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("launcher")
    runs = client.search_runs([experiment.experiment_id])
    parents = [r for r in runs if r.data.tags.get("sweep.role") == "parent"]
    assert len(parents) == 1
    parent = parents[0]
    kids = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    return client, parent, kids


def check_sweep(client, parent, kids, names):
    assert sorted(k.info.run_name for k in kids) == sorted(names)
    assert all(k.info.status == "FINISHED" for k in kids)
    assert parent.info.status == "FINISHED"
    sweep_id = parent.data.tags["sweep_id"]
    for kid in kids:
        assert kid.data.tags["sweep_id"] == sweep_id
        assert kid.data.tags["sweep.overrides"] == kid.info.run_name
        assert "derived.batch.global" in kid.data.params
        assert [m.step for m in client.get_metric_history(kid.info.run_id, "val_loss")] == [0, 1]
        every, total = (int(kid.data.params[k]) for k in ("tracking.step_metrics_every", "derived.train.total_steps"))
        assert [m.step for m in client.get_metric_history(kid.info.run_id, "step/loss")] == list(
            range(every, total + 1, every)
        )
    # The runs differ in params only by what the sweep varied and what the resolver derived from it.
    swept = {name.partition("=")[0] for kid in kids for name in kid.info.run_name.split(",")}
    differing = {
        k for k in set().union(*(kid.data.params for kid in kids)) if len({kid.data.params.get(k) for kid in kids}) > 1
    }
    assert differing and all(k.split(".")[0] in swept or k.startswith("derived.") for k in differing), differing
    # The collapsed sweep row: swept values as params, the best child's final metrics, its name.
    for key in swept:
        values = {
            name.partition("=")[2]
            for kid in kids
            for name in kid.info.run_name.split(",")
            if name.startswith(key + "=")
        }
        assert parent.data.params[f"sweep.{key}"] == ",".join(sorted(values))
    best = {kid.info.run_id: kid for kid in kids}[parent.data.tags["sweep.best_run_id"]]  # ties: any of them
    assert best.data.metrics["val_accuracy"] == max(kid.data.metrics["val_accuracy"] for kid in kids)
    assert parent.data.metrics["val_accuracy"] == pytest.approx(best.data.metrics["val_accuracy"])
    assert parent.data.tags["sweep.best_overrides"] == best.info.run_name
    artifacts = {a.path for a in client.list_artifacts(parent.info.run_id, "summary")}
    assert artifacts == {
        "summary/summary.csv",
        "summary/summary.md",
        "summary/val_loss_curves.png",
        "summary/val_accuracy_by_job.png",
    }
    local = client.download_artifacts(parent.info.run_id, "summary/summary.csv")
    rows = list(csv.DictReader(io.StringIO(Path(local).read_text())))
    by_id = {k.info.run_id: k for k in kids}
    assert {r["run_id"] for r in rows} == set(by_id)
    for row in rows:
        kid = by_id[row["run_id"]]
        assert float(row["val_accuracy"]) == pytest.approx(kid.data.metrics["val_accuracy"])
        assert float(row["examples_per_sec"]) == pytest.approx(kid.data.metrics["examples_per_sec"])
        assert row["status"] == "FINISHED"


NAMES = [
    "precision=fp32,strategy=default",
    "precision=fp32,strategy=mirrored",
    "precision=bf16,strategy=default",
    "precision=bf16,strategy=mirrored",
]


REGISTERED = "sweep-e2e-digits"  # the server's registry is shared by the suite: a name of this module's own


@pytest.fixture(scope="module")
def server_sweep(tmp_path_factory, shared_mlflow_server):
    """A 2x2 sweep logged to a real `mlflow server` on 127.0.0.1 (the suite's shared one: the sweep's experiment,
    `launcher`, is its own there), shared by the API and browser tests."""
    folder = tmp_path_factory.mktemp("server_sweep")
    url, _ = shared_mlflow_server
    done = sweep(
        folder,
        "precision=fp32,bf16",
        "strategy=default,mirrored",
        "tracking.system_metrics_interval=0.2",
        "+tracking.tags.team=vision",
        f"tracking.register_model={REGISTERED}",
        uri=url,
    )
    return folder, url, done


@pytest.mark.slow
@pytest.mark.xdist_group(SHARED_SERVER_GROUP)  # one worker runs the module's sweep against the server once
def test_sweep_against_a_real_tracking_server(server_sweep):
    tmp_path, url, done = server_sweep
    assert done.returncode == 0, done.stderr[-3000:]
    client, parent, kids = parent_and_children(url)
    check_sweep(client, parent, kids, NAMES)
    assert {k.data.tags["plan.replicas"] for k in kids} == {"1", "2"}
    import mlflow
    import numpy as np

    for kid in kids:
        assert any(k.startswith("system/cpu_utilization") for k in kid.data.metrics), sorted(kid.data.metrics)
        assert kid.data.tags["team"] == "vision"
        used = {(d.dataset.name, tuple(t.value for t in d.tags)) for d in kid.inputs.dataset_inputs}
        assert used == {("digits-training", ("training",)), ("digits-validation", ("validation",))}
    # The same data in every job: one digest per split.
    assert len({d.dataset.digest for kid in kids for d in kid.inputs.dataset_inputs}) == 2
    mlflow.set_tracking_uri(url)
    model = mlflow.pyfunc.load_model(f"runs:/{kids[0].info.run_id}/mlflow_model")
    # The digits taken nested or flat (a CSV's row): the signature names the outputs, the MLmodel file both forms.
    assert model.metadata.signature.inputs is None
    assert model.metadata.metadata["inputs"] == {"inputs": "float32 [n, 8, 8, 1], or each example flat: [n, 64]"}
    prediction = model.predict(np.zeros((3, 8, 8, 1), "float32"))  # the task's served form
    assert model.predict(np.zeros((3, 64), "float32"))["label"].tolist() == prediction["label"].tolist()
    assert prediction["probabilities"].shape == (3, 10) and np.isfinite(prediction["probabilities"]).all()
    assert prediction["label"].shape == (3,)
    log = (tmp_path / "sweep" / "0" / "job.log").read_text()
    assert f"{url}/#/experiments/{kids[0].info.experiment_id}/runs/" in log  # the console shows the run's URL
    # tracking.register_model: each job registered a version; the best job's holds the `champion` alias
    # (launcher.sweep.champion), and the parent run and the console say so.
    assert {v.run_id for v in client.search_model_versions(f"name='{REGISTERED}'")} == {k.info.run_id for k in kids}
    champion = client.get_model_version_by_alias(REGISTERED, "champion")
    assert champion.run_id == parent.data.tags["sweep.best_run_id"]
    assert parent.data.tags["registry.champion"] == f"{REGISTERED} v{champion.version}"
    assert f"Registry: {REGISTERED}@champion -> v{champion.version}: " in done.stdout
    # The console names the best job: its overrides, its value, its run dir and run id.
    best = next(k for k in kids if k.info.run_id == parent.data.tags["sweep.best_run_id"])
    assert f"Best job: {best.info.run_name}\n" in done.stdout
    assert f"  run dir              {best.data.tags['run_dir']}\n" in done.stdout
    assert f"  MLflow run id        {best.info.run_id}\n" in done.stdout


def printed_links(console: str) -> dict[str, str]:
    """The MLflow addresses a sweep prints at its end, by what they open."""
    found = re.findall(r"^  the (\d+ jobs side by side|sweep's parent run|experiment's runs)\s+(\S+)$", console, re.M)
    return {("compare" if "side by side" in what else what.split("'")[0]): link for what, link in found}


@pytest.mark.slow
@pytest.mark.xdist_group(SHARED_SERVER_GROUP)
def test_the_pages_a_sweep_prints_open_in_a_real_browser_on_its_runs_and_their_comparison(server_sweep):
    """Chromium (headless, from the OS packages) opens the addresses the sweep printed: the experiment's runs
    table with the sweep's parent row (not MLflow's GenAI overview), and the compare page of its jobs with the
    swept params and final metrics. Screenshots are test artifacts, never written into the repository."""
    from browser import chromium_or_skip, render

    chromium = chromium_or_skip()
    folder, url, done = server_sweep
    assert done.returncode == 0, done.stderr[-3000:]
    client, parent, kids = parent_and_children(url)
    links = printed_links(done.stdout)
    assert set(links) == {"compare", "sweep", "experiment"}, done.stdout[-2000:]
    assert all(link.startswith(f"{url}/#/") for link in links.values())
    table = render(chromium, links["experiment"], screenshot=folder / "mlflow_runs.png", wanted=(parent.info.run_name,))
    assert parent.info.run_name in table  # the runs table, with the sweep's parent row
    assert "Token Usage" not in table and "Detect Issues" not in table  # not the GenAI overview
    note = client.get_run(parent.info.run_id).data.tags["mlflow.note.content"]
    assert links["compare"].removeprefix(url + "/") in note  # the parent's description links the comparison
    shot = folder / "mlflow_compare_sweep.png"
    dom = render(chromium, links["compare"], screenshot=shot, wanted=("derived.precision.policy", "val_accuracy"))
    assert f"Comparing {len(kids)} Runs" in dom
    for value in ("mixed_bfloat16", "float32"):  # the swept precision, as the runs' derived policy
        assert value in dom
    for kid in kids:
        assert kid.info.run_name in dom or kid.info.run_id in dom
    for metric in ("val_accuracy", "val_loss", "step/loss"):
        assert metric in dom
    assert shot.exists() and shot.stat().st_size > 10_000  # for a person to look at


@pytest.mark.slow
def test_parallel_jobs_share_one_sqlite_store_each_in_its_own_process_and_a_refused_job_does_not_stop_the_sweep(
    tmp_path,
):
    """Three jobs at once into one SQLite store: mixed + loss_scale=none is refused (a FAILED run naming the key
    and the fix), the fp32 and bf16 jobs beside it train, each in its own process and in its own precision. (Jobs
    under both strategies: the server sweep above.) The sweep leads its own session: its three joblib workers
    each start a job, all forked by the one forkserver the sweep started before them."""
    done = sweep(
        tmp_path,
        "hydra/launcher=parallel",
        "hydra.launcher.n_jobs=3",
        "precision=mixed,fp32,bf16",
        "loss_scale=none",
        own_session=True,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "database is locked" not in done.stdout + done.stderr
    client, parent, kids = parent_and_children(f"sqlite:///{tmp_path}/mlflow.db")
    by_name = {k.info.run_name: k for k in kids}
    assert sorted(by_name) == sorted(f"precision={p}" for p in ("mixed", "fp32", "bf16"))
    for name, kid in by_name.items():
        if name.startswith("precision=mixed"):
            assert kid.info.status == "FAILED"
            assert "loss_scale='none'" in kid.data.tags["error"] and "fix: loss_scale=dynamic" in kid.data.tags["error"]
        else:
            assert kid.info.status == "FINISHED", (name, kid.data.tags.get("error"))
            assert [m.step for m in client.get_metric_history(kid.info.run_id, "val_loss")] == [0, 1]
    assert parent.info.status == "FINISHED" and parent.data.tags["sweep.failed_jobs"] == "1"
    assert parent.data.tags["sweep.best_overrides"] in by_name
    logs = "".join(p.read_text() for p in (tmp_path / "sweep").glob("*/job.log"))
    assert "database is locked" not in logs
    # A float32 job beside (or after) a bfloat16 one really is float32: a policy never leaks between jobs.
    import keras

    policies: dict[str, set] = {}
    for job in sorted((tmp_path / "sweep").iterdir()):
        if (job / "model.keras").exists():
            model = keras.saving.load_model(job / "model.keras")
            plan = yaml.safe_load((job / "plan.yaml").read_text())
            policy = plan["decisions"]["precision.policy"]["value"]
            policies.setdefault(policy, set()).update(layer.dtype_policy.name for layer in model.layers[1:-1])
    assert policies == {"mixed_bfloat16": {"mixed_bfloat16"}, "float32": {"float32"}}
    # Isolation by construction: each job in its own process, none of them the sweep's, which
    # never loaded TensorFlow.
    state = json.loads((tmp_path / "sweep" / "sweep.json").read_text())
    outcomes = [
        json.loads((job / "outcome.json").read_text())
        for job in sorted((tmp_path / "sweep").iterdir())
        if (job / "outcome.json").exists()
    ]
    pids = [o["pid"] for o in outcomes]
    assert len(pids) == 3 and len(set(pids)) == 3 and state["sweep_pid"] not in pids
    assert state["tensorflow_loaded"] is False
    servers = {o["forked_by"] for o in outcomes}
    assert len(servers) == 1 and None not in servers and state["sweep_pid"] not in servers, servers


def test_slurm_launcher_config_loads():
    from hydra import compose, initialize_config_dir

    from launcher.config.schema import register_configs

    register_configs()
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose("config", overrides=["hydra/launcher=slurm"], return_hydra_config=True)
    assert cfg.hydra.launcher._target_ == "hydra_plugins.hydra_submitit_launcher.submitit_launcher.SlurmLauncher"
    assert cfg.hydra.launcher.timeout_min == 240


def test_job_names_say_what_differs():
    from launcher.sweep.job import job_name, swept_keys

    keys = swept_keys(["precision=fp32,bf16", "strategy=default,mirrored", "train.epochs=2"])
    assert keys == ["precision", "strategy"]
    assert (
        job_name(["precision=bf16", "strategy=mirrored", "train.epochs=2"], keys) == "precision=bf16,strategy=mirrored"
    )


def test_a_job_reads_the_sweep_id_and_parent_run_the_sweep_gave_it_even_when_they_look_like_numbers(tmp_path):
    """A sweep id is 12 hex digits: now and then one reads as a number (`199906e09544`, `inf` unquoted), and its
    jobs' runs were tagged sweep_id=inf (seen failing test_sweep_against_a_real_tracking_server)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from launcher.sweep.job import sweep_overrides

    state = {"sweep_id": "199906e09544", "parent_run_id": "12345e6789", "uri": "sqlite:///mlflow.db"}
    parsed = OverridesParser.create().parse_overrides(sweep_overrides(state, tmp_path / "0"))
    values = {override.key_or_group: override.value() for override in parsed}
    assert values["tracking.sweep_id"] == "199906e09544" and values["tracking.parent_run_id"] == "12345e6789"


def test_a_failed_child_is_recorded_when_each_of_its_writes_first_finds_the_store_locked(tmp_path, monkeypatch):
    """Parallel jobs share one SQLite store: each write of the failed-child path retries a locked database."""
    import mlflow.tracking
    from mlflow.tracking import MlflowClient

    from launcher.sweep.job import _record_failed_child

    uri = f"sqlite:///{tmp_path}/mlflow.db"
    real = MlflowClient(uri)
    parent = real.create_run(real.create_experiment("launcher"), run_name="sweep").info.run_id
    locked_once = []

    class LockedOnceClient(MlflowClient):
        def __getattribute__(self, name):
            method = super().__getattribute__(name)
            if name not in ("get_run", "create_run", "log_batch", "log_artifact", "set_terminated"):
                return method

            def first_call_is_locked(*args, **kwargs):
                if name not in locked_once:
                    locked_once.append(name)
                    raise RuntimeError("(sqlite3.OperationalError) database is locked")
                return method(*args, **kwargs)

            return first_call_is_locked

    monkeypatch.setattr(mlflow.tracking, "MlflowClient", LockedOnceClient)
    log = tmp_path / "job.log"
    log.write_text("launcher: configuration refused\n  xla='maybe': expected one of ['true', 'false', 'auto']\n")
    state = {"uri": uri, "parent_run_id": parent, "sweep_id": "s1"}
    _record_failed_child(state, "xla=maybe", ["xla=maybe"], log, 2)

    assert locked_once == ["get_run", "create_run", "log_batch", "log_artifact", "set_terminated"]
    children = real.search_runs(
        [real.get_run(parent).info.experiment_id], filter_string=f"tags.mlflow.parentRunId = '{parent}'"
    )
    assert len(children) == 1
    child = children[0]
    assert child.info.status == "FAILED" and child.data.params == {"xla": "maybe"}
    assert child.data.tags["exit_code"] == "2" and child.data.tags["sweep.role"] == "child"
