"""A person's config file that is not YAML (`launcher.config.yaml_files`): one line naming the file, line and column
and the problem, then the fix for a file; before, 85 lines of PyYAML frames and the fix for an option value."""

from __future__ import annotations

from launcher.config.yaml_files import YAML_FIX


def test_a_config_file_that_is_not_yaml_is_one_line_naming_its_place_then_the_fix(tmp_path, launcher_here):
    experiments = tmp_path / "conf" / "experiment"
    experiments.mkdir(parents=True)
    (experiments / "bad.yaml").write_text("# @package _global_\ntrain:\n  epochs: 3\n   batch: [1,2\n")
    done = launcher_here(
        ["--config-dir", str(tmp_path / "conf"), "experiment=bad", f"hydra.run.dir={tmp_path}/run"], tmp_path
    )
    assert done.returncode == 1
    assert f"{experiments / 'bad.yaml'}:4:9: mapping values are not allowed here (not valid YAML)" in done.stderr
    assert YAML_FIX in done.stderr and "give that key one of the listed options" not in done.stderr
    assert "Traceback" not in done.stderr and "scanner.py" not in done.stderr and len(done.stderr.splitlines()) < 8
    assert not (tmp_path / "run").exists()
