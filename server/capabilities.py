"""What a model can be asked for, as `/v1/models` reports it (single-model server and router).

`architecture.input_modalities` / `output_modalities` follow llama-server (`["decisions"]` for a
decision model, `["text"]` for chat); `capabilities` names what requests naming the model get.
"""

from __future__ import annotations

from collections.abc import Iterable


def input_modalities(capabilities: Iterable[str], projector: Iterable[str] = ()) -> list[str]:
    """What the model itself reads: text, and what its projector encodes (a decision model's,
    or a chat model's served with --mmproj: images, audio)."""
    caps, proj = set(capabilities), set(projector)
    found = ["text"] if caps & {"chat", "decide"} else []
    if caps & {"chat", "decide"}:
        found += [m for m, c in (("image", "see"), ("audio", "hear")) if c in proj]
    return found


def output_modalities(capabilities: Iterable[str]) -> list[str]:
    caps = set(capabilities)
    if "decide" in caps:
        return ["decisions"]
    return ["text"] if "chat" in caps else []


def served_capabilities(capabilities: Iterable[str], projector: Iterable[str] = ()) -> list[str]:
    """What a request naming this model can get from its server: `text` (chat and
    completions), `decisions` (/v1/systemone), `audio_in` (speech to text: transcriptions and
    realtime sessions, or a decision model's audio clips), `audio_out` (/tts), `image_in`
    (images in chat or decision prompts: a projector that sees)."""
    caps, proj = set(capabilities), set(projector)
    if "decide" in caps:
        out = ["decisions"]
        if "see" in proj:
            out.append("image_in")
        if "hear" in proj:
            out.append("audio_in")
        return out
    if "chat" in caps:
        return ["text", "audio_in", "audio_out", *(["image_in"] if "see" in proj else [])]
    return []


def architecture(
    capabilities: Iterable[str], projector: Iterable[str] = ()
) -> dict[str, list[str]]:
    caps = list(capabilities)
    return {
        "input_modalities": input_modalities(caps, projector),
        "output_modalities": output_modalities(caps),
    }
