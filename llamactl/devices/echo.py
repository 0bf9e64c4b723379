"""Acoustic echo cancellation: what the loudspeaker played, taken out of what the microphone hears.

Without headphones the assistant's own voice comes back through the microphone, and the
server's VAD takes it for the user barging in. The client knows exactly what it played, so
it removes it before sending:

- **Timeline.** The player hands every block it gives the device (silence included) to
  `played`; the microphone's capture callback tells `captured`, and its blocks go through
  `process`. Both run on device clocks, so the offset between "samples played so far" and
  "samples recorded so far" is steady; it is taken as each block is recorded (a median, so
  callback jitter does not move it), never when a thread busy elsewhere gets to it.
- **Bulk delay.** Output and input latency plus the air put the echo some tens to hundreds of
  milliseconds after the reference. GCC-PHAT (the cross-spectrum's phase alone) over the last
  second and a half finds that delay; it is accepted when two estimates agree.
- **Echo path.** A partitioned-block frequency-domain NLMS filter (`tail_ms` of taps) learns
  the room's response from the delayed reference and subtracts its estimate. Adaptation
  slows while the error is much louder than the echo estimate (the user talks over it),
  so double talk does not undo what was learned.
- **Residual.** What the linear filter leaves (reverberation past its taps, a loudspeaker's
  distortion) is damped frequency by frequency where the held echo estimate says echo is
  to be expected (`echo_residual.ResidualSuppressor`), and the room's noise fills the gaps: a
  user quieter than the echo still gets through in the bins their voice holds.
- **Drift.** Separate sound cards' clocks drift apart: the echo's delay estimates then fall
  on a sloping line (`echo_drift.DriftTracker`), and the reference is read at the moving
  delay, between samples, so the filter's room stays still.
- **Half duplex first.** Until the filter removes 10 dB of the echo the microphone is muted
  while something plays.

Everything is numpy on 5 ms blocks: about 4 % of one core at 24 kHz (bench/echo.py).
"""

from __future__ import annotations

import collections
import threading

import numpy as np

from .echo_drift import DriftTracker
from .echo_residual import ResidualSuppressor

__all__ = ["EchoCanceller"]

_EPS = 1e-6
_RT60 = 0.4  # the longest reverberation damped after the played voice stops (s)
_LEAD_MS = 2.0  # with drift: the filter's taps before the direct sound (the delay's error)
_NO_ECHO_AFTER = 2.0  # seconds played while the microphone heard only the room: no echo
_LIKENESS = 0.2  # an echo's correlation with its reference, at least (a user's is ~0)
_LEARNED = 10.0  # the filter has learned the room once it removes 10 dB of the echo


class EchoCanceller:
    """Cancel `played` audio from microphone blocks (int16 or float, mono, one rate)."""

    def __init__(
        self,
        rate: int = 24000,
        *,
        tail_ms: float = 160.0,
        max_delay_ms: float = 500.0,
        step: float = 0.2,
    ) -> None:
        self.rate = rate
        self.block = 1 << max(6, int(np.log2(rate / 100)))  # 5-10 ms, a power of two
        self.partitions = max(1, int(np.ceil(tail_ms * rate / 1000 / self.block)))
        self.max_delay = int(max_delay_ms * rate / 1000)
        self.step = step
        bins = self.block + 1
        self._weights = np.zeros((self.partitions, bins), np.complex128)
        self._spectra = np.zeros((self.partitions, bins), np.complex128)
        self._power = np.full(bins, _EPS)
        self._last_ref = np.zeros(self.block)
        self._lock = threading.Lock()
        keep = self.max_delay + 3 * rate  # reference history: the delay range plus a window
        self._ref = np.zeros(keep, np.float32)  # ring of played samples, by absolute index
        self._ref_total = 0
        self._mic_total = 0
        self._captured = 0  # samples recorded, as told by `captured` (0: never told)
        # the clocks' offset, as measured at recent blocks: callbacks come in bursts (tens of
        # ms), the true offset stays put, so a long median, moved only by a real jump
        self._offsets: collections.deque[int] = collections.deque(maxlen=51)
        self._anchor: int | None = None
        self.delay: int | None = None  # echo delay in samples, once found
        self._candidate: int | None = None
        self._drift = DriftTracker(rate)  # separate clocks: the delay moves, followed here
        self._lead = int(_LEAD_MS * rate / 1000)
        self._mic_history = np.zeros(int(1.5 * rate), np.float32)
        self._since_estimate = 0
        self._pending = np.zeros(0, np.float32)  # microphone samples short of a block
        self._pending_ref = np.zeros(0, np.float32)
        self._out = np.zeros(0, np.float32)  # processed samples not yet returned
        self._suppression = 1.0
        self._residual = ResidualSuppressor(self.block, rate, rt60=_RT60)
        self._reverb_blocks = int(np.ceil(_RT60 * rate / self.block))
        longest = (self.max_delay + self.block - 1) // self.block + self.partitions
        longest += self._reverb_blocks
        self._recent_ref: collections.deque[float] = collections.deque(maxlen=longest)
        self._noise = 1e-4  # the room's noise power per sample, tracked from the microphone
        self._mic_level = 0.0  # smoothed block energies while something plays
        self._error_level = 0.0
        self._learned = False  # the filter has learned the room's echo path
        self._unanswered = 0  # samples played while the microphone heard only the room

    @property
    def learned(self) -> bool:
        """The echo's delay and path are known: the user can talk over what plays."""
        return self.delay is not None and self._learned

    # ------------------------------------------------------------------ input
    def played(self, pcm: np.ndarray) -> None:
        """Samples just handed to the output device (call it for silence too)."""
        samples = _as_float(pcm)
        with self._lock:
            total = self._ref_total + samples.size
            kept = samples[-self._ref.size :]  # a block longer than the ring: its end
            start = (total - kept.size) % self._ref.size
            first = min(kept.size, self._ref.size - start)
            self._ref[start : start + first] = kept[:first]
            self._ref[: kept.size - first] = kept[first:]
            self._ref_total = total

    def captured(self, frames: int) -> None:
        """The microphone just recorded `frames` samples (call it from the capture callback):
        the clocks' offset is taken then, not when a busy thread gets to `process`."""
        with self._lock:
            self._captured += frames
            self._offsets.append(self._ref_total - self._captured)

    def process(self, mic: np.ndarray) -> np.ndarray:
        """`mic` with the echo of what was played taken out (same length and dtype)."""
        samples = _as_float(mic)
        ref = self._reference_for(samples.size)
        self._remember(samples, ref)
        mic_all = np.concatenate([self._pending, samples])
        ref_all = np.concatenate([self._pending_ref, ref])
        whole = mic_all.size // self.block * self.block
        out = np.empty(whole, np.float32)
        for i in range(0, whole, self.block):
            out[i : i + self.block] = self._cancel(
                mic_all[i : i + self.block], ref_all[i : i + self.block]
            )
        self._pending, self._pending_ref = mic_all[whole:], ref_all[whole:]
        # as many samples out as in: a remainder short of a block comes out with the next
        # call, so the output lags the input by under a block (silence at the very start)
        queue = np.concatenate([self._out, out])
        if queue.size < samples.size:
            queue = np.concatenate([np.zeros(samples.size - queue.size, np.float32), queue])
        self._out = queue[samples.size :]
        return _like(queue[: samples.size], mic)

    # -------------------------------------------------------------- alignment
    def _reference_for(self, n: int) -> np.ndarray:
        """The played samples that sounded while these `n` microphone samples were taken."""
        with self._lock:
            if not self._captured:  # no capture callback: this call is the capture time
                self._offsets.append(self._ref_total - (self._mic_total + n))
            anchor = int(np.median(self._offsets))
            if self._anchor is None or abs(anchor - self._anchor) > self.rate // 8:
                if self._anchor is not None:
                    self._reset_filter()  # the clocks jumped (a device restarted)
                self._anchor = anchor
            start = self._mic_total + self._anchor
            self._mic_total += n
            if self._drift.drift:  # the delay moves within the block: read between samples
                # the filter's first taps reach `_lead` before the direct sound, so a
                # moving delay followed a little late still leaves it on a tap
                first = start + self._lead - self._drift.delay_at(start - self._anchor)
                return self._ref_between(first, 1.0 - self._drift.drift, n)
            return self._ref_at(start - (self.delay or 0), n)

    def _ref_between(self, first: float, step: float, n: int) -> np.ndarray:
        """Played samples at fractional positions `first + step * i` (linear interpolation)."""
        at = first + step * np.arange(n)
        lo = int(np.floor(at[0]))
        span = self._ref_at(lo, int(np.floor(at[-1])) - lo + 2)
        i = np.floor(at).astype(np.int64) - lo
        frac = (at - np.floor(at)).astype(np.float32)
        return span[i] * (1.0 - frac) + span[i + 1] * frac

    def _ref_at(self, start: int, n: int) -> np.ndarray:
        out = np.zeros(n, np.float32)
        lo, hi = max(start, self._ref_total - self._ref.size), min(start + n, self._ref_total)
        if hi > lo:
            idx = np.arange(lo, hi) % self._ref.size
            out[lo - start : hi - start] = self._ref[idx]
        return out

    def _remember(self, mic: np.ndarray, ref: np.ndarray) -> None:
        """Keep the last 1.5 s of microphone; now and then, look for the echo's delay."""
        history = self._mic_history
        if mic.size >= history.size:
            history[:] = mic[-history.size :]
        else:
            history[: -mic.size] = history[mic.size :]
            history[-mic.size :] = mic
        self._since_estimate += mic.size
        if self._since_estimate >= self.rate // 4:
            self._since_estimate = 0
            self._estimate_delay()

    def _estimate_delay(self) -> None:
        """GCC-PHAT between the recent microphone and the reference it may echo."""
        with self._lock:
            if self._anchor is None:
                return
            n = self._mic_history.size
            end = self._mic_total + self._anchor
            ref = self._ref_at(end - n - self.max_delay, n + self.max_delay)
        mic = self._mic_history
        if float(np.mean(ref**2)) < 1e-6 or float(np.mean(mic**2)) < 1e-7:
            return  # nothing played, or nothing heard: no evidence
        size = 1 << int(np.ceil(np.log2(ref.size + mic.size)))
        cross = np.fft.rfft(ref, size) * np.conj(np.fft.rfft(mic, size))
        corr = np.fft.irfft(cross / (np.abs(cross) + _EPS), size)
        # mic[t] echoes ref[t + max_delay - d]: the correlation peaks at lag max_delay - d
        lags = corr[: self.max_delay + 1]
        peak = int(np.argmax(lags))
        if lags[peak] < 6 * (float(np.std(lags)) + _EPS):
            return  # no clear echo
        found = self.max_delay - peak
        if 0 < peak < self.max_delay:  # between samples: the parabola through the peak
            a, b, c = lags[peak - 1], lags[peak], lags[peak + 1]
            shift = 0.5 * (a - c) / (a - 2 * b + c) if a - 2 * b + c < 0 else 0.0
        else:
            shift = 0.0
        aligned = ref[peak : peak + mic.size]
        likeness = float(np.dot(aligned, mic)) / (
            float(np.linalg.norm(aligned) * np.linalg.norm(mic)) + _EPS
        )
        if abs(likeness) < _LIKENESS:
            return  # a peak of the phase alone (two voices at once), not an echo
        clear = lags[peak] > 12 * (float(np.std(lags)) + _EPS)
        agreed = clear or (
            self._candidate is not None and abs(found - self._candidate) <= self.rate // 1000
        )
        expected = self.delay
        if self._drift.drift and self.delay is not None:
            expected = round(self._drift.delay_at(self._mic_total))
        if agreed and (expected is None or abs(found - expected) > self.block // 2):
            self.delay = found
            self._reset_filter()
            self._drift.reset()  # another path: its own drift
        if agreed:
            # the delay of the window's middle, where the estimate sits
            middle = self._mic_total - self._mic_history.size // 2
            drifting = bool(self._drift.drift)
            self._drift.observe(middle, self.max_delay - (peak + float(shift)))
            if bool(self._drift.drift) != drifting:
                self._reset_filter()  # the reference moves under the filter: learn it anew
        self._candidate = found

    def _reset_filter(self) -> None:
        self._mic_level = self._error_level = 0.0
        self._learned = False
        self._unanswered = 0
        self._weights[:] = 0
        self._spectra[:] = 0
        self._last_ref[:] = 0
        self._residual.reset()

    # ------------------------------------------------------------ the filter
    def _cancel(self, mic: np.ndarray, ref: np.ndarray) -> np.ndarray:
        """One block through the partitioned frequency-domain NLMS filter and the damping."""
        b = self.block
        spectrum = np.fft.rfft(np.concatenate([self._last_ref, ref]))
        self._last_ref = ref.astype(np.float64)
        self._spectra = np.roll(self._spectra, 1, axis=0)
        self._spectra[0] = spectrum
        estimate = np.fft.irfft((self._weights * self._spectra).sum(axis=0))[b:]
        error = mic - estimate
        echo_energy = float(np.dot(estimate, estimate))
        error_energy = float(np.dot(error, error))
        ref_energy = float(np.dot(ref, ref))
        if ref_energy > _EPS * b:
            mic_energy = float(np.dot(mic, mic))
            self._mic_level = 0.95 * self._mic_level + 0.05 * mic_energy
            self._error_level = 0.95 * self._error_level + 0.05 * error_energy
            # trusted once the filter removes most of the echo; then an error much louder
            # than its estimate is the user talking over it (adapt slowly, keep the path)
            if self._mic_level > _LEARNED * self._error_level:
                self._learned = True  # kept until the path changes (a new delay, a reset)
            talking = self._learned and error_energy > 4.0 * echo_energy
            power = (np.abs(self._spectra) ** 2).sum(axis=0)
            self._power = 0.7 * self._power + 0.3 * power
            mu = self.step * (0.05 if talking else 1.0)
            err_spectrum = np.fft.rfft(np.concatenate([np.zeros(b), error]))
            gradient = np.conj(self._spectra) * (mu * err_spectrum / (self._power + 1e-2))
            kept = np.fft.irfft(gradient, axis=1)
            kept[:, b:] = 0  # the gradient's circular half is not part of a linear filter
            self._weights += np.fft.rfft(kept, axis=1)
        level = float(np.dot(mic, mic)) / b
        cap = self._duplex(ref_energy, quiet=level < 4.0 * self._noise)
        self._track_noise(level)
        out = self._residual.process(error, estimate, cap=cap, noise=self._noise)
        return out.astype(np.float32)

    def _track_noise(self, level: float) -> None:
        """The room's noise floor (a slowly rising minimum of the block power): what the
        damped blocks are filled with, so the VAD hears the room, not a quiet echo."""
        self._noise = min(self._noise * 1.005, max(level, 1e-10))

    def _duplex(self, ref: float, *, quiet: bool) -> float:
        """The most any frequency may keep. Until the filter has learned the room, half
        duplex: the microphone is muted whenever something plays (the first seconds of the
        first answer), unless the room stays silent while it plays (headphones: there is no
        echo to wait for). Once learned, the residual suppressor alone decides."""
        # an echo lasts the filter's tail and the room's reverberation after its reference;
        # until the delay is known, it may come as late as the longest delay looked for
        self._recent_ref.append(ref)
        span = self.partitions + self._reverb_blocks if self.delay is not None else None
        recent = list(self._recent_ref)[-span:] if span else self._recent_ref
        playing = max(recent) > _EPS * self.block
        if playing and quiet:
            self._unanswered += self.block
        if not playing or self.learned:
            target = 1.0
        elif self.delay is None and self._unanswered >= _NO_ECHO_AFTER * self.rate:
            target = 1.0  # seconds played, the room silent meanwhile: headphones, no echo
        else:
            target = 0.0
        keep = 0.3 if target > self._suppression else 0.0  # down at once, up within 30 ms
        self._suppression = keep * self._suppression + (1 - keep) * target
        return self._suppression


def _as_float(pcm: np.ndarray) -> np.ndarray:
    if pcm.dtype == np.int16:
        return pcm.astype(np.float32) / 32768.0
    return pcm.astype(np.float32, copy=False)


def _like(samples: np.ndarray, template: np.ndarray) -> np.ndarray:
    if template.dtype == np.int16:
        return np.clip(samples * 32768.0, -32768, 32767).astype(np.int16)
    return samples.astype(template.dtype, copy=False)
