"""A `/v1/systemone` body to a `DecisionRequest`, refusing what the spec refuses (5.2).

Messages are the spec's, so clients written against llama-server read the same errors. The
order of the checks is llama.cpp's: the questions first, then the state, then the media.
"""

from __future__ import annotations

import base64
import binascii
import copy
from typing import Any, Literal

from llamactl.core.errors import InvalidRequestError

from .registry import DecisionType
from .types import QUESTION_TYPES, DecisionRequest, Media, Option, Question

MAX_MEDIA = 8
MIN_LEVELS, MAX_LEVELS = 2, 10


def parse_request(body: Any, dtype: DecisionType, max_options: int) -> DecisionRequest:
    """Validate `body` for a model of type `dtype` that reads at most `max_options` options."""
    if not isinstance(body, dict):
        raise InvalidRequestError("the request body must be a JSON object")
    questions = parse_questions(body.get("questions"), dtype, max_options)
    if "state" not in body or (body["state"] is None and not dtype.null_state):
        raise InvalidRequestError('"state" must be provided')
    state, from_state = take_media_parts(body["state"])
    media = parse_media(body, from_state)
    return DecisionRequest(state=state, questions=questions, media=media)


# ------------------------------------------------------------------ questions
def parse_questions(raw: Any, dtype: DecisionType, max_options: int) -> tuple[Question, ...]:
    if not isinstance(raw, dict) or not raw:
        raise InvalidRequestError('"questions" must be a non-empty object')
    return tuple(_question(str(qid), q, dtype, max_options) for qid, q in raw.items())


def _question(qid: str, q: Any, dtype: DecisionType, max_options: int) -> Question:
    def fail(message: str) -> InvalidRequestError:
        return InvalidRequestError(f"questions.{qid}: {message}")

    if not isinstance(q, dict):
        raise fail("must be an object")
    qtype = q.get("type")
    if qtype not in QUESTION_TYPES:
        raise fail('"type" must be one of: ' + ", ".join(QUESTION_TYPES))
    instructions = q.get("instructions")
    if instructions is None:  # "" is a question too, as in llama-server (lev shows the id)
        raise fail('"instructions" must be provided')
    criteria = q.get("criteria")
    levels: tuple[Any, ...] = ()
    if qtype == "choice":
        if not isinstance(criteria, dict) or not criteria:
            raise fail('"criteria" must be a non-empty object')
        options = tuple(Option(str(k), v) for k, v in criteria.items())
    elif qtype == "score":
        if not isinstance(criteria, list) or not MIN_LEVELS <= len(criteria) <= MAX_LEVELS:
            raise fail(f'"criteria" must be an array of {MIN_LEVELS} to {MAX_LEVELS} levels')
        levels = tuple(criteria)
        options = tuple(Option(str(i), v) for i, v in enumerate(criteria))
    else:
        if criteria is not None and not isinstance(criteria, dict):
            raise fail('"criteria" must be an object')
        options = _noul_options(criteria or {}, dtype)
    if len(options) > max_options:
        raise fail(f"too many options ({len(options)}), this model supports at most {max_options}")
    return Question(qid, qtype, instructions, options, levels)


def _noul_options(criteria: dict[str, Any], dtype: DecisionType) -> tuple[Option, ...]:
    """`true` / `false` with their descriptions (d1-omni and h2o-lightning also read `yes` /
    `no`)."""

    def described(key: str, alias: str) -> Any:
        if key in criteria:
            return criteria[key]
        return criteria.get(alias) if dtype.noul_yes_no else None

    yes = Option("true", described("true", "yes"))
    no = Option("false", described("false", "no"))
    return (yes, no) if dtype.noul_true_first else (no, yes)


# ---------------------------------------------------------------------- media
def parse_media(body: dict[str, Any], from_state: list[Any]) -> tuple[Media, ...]:
    videos = body.get("videos")
    if videos not in (None, []):
        raise InvalidRequestError('"videos" is not supported')
    raw = body.get("images")
    if raw is None:
        raw = body.get("files")
    if raw is None:
        raw = []
    if not isinstance(raw, list):
        raise InvalidRequestError('"images" must be an array of data URLs')
    items = [*raw, *from_state]
    if len(items) > MAX_MEDIA:
        raise InvalidRequestError(f"too many images, the maximum is {MAX_MEDIA}")
    media = tuple(item if isinstance(item, Media) else parse_data_url(item) for item in items)
    if any(m.kind == "audio" for m in media) and len(media) > 1:
        raise InvalidRequestError("a request has images or one audio clip, not both")
    return media


_MEDIA_KINDS: dict[str, Literal["image", "audio"]] = {"image": "image", "audio": "audio"}


def parse_data_url(url: Any) -> Media:
    """`data:image/png;base64,....` (or `data:audio/...`) to its bytes."""
    if isinstance(url, dict):  # {"url": ...} as in an image_url part
        url = url.get("url")
    if not isinstance(url, str) or not url.startswith("data:"):
        raise InvalidRequestError("images must be data URLs (data:image/...;base64,...)")
    header, sep, payload = url[5:].partition(",")
    mime, *params = header.split(";")
    kind = _MEDIA_KINDS.get(mime.split("/")[0])
    if not sep or "base64" not in params or kind is None:
        raise InvalidRequestError("images must be data URLs (data:image/...;base64,...)")
    try:
        data = base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        raise InvalidRequestError(f"the {kind} data URL is not valid base64") from None
    if not data:
        raise InvalidRequestError(f"the {kind} data URL is empty")
    return Media(kind, mime, data)


def take_media_parts(state: Any) -> tuple[Any, list[Any]]:
    """Take `image_url` / `input_audio` parts out of a state that is a list of chat messages
    (or `{"messages": [...]}`); returns the state without them, and the parts' media."""
    messages = state.get("messages") if isinstance(state, dict) else state
    if not _is_messages(messages):
        return state, []
    state = copy.deepcopy(state)
    messages = state["messages"] if isinstance(state, dict) else state
    found: list[Any] = []
    for message in messages:
        content = message.get("content")
        if not isinstance(content, list):
            continue
        kept = []
        for part in content:
            kind = part.get("type") if isinstance(part, dict) else None
            if kind == "image_url":
                found.append(parse_data_url(part.get("image_url")))
            elif kind == "input_audio":
                found.append(_audio_part(part.get("input_audio")))
            else:
                kept.append(part)
        message["content"] = kept
    return state, found


def _is_messages(value: Any) -> bool:
    return (
        isinstance(value, list)
        and bool(value)
        and all(isinstance(m, dict) and "role" in m for m in value)
    )


def _audio_part(part: Any) -> Media:
    if not isinstance(part, dict) or not isinstance(part.get("data"), str):
        raise InvalidRequestError("an input_audio part needs base64 `data`")
    fmt = part.get("format") or "wav"
    return parse_data_url(f"data:audio/{fmt};base64,{part['data']}")
