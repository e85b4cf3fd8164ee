"""The docs cannot drift from the CLI: every command in a block marked runnable is run, on a tiny config.

A fenced block preceded by `<!-- runnable -->` in README.md or docs/*.md is runnable. Its
`python -m launcher ...` lines run each in a temporary directory of its own, with overrides that shrink it
to one short epoch; a command that names an earlier run (`eval.run=exp1`) runs after the command that
made it (`name=exp1`), in the same directory. A fenced block preceded by `<!-- file: <path> -->` is a file the
page shows (a person's module or config): it is written at that path in each directory the page's commands run in.
Commands two pages give alike (the same commands opening a chain of each, naming none of the files a page shows)
run once, in the longer chain.

docs/api.md, the plugin API's reference, is checked in this process without training: its files are written, the
entry points its `pyproject.toml` declares are installed (faked), each `<!-- run: python -->` block is run, and each
`<!-- resolved -->` command is composed and resolved, then its data, model, task and callbacks built by the
launcher's own functions.
"""

from __future__ import annotations

import re
import shlex
import sys
from pathlib import Path

import pytest
import tomllib
import warm
from support import plugins
from support.config import ROOT, config
from support.pages import MARK, chains, commands, marked_blocks, page_files, runnable_blocks

RUN_PYTHON = "<!-- run: python -->"
RESOLVED = "<!-- resolved -->"
API = ROOT / "docs" / "api.md"
GALLERY = ROOT / "docs" / "gallery.md"  # its projects train once, in tests/e2e/test_gallery.py, compared with Keras fit
PAGES = [ROOT / "README.md", *sorted(p for p in (ROOT / "docs").glob("*.md") if p != GALLERY)]
# One epoch of two steps, one validation step, a small MLP where the command does not choose the model.
SHRINK = [
    "train.epochs=1",
    "train.max_steps_per_epoch=2",
    "train.max_validation_steps=1",
    "tracking.system_metrics=false",
    "tracking.log_model=false",
]


def needs_a_process(args: list[str]) -> bool:
    """A sweep or local workers start processes; a command that splits the CPU differently needs a fresh runtime."""
    return any(
        a in ("-m", "--multirun")
        or a.startswith(("strategy=multi_worker", "strategy.local_workers", "strategy.devices"))
        for a in args
    )


def run_on_another_page(page: Path, chain: list[str], every: list[tuple[Path, list[str]]]) -> bool:
    """The same commands open a chain of another page (the longest, or the first page's of equal ones) and name none
    of the files `page` shows (a page's files are read only by the commands that name them: its search path,
    builder, loader): that chain runs them once for both pages."""
    roots = {Path(path).parts[0].removesuffix(".py") for path in page_files(page.read_text())}
    if any(roots & set(re.split(r"[=:/\[\],]+", command)) for command in chain):
        return False
    first = next(i for i, (p, c) in enumerate(every) if p == page and c is chain)
    return any(
        other != page and longer[: len(chain)] == chain and (len(longer) > len(chain) or i < first)
        for i, (other, longer) in enumerate(every)
    )


EVERY_CHAIN = [(page, chain) for page in PAGES for chain in chains(page)]
CHAINS = [(page, chain) for page, chain in EVERY_CHAIN if not run_on_another_page(page, chain, EVERY_CHAIN)]


def test_the_readme_and_the_pages_have_runnable_blocks_and_they_are_launcher_commands():
    found = {page.name: commands(page) for page in PAGES}
    assert len(found["README.md"]) >= 5 and found["your_model.md"], found
    for page, listed in found.items():
        for command in listed:
            assert shlex.split(command)[:3] == ["python", "-m", "launcher"], (page, command)


def test_every_command_of_every_page_runs_and_one_shared_by_two_pages_runs_once():
    ran = [command for _, chain in CHAINS for command in chain]
    for page in PAGES:
        assert set(commands(page)) <= set(ran), page.name
    shared = [(page.name, chain) for page, chain in EVERY_CHAIN if (page, chain) not in CHAINS]
    for _, chain in shared:
        assert chain[0] in ran  # in the other page's chain, which begins with it
    page = ROOT / "docs" / "your_model.md"  # its files (shop.py, conf/) named by a command: never run elsewhere
    assert not run_on_another_page(page, ["python -m launcher model=custom model.builder=shop:build"], [(page, [])])


def test_a_block_without_the_mark_is_not_run_and_continuations_are_joined():
    text = (
        "```bash\npython -m launcher not_run=1\n```\n" + MARK + "\n```bash\n"
        "python -m launcher a=1   # comment\npython -m launcher \\\n    b=2\n```\n"
    )
    assert runnable_blocks(text) == [["python -m launcher a=1", "python -m launcher b=2"]]


def test_a_file_block_is_a_file_of_the_page_and_not_a_command():
    text = "<!-- file: pkg/conf/x.yaml -->\n```yaml\na: 1\nb: 2\n```\n" + MARK + "\n```bash\npython -m launcher\n```\n"
    assert page_files(text) == {"pkg/conf/x.yaml": "a: 1\nb: 2\n"}
    assert runnable_blocks(text) == [["python -m launcher"]]


def test_a_command_that_uses_an_earlier_run_runs_after_it_in_its_directory():
    page = ROOT / "docs" / "your_model.md"
    (first, *_), *_ = [chain for chain in chains(page) if len(chain) > 1]
    assert "name=exp1" in first


@pytest.mark.slow
@pytest.mark.parametrize(
    ("page", "chain"), CHAINS, ids=[f"{p.name}:{c[0][19:60] or 'the default job'}" for p, c in CHAINS]
)
def test_every_runnable_command_runs(page, chain, tmp_path, launcher_here):
    """Each command as typed, through the launcher's entry: in this process, or in a process of its own when it
    starts processes (a sweep, local workers). The files the page shows are written there first."""
    for path, content in page_files(page.read_text()).items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(content)
    for command in chain:
        args = shlex.split(command)[3:]  # after "python -m launcher"
        if needs_a_process(args):
            done = warm.run([sys.executable, "-m", "launcher", *args, *SHRINK], cwd=tmp_path, timeout=600)
        else:
            done = launcher_here([*args, *SHRINK], tmp_path)
        assert done.returncode == 0, f"{page.name}: {command}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
        assert "Plan:" in done.stdout or "mode=" in command, command


# ------------------------------------------------------------- docs/api.md, in this process


@pytest.fixture
def api_plugin(tmp_path, monkeypatch):
    """docs/api.md's plugin as if pip installed it: its files on the path, its pyproject's entry points; the model and
    dataset choices it adds to Hydra's store, and its modules, gone afterwards."""
    from hydra.core.config_store import ConfigStore

    text = API.read_text()
    files = page_files(text)
    for path, content in files.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(content)
    monkeypatch.syspath_prepend(str(tmp_path))
    plugins.install(monkeypatch, tomllib.loads(files["pyproject.toml"])["project"]["entry-points"])
    repo = ConfigStore.instance().repo
    before = {group: set(repo[group]) if group in repo else None for group in ("model", "dataset")}
    yield text
    for group, names in before.items():
        if names is None:
            repo.pop(group, None)
        else:
            for name in set(repo.get(group, {})) - names:
                del repo[group][name]
    for module in [m for m in sys.modules if m.split(".")[0] in {Path(p).parts[0].removesuffix(".py") for p in files}]:
        del sys.modules[module]


def test_the_api_page_shows_every_piece_and_its_python_runs(api_plugin):
    for piece in ("acme_plugin/data.py", "acme_plugin/models.py", "acme_plugin/losses.py", "acme_plugin/metrics.py"):
        assert piece in page_files(api_plugin)
    assert "acme_plugin/callbacks.py" in page_files(api_plugin) and "pyproject.toml" in page_files(api_plugin)
    assert "acme_plugin/exports.py" in page_files(api_plugin)
    blocks = marked_blocks(api_plugin, RUN_PYTHON)
    assert len(blocks) >= 4
    for block in blocks:
        exec(compile(block, str(API), "exec"), {})  # an assertion in the page that fails fails here


def test_the_api_pages_plugin_is_chosen_by_short_names_and_every_piece_builds(api_plugin):
    """The page's command as the CLI composes it (the plugin's config package on the search path), resolved; then the
    data loaded, the model built, the task's loss and metrics and the callback made, one batch through them."""
    from fakes import CPU_PLAIN
    from hydra.core.config_store import ConfigStore

    from launcher.__main__ import plugin_search_path
    from launcher.config.schema import register_plugins
    from launcher.config.tasks import epoch_metrics, monitor_problems
    from launcher.plan.resolve import resolve
    from launcher.train.callbacks import make_callbacks
    from launcher.train.labels import fit_to_task
    from launcher.train.registry import DATASETS, MODELS
    from launcher.train.tasks import make_task

    ((command,),) = runnable_blocks(api_plugin, RESOLVED)
    register_plugins(ConfigStore.instance())
    chosen = config(*plugin_search_path(shlex.split(command)[3:]))
    plan = resolve(chosen, CPU_PLAIN)
    assert plan.task.loss == "focal" and "acme_plugin.losses:focal" in plan.task.reason("loss")
    assert list(plan.task.metrics) == ["accuracy", "confidence"]
    assert plan.export.formats == ["keras", "weights_npz"]
    assert (chosen.model.builder, chosen.model.params) == ("acme_plugin.models:build", {"units": 32})  # its YAML
    assert chosen.dataset.loader == "acme_plugin.data:load"
    source = fit_to_task(DATASETS.get(chosen.dataset.name).load(chosen.dataset), plan.task.name)
    model = MODELS.get(chosen.model.name).build(chosen.model, source)
    task = make_task(chosen.task, source)
    (callback,) = make_callbacks(chosen.train)
    x, y = source.train
    outputs = model(x[:8])
    assert tuple(outputs.shape) == (8, 2) and model.layers[1].units == 32
    assert tuple(task.per_example_loss(y[:8], outputs).shape) == (8,)
    task.update(task.train_metrics, y[:8], outputs)
    assert [m.name for m in task.train_metrics] == ["accuracy", "confidence"]
    assert 0.5 <= float(task.train_metrics[1].result()) <= 1.0  # the mean of the highest of two probabilities
    assert type(callback).__name__ == "StopAtLoss" and callback.threshold == 0.05
    assert not monitor_problems(chosen, "classification", epoch_metrics([m.name for m in task.train_metrics]))
