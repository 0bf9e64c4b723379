"""The echo's delay as it moves: a microphone and a loudspeaker on separate clocks.

Two sound cards each run on their own crystal, up to ~100 ppm apart: the echo slides
against what was played by a few samples a second. An adaptive filter cannot follow that
(a one-sample slip turns a 4 kHz echo's phase by 60 degrees), so it never learns the room.
The echo canceller's delay estimates (GCC-PHAT, refined between samples) move along a
straight line when that happens; its slope is the clocks' drift, and reading what was
played at the line's delay keeps the filter's view of the room still.

Nothing changes until the drift is clear: at least `_POINTS` estimates over `_SPAN_S`
seconds of echo, on one line within a sample, sloping by more than `_MIN_DRIFT`.
"""

from __future__ import annotations

import collections

import numpy as np

__all__ = ["DriftTracker"]

_POINTS = 8
_SPAN_S = 3.0
_MIN_DRIFT = 1e-5  # 10 ppm: less moves the echo by under a sample in 4 s
_ON_LINE = 1.0  # samples: estimates further off the fitted line are not counted


class DriftTracker:
    """Delay estimates in, the delay at any microphone position out."""

    def __init__(self, rate: int) -> None:
        self.rate = rate
        self._points: collections.deque[tuple[int, float]] = collections.deque(maxlen=60)
        self.drift = 0.0  # delay samples gained per microphone sample (0: none found)
        self._at = 0
        self._delay = 0.0

    def reset(self) -> None:
        """The echo path changed: earlier estimates describe another one."""
        self._points.clear()
        self.drift = 0.0

    def observe(self, position: int, delay: float) -> None:
        """A delay estimate (samples, fractional) taken at microphone sample `position`."""
        self._points.append((position, delay))
        self._fit()

    def delay_at(self, position: int) -> float:
        """The echo's delay at `position`; only meaningful while `drift` is not 0."""
        return self._delay + self.drift * (position - self._at)

    def _fit(self) -> None:
        points = np.array(self._points, dtype=np.float64)
        self.drift = 0.0
        if len(points) < _POINTS or points[-1, 0] - points[0, 0] < _SPAN_S * self.rate:
            return
        x, y = points[:, 0] - points[-1, 0], points[:, 1]
        for _ in range(2):  # fit, drop the estimates off the line (a reflection's peak), refit
            slope, intercept = np.polyfit(x, y, 1)
            near = np.abs(y - (slope * x + intercept)) <= _ON_LINE
            if near.sum() < _POINTS:
                return
            x, y = x[near], y[near]
        slope, intercept = np.polyfit(x, y, 1)
        if abs(slope) >= _MIN_DRIFT and x[-1] - x[0] >= _SPAN_S * self.rate:
            self.drift = float(slope)
            self._at = int(points[-1, 0])
            self._delay = float(intercept)
