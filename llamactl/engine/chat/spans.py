"""Message spans on a rendered prompt's tokens, found from the template's role delimiters.

The engine checkpoints hybrid/recurrent models just before user messages (spec §7), so a
follow-up turn can roll back to the start of its new user message. It needs to know where
user messages start in the token sequence: each template family opens a message with a fixed
delimiter (`<|im_start|>user`), which we tokenize and match on the prompt tokens.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

# (marker that identifies the family in the template source, [(role, delimiter)...]).
# In list order: the first delimiter matching at a position opens the span, so the tool
# delimiters that start like a user message come before the user one.
_FAMILIES: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] = (
    (
        "<|im_start|>",
        (
            ("assistant", "<|im_start|>assistant"),
            ("tool", "<|im_start|>user\n<tool_response>"),
            ("tool", "<|im_start|>tool"),
            ("user", "<|im_start|>user"),
            ("system", "<|im_start|>system"),
        ),
    ),
    (
        "<|start_header_id|>",
        (
            ("assistant", "<|start_header_id|>assistant<|end_header_id|>"),
            ("tool", "<|start_header_id|>ipython<|end_header_id|>"),
            ("tool", "<|start_header_id|>tool<|end_header_id|>"),
            ("user", "<|start_header_id|>user<|end_header_id|>"),
            ("system", "<|start_header_id|>system<|end_header_id|>"),
        ),
    ),
    (
        "<start_of_turn>",
        (
            ("assistant", "<start_of_turn>model"),
            ("user", "<start_of_turn>user"),
        ),
    ),
    (
        "<|user|>",
        (
            ("assistant", "<|assistant|>"),
            ("user", "<|user|>"),
            ("system", "<|system|>"),
        ),
    ),
    ("[INST]", (("user", "[INST]"),)),
)


@dataclass(frozen=True)
class Span:
    role: str
    pos: int
    length: int


def message_delimiters(template_source: str) -> tuple[tuple[str, str], ...]:
    """The (role, delimiter text) list of the template's family; empty when unknown."""
    for marker, delimiters in _FAMILIES:
        if marker in template_source:
            return delimiters
    return ()


def tokenize_delimiters(
    delimiters: Sequence[tuple[str, str]], tokenize: Callable[[str], list[int]]
) -> list[tuple[str, tuple[int, ...]]]:
    out = []
    for role, text in delimiters:
        tokens = tuple(tokenize(text))
        if tokens:
            out.append((role, tokens))
    return out


def split_spans(
    tokens: Sequence[int], delimiters: Sequence[tuple[str, tuple[int, ...]]]
) -> list[Span]:
    """Spans open where a delimiter's tokens match (the first in list order wins) and run to
    the next match; tokens before the first match belong to no span."""
    starts: list[tuple[int, str]] = []
    n = len(tokens)
    firsts = {d[0] for _, d in delimiters}
    i = 0
    while i < n:
        if tokens[i] in firsts:
            for role, delim in delimiters:
                k = len(delim)
                if tuple(tokens[i : i + k]) == delim:
                    starts.append((i, role))
                    i += k - 1
                    break
        i += 1
    spans = []
    for j, (pos, role) in enumerate(starts):
        end = starts[j + 1][0] if j + 1 < len(starts) else n
        spans.append(Span(role, pos, end - pos))
    return spans


def user_starts(
    tokens: Sequence[int], delimiters: Sequence[tuple[str, tuple[int, ...]]]
) -> tuple[int, ...]:
    """Positions where user messages begin."""
    return tuple(s.pos for s in split_spans(tokens, delimiters) if s.role == "user")
