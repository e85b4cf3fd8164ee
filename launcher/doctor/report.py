"""The examination as a person reads it: Markdown in the run dir, a table on the console, a plot."""

from __future__ import annotations

import math
from pathlib import Path

from launcher.doctor.trials import render_overrides

REPORT_FILE = "doctor.md"
PLOT_FILE = "doctor_loss_scale.png"


def verdict(exam) -> str:
    if exam.healthy:
        return "healthy: every trial trained like the float32 one-device baseline"
    if exam.addition == "config":
        return "refused before training: the config or its data (below)"
    what = "the float32 one-device baseline itself" if exam.addition == "baseline" else f"adding {exam.addition}"
    fix = f"; fix verified: {_overrides(exam.recommendation)}" if exam.recommendation else "; no fix verified"
    return f"broken by {what}{fix}"


def _overrides(fix) -> str:
    return render_overrides(fix.overrides)


def command(examined: str, fix: dict) -> str:
    """The examined command line with the fix applied: an override of a key the fix sets is replaced."""

    kept = [token for token in examined.split() if token.partition("=")[0].lstrip("+~") not in fix]
    return " ".join(["python -m launcher", *kept, render_overrides(fix)])


def _loss(value: float) -> str:
    return f"{value:.4g}" if math.isfinite(value) else str(value)


def _trial_row(trial) -> str:
    step = f" at step {trial.stop_step}" if trial.stop_step else ""
    skipped = sum(trial.skips)
    note = trial.detail.splitlines()[0][:160] if trial.detail else ""
    return (
        f"| {trial.name} | `{trial.overrides_text}` | **{trial.status}**{step} | {len(trial.losses)} | "
        f"{_loss(trial.final_loss)} | {skipped} | {note} |"
    )


def markdown(exam, plot: Path | None) -> str:
    lines = [
        f"# Doctor: `python -m launcher mode=doctor {exam.overrides}`".rstrip(),
        "",
        f"**Verdict:** {verdict(exam)}.",
        "",
        f"Examined in {exam.seconds:.0f} s.",
        "",
        "## Environment",
        "",
        "| check | found | verdict |",
        "|---|---|---|",
    ]
    lines += [f"| {check} | {found} | {v} |" for check, found, v in exam.checks if check != "config and data"]
    refused = [found_v for check, _, found_v in exam.checks if check == "config and data"]
    if refused:
        lines += ["", "## Refused before training", "", "```", refused[0], "```"]
    if exam.trials:
        lines += [
            "",
            "## Bisection",
            "",
            "Each trial adds one feature of the config to the one before it.",
            "",
            "| trial | overrides | status | steps | final loss | skipped | note |",
            "|---|---|---|---|---|---|---|",
        ]
        lines += [_trial_row(t) for t in exam.trials]
    if exam.culprit is not None:
        c = exam.culprit
        where = f"layer `{c.layer}`" if c.layer else "no single layer"
        lines += ["", "## First non-finite value", "", f"Step {c.step}, {c.direction}: {where}: {c.detail}."]
    lines += ["", "## Float16 scan", ""]
    if exam.risks:
        lines += ["| layer | risk | found | fix |", "|---|---|---|---|"]
        lines += [
            f"| {r.layer} | {r.kind}{' (severe)' if r.severe else ''} | {r.detail} | `{r.fix}` |" for r in exam.risks
        ]
    else:
        lines.append("No layer exceeds float16's range on a training batch; no risky op found.")
    if exam.fixes:
        lines += ["", "## Fixes tried", "", "| overrides | why | status | final loss |", "|---|---|---|---|"]
        lines += [
            f"| `{_overrides(fix)}` | {fix.why} | **{trial.status}** | {_loss(trial.final_loss)} |"
            for fix, trial in exam.fixes
        ]
    lines += ["", "## Recommendation", ""]
    if exam.healthy:
        lines.append("Nothing to change.")
    elif exam.recommendation is not None:
        lines += [
            f"Verified by a trial: `{command(exam.overrides, exam.recommendation.overrides)}`",
            "",
            exam.recommendation.why + ".",
        ]
    else:
        lines.append("No candidate fix trained; the sections above say where it breaks.")
    if plot is not None:
        lines += ["", "## Loss scale per step", "", f"![loss scale]({plot.name})"]
    return "\n".join(lines) + "\n"


def console(exam) -> str:
    rows = [f"Doctor: {verdict(exam)}"]
    for trial in exam.trials:
        step = f" at step {trial.stop_step}" if trial.stop_step else ""
        rows.append(f"  {trial.name:<40} {trial.status + step:<24} final loss {_loss(trial.final_loss)}")
    if exam.culprit is not None:
        rows.append(
            f"  first non-finite: step {exam.culprit.step}, {exam.culprit.direction}, "
            f"layer {exam.culprit.layer}: {exam.culprit.detail}"
        )
    for risk in exam.risks:
        if risk.severe:
            rows.append(f"  float16 risk: {risk.layer}: {risk.detail} -> {risk.fix}")
    for fix, trial in exam.fixes:
        rows.append(f"  fix {_overrides(fix):<38} {trial.status}")
    if exam.recommendation is not None:
        rows.append(f"  recommended (verified): {_overrides(exam.recommendation)}")
    refused = [found for check, _, found in exam.checks if check == "config and data"]
    rows += refused
    return "\n".join(rows)


def plot_loss_scale(exam, path: Path) -> Path | None:
    """Loss scale (log2) and loss per step for every trial that scaled its loss; None when none did."""
    trials = [t for t in exam.trials + [trial for _, trial in exam.fixes] if t.scales]
    if not trials:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 6), sharex=True)
    for trial in trials:
        steps = range(1, len(trial.scales) + 1)
        top.plot(steps, trial.scales, label=trial.name)
        bottom.plot(range(1, len(trial.losses) + 1), trial.losses, label=trial.name)
    top.set_yscale("log", base=2)
    top.set_ylabel("loss scale")
    bottom.set_ylabel("loss")
    bottom.set_xlabel("global step")
    top.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
