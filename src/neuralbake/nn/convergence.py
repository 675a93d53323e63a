"""Whether a training run had converged when it stopped, judged from its evaluation history.

A run is called converged when the last quarter of it (by steps) raised the bake's quality figure
by less than a tolerance: more steps of the same schedule would buy about as little again. A
cosine schedule anneals at its end, which lifts the figure there whatever the length; a run
that is short for its asset gains far more in that stretch than one that is long enough, so the
last quarter's gain still tells them apart (NTC on DamagedHelmet: 1.2 dB at 3,000 steps, 0.1 dB
at 30,000; docs/benchmarks.md).

Where the anneal's lift is as large as the tolerance at every length, the last quarter cannot tell
them apart, and a bake gives a ``rate_tolerance`` too: the run also counts as converged when its
last quarter gained less than that per 1,000 steps. The neural material's held-out figure is such a
case: its last quarter gained 0.35-0.75 dB at 10,000 to 100,000 steps on the copper tray, while the
preview renders stopped improving at 30,000 (docs/benchmarks.md).

A run on the ``wsd`` schedule trains its half-length twin (:mod:`neuralbake.nn.half_run`) and is judged
by what doubling its steps bought instead: converged when its figure beats the twin's by less than
:data:`DOUBLING_GAIN`.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Any

from neuralbake.nn.trainer import TrainResult

__all__ = ["CONVERGED_GAIN", "DOUBLING_GAIN", "convergence", "curve_record", "training_record"]

CONVERGED_GAIN = 0.25
"""The most a run's last quarter may raise its quality figure (dB for a PSNR) for the run to count
as converged: a quarter more of the same schedule would buy about that again."""


DOUBLING_GAIN = 0.5
"""The most the second half of a ``wsd`` run's steps may have raised its quality figure over its half-length twin (dB for
a PSNR) for the run to count as converged. Doubling the steps doubles the time, and under half a decibel (about 11 %
of the mean squared error) the next doubling, which buys less again, is not worth it for a shipped asset; the
failures this verdict exists for gained several decibels per doubling (issue 42: a material bake 10 dB in two)."""


RATE_GAIN_CAP = 4.0
"""A run that passes on ``rate_tolerance`` alone may still have gained at most this many ``tolerance`` s in its last
quarter (1 dB at 0.25: above the largest anneal lift measured), so a very long run is not waved through on its rate."""


def _value_at(points: Sequence[tuple[int, float]], step: float) -> float:
    """The figure at ``step``, linearly interpolated between the evaluations around it."""
    for (s0, v0), (s1, v1) in itertools.pairwise(points):
        if s0 <= step <= s1:
            return v0 if s1 == s0 else v0 + (v1 - v0) * (step - s0) / (s1 - s0)
    return points[0][1] if step < points[0][0] else points[-1][1]


def convergence(history: Sequence[dict[str, Any]], key: str, *, tolerance: float, higher_is_better: bool = True,
                rate_tolerance: float | None = None, schedule: str = "cosine") -> dict[str, Any]:
    """The verdict on one run from its ``eval`` events.

    Parameters
    ----------
    history : sequence of dict
        Training events (``TrainResult.history``); the ``eval`` ones with a number under ``key`` count,
        except one of weights restored at the end (``restored_from_step``).
    key : str
        The quality figure, e.g. ``psnr_db``.
    tolerance : float
        Largest gain over the last quarter of the run that still counts as converged (in ``key``'s unit).
    higher_is_better : bool
        False for an error figure (the gain is then its fall).
    rate_tolerance : float, optional
        Also converged when the last quarter gained less than this per 1,000 steps and less than
        :data:`RATE_GAIN_CAP` times ``tolerance`` (for a bake whose anneal lifts its last quarter by about
        ``tolerance`` whatever the run's length).
    schedule : str
        The run's learning-rate schedule: a ``wsd`` run is judged by its twin alone (its last quarter is mostly its
        anneal), so without one (resumed past its branch, extended, twin turned off) its verdict is None.

    Returns
    -------
    dict
        ``converged`` (bool, or None with fewer than three evaluations), ``last_quarter_gain``
        (the figure's gain over the last quarter of the steps), ``gain_per_1000_steps`` (that
        gain per 1,000 steps), ``doubling_gain`` (a ``wsd`` run's figure over its half-length twin's,
        which then decides against :data:`DOUBLING_GAIN`; None without a twin), ``half_run_steps``
        and ``evaluations`` (how many were used).
    """
    # the training curve itself: an evaluation of restored best weights (``keep_best``) is not a point on it
    evals = [e for e in history if e.get("event") == "eval" and "restored_from_step" not in e]
    points = sorted((int(e["step"]), float(e[key])) for e in evals if isinstance(e.get(key), (int, float)))
    # evaluations at the same step (a resumed run's start): keep the last
    points = list({step: (step, value) for step, value in points}.values())
    if len(points) < 3 or points[-1][0] <= points[0][0]:
        return {"converged": None, "last_quarter_gain": None, "gain_per_1000_steps": None, "doubling_gain": None, "half_run_steps": None,
                "evaluations": len(points)}
    # the twin of this very run's end (an extended run's older twin is of another length)
    twin = next((e for e in reversed(history) if e.get("event") == "half_run" and isinstance(e.get(key), (int, float))), None)
    twin = twin if twin is not None and int(twin.get("step", -1)) == points[-1][0] else None
    doubling = None if twin is None else (points[-1][1] - float(twin[key])) * (1.0 if higher_is_better else -1.0)
    doubling = doubling if doubling is not None and math.isfinite(doubling) else None
    first, last = points[0][0], points[-1][0]
    quarter_start = last - 0.25 * (last - first)
    gain = points[-1][1] - _value_at(points, quarter_start)
    gain = gain if higher_is_better else -gain
    span = last - quarter_start
    rate = 1000.0 * gain / span
    if doubling is not None:
        converged: bool | None = doubling < DOUBLING_GAIN
    elif schedule == "wsd":
        converged = None
    else:
        converged = gain < tolerance or (rate_tolerance is not None and rate < rate_tolerance and gain < RATE_GAIN_CAP * tolerance)
    return {
        "converged": None if converged is None else bool(converged),
        "last_quarter_gain": round(gain, 4),
        "gain_per_1000_steps": round(rate, 4),
        "doubling_gain": None if doubling is None else round(doubling, 4),
        "half_run_steps": None if twin is None else int(twin["steps"]),
        "evaluations": len(points),
    }


def training_record(phases: Sequence[tuple[str, Any]], key: str | None, *, higher_is_better: bool = True,
                    rate_tolerance: float | None = None) -> dict[str, Any]:
    """A report's ``training`` block from a bake's phases (``(name, TrainResult)``): per phase its
    steps, seconds, what stopped it and its :func:`convergence`; ``converged`` is the verdict of the
    longest phase (a bake's main one; fine-tuning phases are short by design) and
    ``last_quarter_gain`` its gain. ``rate_tolerance``: see :func:`convergence`."""
    records = []
    for name, result in phases:
        verdict = (convergence(result.history, key, tolerance=CONVERGED_GAIN, higher_is_better=higher_is_better, rate_tolerance=rate_tolerance,
                               schedule=result.schedule) if key else {"converged": None})
        records.append({"phase": name, "steps": result.steps, "train_seconds": round(result.train_seconds, 3), "stopped_by": result.stopped_by, **verdict})
    main = max(records, key=lambda r: r["steps"]) if records else {}
    return {
        "converged": main.get("converged"),
        "main_phase": main.get("phase"),
        "stopped_by": main.get("stopped_by"),
        "last_quarter_gain": main.get("last_quarter_gain"),
        "gain_per_1000_steps": main.get("gain_per_1000_steps"),
        "doubling_gain": main.get("doubling_gain"),
        "half_run_steps": main.get("half_run_steps"),
        "tolerance": CONVERGED_GAIN,
        **({"doubling_tolerance": DOUBLING_GAIN} if main.get("doubling_gain") is not None else {}),
        **({"rate_tolerance": rate_tolerance} if rate_tolerance is not None else {}),
        "quality_key": key,
        "phases": records,
    }



def curve_record(losses: Sequence[float], steps_per_point: float, *, phase: str, seconds: float, smooth: int = 1) -> dict[str, Any]:
    """A report's ``training`` block for a bake with its own optimisation loop (simplify's shape fit, skin's weight fit),
    judged from its loss curve like :func:`training_record` judges a Trainer's evaluations.

    The loss (lower is better) is read as ``loss_db = -10 log10(loss)``, so the tolerance is the same
    :data:`CONVERGED_GAIN` in dB: the last quarter lowering the loss by less than about 6 % counts as converged.
    ``losses[k]`` is the loss after ``k * steps_per_point`` steps; ``smooth`` > 1 averages that many consecutive
    points first (a per-step curve of random views is noisy).
    """
    values = [float(v) for v in losses if isinstance(v, (int, float)) and math.isfinite(v) and v > 0]
    if smooth > 1:
        values = [sum(values[i:i + smooth]) / len(values[i:i + smooth]) for i in range(0, len(values), smooth)]
        steps_per_point *= smooth
    history = [{"event": "eval", "step": round(k * steps_per_point), "loss_db": -10.0 * math.log10(v)} for k, v in enumerate(values)]
    steps = round((len(values) - 1) * steps_per_point) if values else 0
    result = TrainResult(steps, 0, 0, seconds, values[-1] if values else math.nan, 1.0, history=history)
    return training_record([(phase, result)], "loss_db")
