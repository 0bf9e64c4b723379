"""Plain data passed between the engine and its callers.

Kept free of llama.cpp types so front ends (CLI, server, TUI) can import it cheaply.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

FinishReason = Literal["stop", "length", "cancelled", "error"]
# Where a chat's reasoning goes (llama-server's --reasoning-format): "auto" and "deepseek" split
# it out of the answer; "none" leaves the raw output, markers and all, in content;
# "deepseek-legacy" does both (raw content, and the reasoning split out besides).
ReasoningFormat = Literal["auto", "none", "deepseek", "deepseek-legacy"]
# Where a DRY repetition may restart: llama.cpp's common defaults
DRY_SEQUENCE_BREAKERS: tuple[str, ...] = ("\n", ":", '"', "*")


@dataclass(frozen=True)
class SamplingParams:
    """Per-request sampling settings; temperature <= 0 means greedy."""

    temperature: float = 0.8
    top_k: int = 40
    top_p: float = 0.95
    min_p: float = 0.05
    repeat_penalty: float = 1.0
    repeat_last_n: int = 64
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    # DRY ("don't repeat yourself"): penalise a token that would extend a sequence already
    # seen in the last `dry_penalty_last_n` tokens; multiplier 0 is off (llama.cpp's defaults)
    dry_multiplier: float = 0.0
    dry_base: float = 1.75
    dry_allowed_length: int = 2
    dry_penalty_last_n: int = 64
    dry_sequence_breakers: tuple[str, ...] = DRY_SEQUENCE_BREAKERS
    seed: int | None = None
    logit_bias: dict[int, float] = field(default_factory=dict)
    grammar: str | None = None
    n_probs: int = 0

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0


@dataclass(frozen=True)
class SlotJob:
    """What one slot's current (or last) generation asked for and has done so far."""

    prompt: tuple[int, ...]
    sampling: SamplingParams
    max_tokens: int | None
    n_prompt_processed: int  # prompt tokens decoded (not taken from the cache)
    n_cached: int  # prompt tokens reused from the KV or the prompt cache
    generated: tuple[int, ...]
    finished: bool


@dataclass(frozen=True)
class SlotInfo:
    """A snapshot of one slot, for `/slots`: taken while the engine runs, so the counters of a
    busy slot are as of a recent step."""

    id: int
    n_ctx: int
    busy: bool
    speculative: bool
    job: SlotJob | None  # the running generation, else the last one (None: never used)


@dataclass
class Usage:
    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0
    reasoning_tokens: int = 0  # of the completion tokens, those inside the reasoning block

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@dataclass
class Timings:
    prompt_n: int = 0
    prompt_ms: float = 0.0
    predicted_n: int = 0
    predicted_ms: float = 0.0
    cache_n: int = 0
    draft_n: int | None = None  # tokens drafted by speculators (None: speculation is off)
    draft_n_accepted: int | None = None  # of those, the tokens kept

    @property
    def prompt_per_second(self) -> float:
        return self.prompt_n / (self.prompt_ms / 1000.0) if self.prompt_ms > 0 else 0.0

    @property
    def predicted_per_second(self) -> float:
        return self.predicted_n / (self.predicted_ms / 1000.0) if self.predicted_ms > 0 else 0.0

    def as_dict(self) -> dict[str, float | int]:
        out: dict[str, float | int] = {
            "cache_n": self.cache_n,
            "prompt_n": self.prompt_n,
            "prompt_ms": self.prompt_ms,
            "prompt_per_token_ms": self.prompt_ms / self.prompt_n if self.prompt_n else 0.0,
            "prompt_per_second": self.prompt_per_second,
            "predicted_n": self.predicted_n,
            "predicted_ms": self.predicted_ms,
            "predicted_per_token_ms": (
                self.predicted_ms / self.predicted_n if self.predicted_n else 0.0
            ),
            "predicted_per_second": self.predicted_per_second,
        }
        if self.draft_n is not None:
            out["draft_n"] = self.draft_n
            out["draft_n_accepted"] = self.draft_n_accepted or 0
        return out


@dataclass(frozen=True)
class TokenLogprob:
    token: int
    text: str
    logprob: float


# Per token of a delta: the sampled token and the most likely alternatives.
TokenLogprobs = tuple[tuple[TokenLogprob, tuple[TokenLogprob, ...]], ...]


@dataclass(frozen=True)
class TextDelta:
    """New text of one generation; `text` never holds a partial stop string."""

    text: str
    token_ids: tuple[int, ...] = ()
    logprobs: TokenLogprobs = ()
    index: int = 0


@dataclass(frozen=True)
class Done:
    """Always the last event of a stream."""

    finish_reason: FinishReason
    usage: Usage
    timings: Timings
    stop_string: str | None = None
    token_ids: tuple[int, ...] = ()
    index: int = 0


@dataclass(frozen=True)
class PromptProgress:
    """How far the prompt of a request that asked (`report_progress`) has been decoded:
    sent once when it is admitted (`processed == cache`) and after every prompt chunk, as
    llama-server's `prompt_progress`."""

    total: int  # prompt tokens
    cache: int  # of those, reused from a cache
    processed: int  # of those, in the KV now (cache included)
    time_ms: float  # since the prompt's processing started
    index: int = 0


Event = TextDelta | Done | PromptProgress


@dataclass(frozen=True)
class ReasoningDelta:
    """Chat-level: text inside the model's thinking markers."""

    text: str
    index: int = 0


@dataclass(frozen=True)
class ContentDelta:
    """Chat-level: answer text, outside any thinking markers."""

    text: str
    index: int = 0


@dataclass(frozen=True)
class ToolCallDelta:
    """Chat-level: one tool call parsed out of the output, emitted once it is complete."""

    call_index: int  # position among this choice's tool calls
    id: str
    name: str
    arguments: str  # JSON text of the arguments object
    index: int = 0


ChatEvent = ReasoningDelta | ContentDelta | ToolCallDelta | Done | PromptProgress
