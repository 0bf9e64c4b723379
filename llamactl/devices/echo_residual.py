"""What the echo canceller's linear filter leaves: damped frequency by frequency.

A linear filter removes the part of the echo that is a delayed, filtered copy of what was
played. It leaves a residual: the reverberation longer than its taps, a loudspeaker's
distortion, the error of a path still being tracked. Damping the whole block when that
residual is as loud as the echo estimate cuts the user too whenever they talk no louder than
the loudspeaker. Per frequency the two rarely overlap: the residual follows the played
voice's spectrum, the user's voice has its own. So each block is damped per frequency bin
where the expected residual outweighs what the microphone still holds, and filled there with
the room's own noise, so the VAD hears neither a quiet copy of the answer nor holes.

- **Expected residual.** The echo estimate's power in the bin, held over the room's
  reverberation (it decays from the bin's last peak at 60 dB per `rt60`), times `_RESIDUAL`.
  A learned filter leaves 10-25 dB less than that; the margin covers distortion and the
  tail. (A leak estimated by regression, as some cancellers do, was tried: on
  bench/echo.py's rooms it followed the speech's level swings and let echo through.)
- **Analysis.** Square-root Hann windows at 50 % overlap (one block's delay): with every gain
  at 1 the output is the input, delayed.
"""

from __future__ import annotations

import numpy as np

__all__ = ["ResidualSuppressor"]

_EPS = 1e-12
# the residual's expected power per bin, over the held echo estimate's (measured on
# bench/echo.py: 0.15 let echo through in 12 of 20 rooms, 0.6 in 3, 1.5 in none)
_RESIDUAL = 1.5


class ResidualSuppressor:
    """Per-bin gains for blocks of `block` samples of (error, echo estimate)."""

    def __init__(self, block: int, rate: int, *, rt60: float = 0.4) -> None:
        self.block = block
        bins = block + 1
        n = np.arange(2 * block)
        self._window = np.sqrt(0.5 - 0.5 * np.cos(2 * np.pi * n / (2 * block)))  # periodic
        self._decay = 10 ** (-6.0 * block / (rate * rt60))  # per block: 60 dB in rt60
        self._last_error = np.zeros(block)
        self._last_echo = np.zeros(block)
        self._overlap = np.zeros(block)
        self._tail = np.zeros(bins)  # held echo-estimate power per bin
        self._rng = np.random.default_rng(0)

    def reset(self) -> None:
        """The echo path changed: what was held of the old one goes."""
        self._tail[:] = 0

    def process(
        self, error: np.ndarray, echo: np.ndarray, *, cap: float, noise: float
    ) -> np.ndarray:
        """One block out (one block late). `cap` bounds every bin's gain (0: mute, as before
        the room is learned; 1: free); `noise` is the room's noise power per sample, filled in
        where the gain takes the signal away."""
        w = self._window
        e_spec = np.fft.rfft(np.concatenate([self._last_error, error]) * w)
        y_spec = np.fft.rfft(np.concatenate([self._last_echo, echo]) * w)
        self._last_error, self._last_echo = error.astype(np.float64), echo.astype(np.float64)
        e_pow = np.abs(e_spec) ** 2
        y_pow = np.abs(y_spec) ** 2
        self._tail = np.maximum(y_pow, self._tail * self._decay)
        residual = _RESIDUAL * self._tail
        gain = np.clip(1.0 - residual / (e_pow + _EPS), 0.0, cap)
        # the room's noise where the signal was taken away (white, as the floor is tracked)
        fill = np.fft.rfft(self._rng.normal(0.0, np.sqrt(noise), 2 * self.block) * w)
        frame = np.fft.irfft(e_spec * gain + fill * (1.0 - gain), 2 * self.block) * w
        out = self._overlap + frame[: self.block]
        self._overlap = frame[self.block :]
        return out
