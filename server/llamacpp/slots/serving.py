"""Slot snapshots in llama-server's `/slots` shape, and the slot files' name rules."""

from __future__ import annotations

from typing import Any

from llamactl import Engine, SlotInfo

from ..generation_params import generation_params

__all__ = ["slot_json", "valid_filename"]


def slot_json(engine: Engine, slot: SlotInfo, *, content: bool = False) -> dict[str, Any]:
    """One slot: always its id, context and state; its current (or last) job when it has run
    one. With `content` (--slots-content) also the prompt and the text generated, rendered as
    the model's tokens read, and the grammar: any client may read /slots, so by default one
    never sees another's conversation (llama-server's shape, those keys left out)."""
    out: dict[str, Any] = {
        "id": slot.id,
        "n_ctx": slot.n_ctx,
        "speculative": slot.speculative,
        "is_processing": slot.busy,
    }
    job = slot.job
    if job is None:
        return out
    n_decoded = len(job.generated)
    remaining = -1 if job.max_tokens is None else max(job.max_tokens - n_decoded, 0)
    params = generation_params(job.sampling, job.max_tokens)
    out |= {
        "n_prompt_tokens": len(job.prompt),
        "n_prompt_tokens_processed": job.n_prompt_processed,
        "n_prompt_tokens_cache": job.n_cached,
        "params": params,
        "next_token": [
            {
                "has_next_token": not job.finished,
                "n_remain": remaining,
                "n_decoded": n_decoded,
            }
        ],
    }
    if not content:
        del params["grammar"]  # a schema's grammar spells out the request's own strings
        return out
    model = engine.model
    out["prompt"] = model.detokenize(list(job.prompt), special=True)
    out["generated"] = model.detokenize(list(job.generated), special=True)
    return out


# Characters llama-server's fs_validate_filename refuses besides the path separators
_FORBIDDEN = set(':*?"<>|/\\') | {"\uff0e", "\u2215", "\u2216", "\ufffd", "\ufeff"}


def valid_filename(name: str) -> bool:
    """A plain file name, as llama-server's `fs_validate_filename` accepts one: no directory
    part, no `..`, no control characters or lookalikes of `/` `\\` `.`, at most 255 bytes, no
    leading or trailing space, no trailing dot."""
    if not name or len(name.encode("utf-8", "surrogatepass")) > 255 or name == ".":
        return False
    for ch in name:
        c = ord(ch)
        if c <= 0x1F or c == 0x7F or 0x80 <= c <= 0x9F or 0xD800 <= c <= 0xDFFF:
            return False
        if ch in _FORBIDDEN:
            return False
    if name[0] == " " or name[-1] in " .":
        return False
    return ".." not in name
