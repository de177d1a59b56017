"""Each loss scaler's update rule against its source (docs/semantics.md "Loss scalers"): the scale sequence, the
skipped steps and the checks over scripted sequences of overflowing (T) and good (F) steps.  Expected values are
worked out from the source's arithmetic by hand, not taken from the implementation."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from advisor.errors import InputError
from advisor.numerics import INF_NAN, SATURATION, Numerics
from advisor.scalers import make_scaler, scale_sequence

T, F = True, False


def _run(name, overflows, **options):
    steps = scale_sequence(make_scaler(name, options), overflows)
    return [s.scale for s in steps], [s.skipped for s in steps], steps[-1].next_scale


def f32(x):
    return float(np.float32(x))


# ---------------------------------------------------------------- torch_npu GradScaler
def test_torch_npu_defaults_start_at_2_16_and_halve_on_overflow_skipping_the_step():
    scales, skipped, nxt = _run("torch_npu", [T, T, F])
    assert scales == [65536.0, 32768.0, 16384.0] and skipped == [T, T, F] and nxt == 16384.0


def test_torch_npu_grows_after_growth_interval_consecutive_good_steps():
    scales, skipped, nxt = _run("torch_npu", [F, F, F, F], growth_interval=3)
    assert scales == [65536.0] * 3 + [131072.0] and skipped == [F] * 4 and nxt == 131072.0


def test_torch_npu_default_growth_interval_is_2000():
    scales, _, nxt = _run("torch_npu", [F] * 2000)
    assert scales[-1] == 65536.0 and nxt == 131072.0


def test_torch_npu_overflow_resets_the_growth_tracker():
    scales, _, nxt = _run("torch_npu", [F, T, F, F], growth_interval=2)
    assert scales == [65536.0, 65536.0, 32768.0, 32768.0] and nxt == 65536.0


def test_torch_npu_growth_to_inf_keeps_the_scale():
    scales, _, nxt = _run("torch_npu", [F], init_scale=3e38, growth_interval=1)
    assert nxt == f32(3e38) and scales == [f32(3e38)]


def test_torch_npu_static_never_skips_and_keeps_its_scale():
    scales, skipped, nxt = _run("torch_npu", [T, T, F], dynamic=False, init_scale=1024.0)
    assert scales == [1024.0] * 3 and skipped == [F, F, F] and nxt == 1024.0


@pytest.mark.parametrize("opt", [{"growth_factor": 1.0}, {"backoff_factor": 1.0}, {"growth_interval": 0},
                                 {"unknown_option": 1}])
def test_torch_npu_refuses_what_its_constructor_refuses(opt):
    with pytest.raises(InputError):
        make_scaler("torch_npu", opt)


# ---------------------------------------------------------------- Apex LossScaler
def test_apex_defaults_2_16_window_2000_and_halving():
    scales, skipped, nxt = _run("apex", [T] + [F] * 2000)
    assert scales[0] == 65536.0 and scales[1] == 32768.0 and skipped[:2] == [T, F]
    assert scales[-1] == 32768.0 and nxt == 65536.0       # the 2000th good step doubles


def test_apex_init_is_capped_by_max_loss_scale_and_growth_too():
    scales, _, nxt = _run("apex", [F, F], init_scale=2.0 ** 30, scale_window=1)
    assert scales == [2.0 ** 24, 2.0 ** 24] and nxt == 2.0 ** 24


def test_apex_min_loss_scale_is_a_floor():
    scales, skipped, nxt = _run("apex", [T, T, T], init_scale=4096.0, min_loss_scale=1024.0)
    assert scales == [4096.0, 2048.0, 1024.0] and skipped == [T, T, T] and nxt == 1024.0


def test_apex_min_loss_scale_zero_is_no_floor():
    # the source tests ``if(self._min_loss_scale)``: 0 is falsy
    _, _, nxt = _run("apex", [T, T], init_scale=1.0, min_loss_scale=0.0)
    assert nxt == 0.25


def test_apex_growth_and_backoff_factors():
    scales, _, nxt = _run("apex", [T, F, F], init_scale=1000.0, scale_backoff_factor=0.25,
                          scale_growth_factor=3.0, scale_window=2)
    assert scales == [1000.0, 250.0, 250.0] and nxt == 750.0


def test_apex_static_scale_never_skips():
    scales, skipped, nxt = _run("apex", [T, F, T], loss_scale=128.0)
    assert scales == [128.0] * 3 and skipped == [F, F, F] and nxt == 128.0


# ---------------------------------------------------------------- Keras 3 LossScaleOptimizer
def test_keras_defaults_2_15_and_halving_without_floor():
    scales, skipped, nxt = _run("keras", [T, T], initial_scale=1.0)
    assert scales == [1.0, 0.5] and skipped == [T, T] and nxt == 0.25
    assert _run("keras", [F])[0] == [32768.0]


def test_keras_doubles_when_the_counter_reaches_growth_steps_minus_one():
    scales, _, nxt = _run("keras", [F, F, F, F], dynamic_growth_steps=3)
    assert scales == [32768.0] * 3 + [65536.0] and nxt == 65536.0


# ---------------------------------------------------------------- TF2 NpuLossScaleOptimizer / tf.keras
def test_tf_keras_halving_stops_at_one():
    scales, skipped, nxt = _run("tf_keras", [T, T, T], initial_scale=2.0)
    assert scales == [2.0, 1.0, 1.0] and skipped == [T, T, T] and nxt == 1.0


def test_tf_keras_defaults_and_growth_after_growth_steps():
    scales, _, nxt = _run("tf_keras", [F, F, F], dynamic_growth_steps=3)
    assert scales == [32768.0] * 3 and nxt == 65536.0


def test_tf_keras_growth_is_bounded_below_fp32_max():
    _, _, nxt = _run("tf_keras", [F], initial_scale=2e38, dynamic_growth_steps=1)
    assert nxt == f32(2e38)


def test_tf_keras_static_needs_initial_scale():
    with pytest.raises(InputError):
        make_scaler("tf_keras", {"dynamic": False})


def test_tf_keras_static_skips_only_on_a_saturation_chip_npu_optimizer():
    sat, ieee = Numerics(SATURATION), Numerics(INF_NAN)
    s = make_scaler("tf_keras", {"dynamic": False, "initial_scale": 8.0})
    assert s.overflowed(sat, [], flagged_forward=True, flagged_backward=False)
    assert s.update(True).skipped and s.scale == 8.0
    inf = [torch.tensor([float("inf")])]
    assert not s.overflowed(ieee, inf, False, False) and not s.update(True).skipped


# ---------------------------------------------------------------- TF1 ExponentialUpdateLossScaleManager
def test_tf1_bad_steps_accumulate_and_every_second_one_multiplies_by_0_8():
    scales, skipped, nxt = _run("tf1", [T, F, T, T], init_loss_scale=1024.0, incr_every_n_steps=100)
    lowered = f32(np.float32(1024.0) * np.float32(0.8))
    assert scales == [1024.0, 1024.0, 1024.0, lowered] and skipped == [T, F, T, T] and nxt == lowered


def test_tf1_good_steps_must_be_consecutive_to_increase():
    scales, _, nxt = _run("tf1", [F, F, T, F, F, F], init_loss_scale=8.0, incr_every_n_steps=3)
    assert scales == [8.0] * 6 and nxt == 16.0


def test_tf1_decrease_stops_at_one():
    _, _, nxt = _run("tf1", [T, T, T, T], init_loss_scale=1.0, incr_every_n_steps=10)
    assert nxt == 1.0


def test_tf1_requires_init_loss_scale_and_incr_every_n_steps():
    with pytest.raises(InputError):
        make_scaler("tf1", {"init_loss_scale": 2.0})


# ---------------------------------------------------------------- static / fixed
def test_tf1_fixed_skips_an_overflowing_step_without_moving_the_scale():
    scales, skipped, _ = _run("tf1_fixed", [T, F], loss_scale=64.0)
    assert scales == [64.0, 64.0] and skipped == [T, F]
    assert _run("tf1_fixed", [T], loss_scale=64.0, enable_overflow_check=False)[1] == [F]
    with pytest.raises(InputError):
        make_scaler("tf1_fixed", {"loss_scale": 0.5})


def test_static_default_is_torch_npu_static_2_16_never_skipping():
    scales, skipped, _ = _run("static", [T, F])
    assert scales == [65536.0, 65536.0] and skipped == [F, F]


def test_no_scaler_is_scale_one_and_never_skips():
    s = make_scaler(None)
    assert s.update(True).skipped is False and s.scale == 1.0
    with pytest.raises(InputError):
        make_scaler(None, {"init_scale": 2.0})
    with pytest.raises(InputError):
        make_scaler("deepspeed")


# ---------------------------------------------------------------- what counts as an overflow
def test_inf_nan_mode_reads_the_gradients_and_saturation_mode_the_flag_window():
    ieee, sat = Numerics(INF_NAN), Numerics(SATURATION)
    finite, inf = [torch.ones(3)], [torch.tensor([1.0, float("nan")])]
    torch_npu, keras = make_scaler("torch_npu"), make_scaler("keras")
    assert torch_npu.overflowed(ieee, inf, False, False) and not torch_npu.overflowed(ieee, finite, True, True)
    # saturation: the float-status flag; torch_npu clears it when the loss is scaled (forward not counted) ...
    assert not torch_npu.overflowed(sat, inf, flagged_forward=True, flagged_backward=False)
    assert torch_npu.overflowed(sat, finite, flagged_forward=False, flagged_backward=True)
    # ... the TF adapters after the previous step's check (the forward counts)
    assert keras.overflowed(sat, finite, flagged_forward=True, flagged_backward=False)
    assert not make_scaler("static").overflowed(ieee, inf, True, True)
