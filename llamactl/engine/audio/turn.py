"""End-of-turn detection with Smart Turn v3 (pipecat's BSD-2 ONNX model), for semantic VAD.

Silence alone cannot tell "What is the capital of France?" from "I would like to know what
the…": Smart Turn reads the last 8 s of 16 kHz audio (Whisper log-mel features, 80 × 800)
and gives the probability that the speaker has finished. Measured on eSpeak speech here:
0.85 for the finished question, 0.01 for the cut sentence.

The model ships inside the `pipecat-ai` wheel; `pip install` of llamactl takes it out of
that wheel into the package (setup.py, `smart_turn_source`). It is also read from
`LLAMACTL_SMART_TURN_MODEL`, an installed pipecat-ai, or the cache, where `fetch_model()`
puts it for an install made without network (no model hub involved).
"""

from __future__ import annotations

import functools
import importlib.util
import os
from pathlib import Path

import numpy as np

from llamactl.core.errors import ModelNotFoundError
from llamactl.core.paths import cache_dir

from .smart_turn_source import (
    DISTRIBUTION,
    PACKAGED,
    SMART_TURN_FILE,
    VERSION,
    fetch_from_pypi,
)

__all__ = ["SMART_TURN_FILE", "SmartTurn", "fetch_model", "find_model"]

WHEEL = f"{DISTRIBUTION}=={VERSION}"  # the wheel that carries SMART_TURN_FILE
RATE = 16000
WINDOW_S = 8


def find_model() -> Path | None:
    """The model file: LLAMACTL_SMART_TURN_MODEL, the one the install put in the package, an
    installed pipecat-ai, or the cache."""
    env = os.environ.get("LLAMACTL_SMART_TURN_MODEL")
    if env:
        return Path(env) if Path(env).is_file() else None
    if PACKAGED.is_file():
        return PACKAGED
    try:
        spec = importlib.util.find_spec("pipecat")  # located, not imported
    except (ImportError, ValueError):
        spec = None
    for location in (spec.submodule_search_locations or []) if spec else []:
        candidate = Path(location) / "audio" / "turn" / "smart_turn" / "data" / SMART_TURN_FILE
        if candidate.is_file():
            return candidate
    cached = cache_dir() / "smart-turn" / SMART_TURN_FILE
    return cached if cached.is_file() else None


def fetch_model() -> Path:
    """The model file, taken out of the pipecat-ai wheel on PyPI into the cache when no copy
    is found (an install made offline); OSError or ValueError when it cannot be."""
    found = find_model()
    if found is not None:
        return found
    return fetch_from_pypi(cache_dir() / "smart-turn" / SMART_TURN_FILE)


class SmartTurn:
    """P(the speaker has finished) for the audio heard so far."""

    def __init__(self, path: Path | str | None = None, threads: int | None = None) -> None:
        model = Path(path) if path is not None else find_model()
        if model is None:
            raise ModelNotFoundError(
                f"semantic turn detection needs Smart Turn ({SMART_TURN_FILE}), which "
                "llamactl's install takes from PyPI and this one could not: install llamactl "
                f"again where PyPI is reachable, `pip install --no-deps {WHEEL}`, or set "
                "LLAMACTL_SMART_TURN_MODEL"
            )
        # two threads: a turn's reading runs while the decode loop pauses for it
        # (llamactl.engine.cores), so both cores are free (measured: 53 ms, 73 with one)
        self._session = _session(str(model), threads or min(2, os.cpu_count() or 1))
        self._input = self._session.get_inputs()[0].name

    def probability(self, audio16: np.ndarray) -> float:
        """The last 8 s of `audio16` (float32 at 16 kHz), left-padded with silence."""
        n = RATE * WINDOW_S
        audio = np.asarray(audio16, dtype=np.float32)[-n:]
        audio = np.pad(audio, (n - audio.size, 0))
        audio = (audio - audio.mean()) / np.sqrt(audio.var() + 1e-7)
        features = _features()(audio)[:, : WINDOW_S * 100]
        logits = self._session.run(None, {self._input: features[None].astype(np.float32)})[0]
        return float(np.ravel(logits)[0])


@functools.cache
def _session(path: str, threads: int):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    # no busy-waiting once a reading is done: the decode loop takes the cores right back
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(path, sess_options=options)


@functools.cache
def _features():
    from faster_whisper.feature_extractor import FeatureExtractor

    return FeatureExtractor(feature_size=80, chunk_length=WINDOW_S)
