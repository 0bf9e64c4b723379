"""One sequence of the chat engine's context and the generation running in it."""

from __future__ import annotations

from collections import deque
from typing import Literal, TypeVar

from .detokenize import IncrementalDetokenizer
from .prompt_cache import Checkpoint
from .prompt_chunks import Rows
from .requests import GenerationRequest
from .sampling import SamplerChain
from .speculative import SeqState
from .stops import StopMatcher
from .stream import GenerationStream
from .types import SlotInfo, SlotJob

__all__ = ["Slot", "SlotState"]


SlotState = Literal["idle", "waiting_parent", "prompt", "generating"]
_T = TypeVar("_T")


class Slot:
    """One sequence of the context and the generation running in it."""

    def __init__(self, seq_id: int) -> None:
        self.seq_id = seq_id
        self.state: SlotState = "idle"
        self.kv_tokens: list[int] = []  # exactly what the KV cache holds for this sequence
        self.checkpoints: list[Checkpoint] = []  # partial states, oldest first
        # the KV rows ggml's tiled attention kernel computed (prompt_chunks.py; None: not
        # known, a state put back from a file)
        self.tiled_rows: Rows | None = []
        self.saveable = False  # the KV is a finished completion's, not yet offered to the cache
        # where that completion's answer starts in kv_tokens (None: not a finished completion)
        self.answer_from: int | None = None
        self.last_used = 0.0
        self.last_job: SlotJob | None = None
        self.request: GenerationRequest | None = None
        self._reset_job()

    def _reset_job(self) -> None:
        if self.request is not None:
            self.last_job = self._job(finished=True)
        self.stream: GenerationStream | None = None
        self.request = None
        self.index = 0
        self.children: list[Slot] = []
        self.prompt_pos = 0  # next prompt token to decode
        self.checkpoint_at: list[int] = []  # prompt positions to checkpoint at, ascending
        self.pending: int | None = None  # sampled, not yet decoded
        self.sampler: SamplerChain | None = None
        # Without the grammar: used while the model reasons, so a JSON grammar constrains only
        # the answer (None when the request has no grammar or no reasoning markers).
        self.free_sampler: SamplerChain | None = None
        self.detok: IncrementalDetokenizer | None = None
        self.stops: StopMatcher | None = None
        self.forced: deque[int] = deque()
        self.generated: list[int] = []
        self.cached = 0
        self.t_start = self.t_prompt_done = 0.0
        self.in_reasoning = False
        self.reasoning_tokens = 0
        self.marker_tail = ""  # recent text, to spot reasoning markers split over tokens
        self.spec = SeqState()
        self.draft_n = 0
        self.draft_accepted = 0

    @property
    def busy(self) -> bool:
        return self.state != "idle"

    def info(self, n_ctx: int, speculative: bool) -> SlotInfo:
        """This slot now. Read from another thread than the decode loop's: the job's parts are
        read once, so a job ending meanwhile gives its last state, not a mix of two jobs."""
        request, busy = self.request, self.busy
        job = self._job(finished=False) if request is not None and busy else self.last_job
        return SlotInfo(self.seq_id, n_ctx, busy, speculative, job)

    def _job(self, *, finished: bool) -> SlotJob | None:
        request = self.request
        if request is None:
            return None
        prompt = tuple(request.prompt)
        return SlotJob(
            prompt=prompt,
            sampling=request.sampling,
            max_tokens=request.max_tokens,
            n_prompt_processed=max(0, min(self.prompt_pos, len(prompt)) - self.cached),
            n_cached=self.cached,
            generated=tuple(self.generated),
            finished=finished,
        )

    def free_samplers(self) -> None:
        for chain in (self.sampler, self.free_sampler):
            if chain is not None:
                chain.free()

    def active_sampler(self) -> SamplerChain:
        """The grammar-free chain while reasoning (or draining forced tokens), else the main one."""
        if self.free_sampler is not None and (self.in_reasoning or self.forced):
            return self.free_sampler
        return self._running(self.sampler, "sampler")

    def commit_pending(self) -> None:
        """The pending token has been decoded: the KV holds it now."""
        self.kv_tokens.append(self._running(self.pending, "pending token"))
        self.pending = None

    # A busy slot always holds its job's request, stream, detokenizer and stop matcher (the
    # engine sets them together when it assigns the job); these read them without an Optional.
    @property
    def job_request(self) -> GenerationRequest:
        return self._running(self.request, "request")

    @property
    def job_stream(self) -> GenerationStream:
        return self._running(self.stream, "stream")

    @property
    def job_detok(self) -> IncrementalDetokenizer:
        return self._running(self.detok, "detokenizer")

    @property
    def job_stops(self) -> StopMatcher:
        return self._running(self.stops, "stop matcher")

    def _running(self, value: _T | None, what: str) -> _T:
        if value is None:
            raise RuntimeError(f"slot {self.seq_id} has no {what}: it runs no job")
        return value
