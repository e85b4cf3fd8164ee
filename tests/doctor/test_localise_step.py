"""Which step the doctor replays layer by layer: the first step whose non-finite gradients were applied, not the
step whose loss showed it (by then the weights are NaN and the replay finds only a forward symptom)."""

from __future__ import annotations

from launcher.doctor.trials import Trial


def trial(grads_finite: list[bool], skips: list[bool]) -> Trial:
    return Trial("t", {}, grads_finite=grads_finite, skips=skips)


def test_without_loss_scaling_the_first_nonfinite_gradient_is_the_step():
    # float32: nothing skips the update; the gradients broke at step 6, the loss went NaN at step 7
    assert trial([True] * 5 + [False, False], [False] * 7).first_applied_nonfinite_step == 6


def test_steps_the_loss_scale_skipped_are_not_where_it_broke():
    # dynamic loss scaling skips steps 2 and 3 (overflow while the scale settles); step 5's bad update was applied
    grads = [True, False, False, True, False]
    assert trial(grads, [False, True, True, False, False]).first_applied_nonfinite_step == 5
    assert trial(grads, [False, True, True, False, True]).first_applied_nonfinite_step is None


def test_all_finite_gradients_name_no_step():
    assert trial([True] * 4, [False] * 4).first_applied_nonfinite_step is None
