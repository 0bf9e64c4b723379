"""From a logits row to what a caller sees: sample (or take a forced token), detokenise, hold
back what may be a stop string, follow reasoning markers and budgets, and end a choice with
its `Done` (usage and timings).

Everything here runs on the decode thread; a slot is idle before its `Done` is delivered.
"""

from __future__ import annotations

import time

import llama_cpp

from .kv_reuse import SlotMemory
from .model import Model
from .requests import EngineStats, ReasoningSpec
from .sampling import token_logprobs
from .slot import Slot
from .types import Done, FinishReason, TextDelta, Timings, TokenLogprobs, Usage

__all__ = ["OutputProcessor"]


class OutputProcessor:
    def __init__(
        self,
        ctx: llama_cpp.llama_context_p,
        model: Model,
        memory: SlotMemory,
        stats: EngineStats,
        *,
        n_ctx_slot: int,
        speculating: bool,
    ) -> None:
        self._ctx = ctx
        self.model = model
        self.memory = memory
        self.stats = stats
        self.n_ctx_slot = n_ctx_slot
        self._speculating = speculating  # timings then report draft counts

    def force_reasoning_end(self, slot: Slot) -> None:
        spec = slot.job_request.reasoning
        if spec is not None and slot.in_reasoning and not slot.forced:
            slot.forced.extend(spec.end_tokens)
            slot.in_reasoning = False  # no second force while these tokens drain

    def sample(self, slot: Slot, row: int) -> None:
        req = slot.job_request
        chain = slot.active_sampler()
        if slot.forced:
            token = slot.forced.popleft()
            if chain is not slot.sampler or not req.sampling.grammar:
                chain.accept(token)  # a grammar may not accept a forced token: never feed it one
        else:
            token = chain.sample(self._ctx, row)
        slot.generated.append(token)
        self.stats.tokens_generated += 1
        logprobs: TokenLogprobs = ()
        if req.logprobs is not None:
            logprobs = (
                token_logprobs(
                    self._ctx, row, self.model.n_vocab, token, req.logprobs, self.model.token_text
                ),
            )
        detok, stops = slot.job_detok, slot.job_stops
        if self.model.is_eog(token) and not req.ignore_eos:
            self._emit(slot, detok.flush() + stops.flush(), (token,), logprobs)
            self.finish(slot, "stop")
            return
        piece = detok.push(token)
        if req.reasoning is not None:
            self._track_reasoning(slot, req.reasoning, piece)
        text, stop = stops.push(piece)
        if stop is not None:
            self._emit(slot, text, (token,), logprobs)
            self.finish(slot, "stop", stop)
            return
        self._emit(slot, text, (token,), logprobs)
        if req.max_tokens is not None and len(slot.generated) >= req.max_tokens:
            self._emit(slot, detok.flush() + stops.flush(), (), ())
            self.finish(slot, "length")
            return
        if len(slot.kv_tokens) >= self.n_ctx_slot:  # no position left to decode it at
            self._emit(slot, detok.flush() + stops.flush(), (), ())
            self.finish(slot, "length")
            return
        slot.pending = token

    def _track_reasoning(self, slot: Slot, spec: ReasoningSpec, piece: str) -> None:
        """Follow the reasoning markers in the output and enforce the budget."""
        tail = (slot.marker_tail + piece)[-(len(spec.start) + len(spec.end) + 16) :]
        forcing = bool(slot.forced)
        if slot.in_reasoning or forcing:
            if spec.end in tail:
                slot.in_reasoning = False
                tail = tail[tail.rindex(spec.end) + len(spec.end) :]
            elif slot.in_reasoning:
                slot.reasoning_tokens += 1
                if spec.budget is not None and slot.reasoning_tokens >= spec.budget:
                    self.force_reasoning_end(slot)
        elif spec.start in tail:
            slot.in_reasoning = True
            tail = tail[tail.rindex(spec.start) + len(spec.start) :]
            if spec.budget == 0:
                self.force_reasoning_end(slot)
        slot.marker_tail = tail

    def _emit(
        self, slot: Slot, text: str, tokens: tuple[int, ...], logprobs: TokenLogprobs
    ) -> None:
        if text or logprobs:
            slot.job_stream._push(TextDelta(text, tokens, logprobs, slot.index))

    def finish(self, slot: Slot, reason: FinishReason, stop: str | None = None) -> None:
        """End the slot's generation; the slot is idle before its `Done` is delivered, so a
        caller that sees `Done` can count on the slot being free."""
        now = time.perf_counter()
        req, stream, index = slot.request, slot.stream, slot.index
        for child in slot.children:  # a parent ended before its prompt finished takes them along
            self.finish(child, reason)
        done = None
        if stream is not None and req is not None:
            prompt_done = slot.t_prompt_done or now
            shared = index > 0  # a child: the parent decoded the prompt for it
            timings = Timings(
                prompt_n=0 if shared else len(req.prompt) - slot.cached,
                prompt_ms=0.0 if shared else (prompt_done - slot.t_start) * 1000.0,
                predicted_n=len(slot.generated),
                predicted_ms=(now - prompt_done) * 1000.0 if slot.t_prompt_done else 0.0,
                cache_n=slot.cached,
                draft_n=slot.draft_n if self._speculating else None,
                draft_n_accepted=slot.draft_accepted if self._speculating else None,
            )
            usage = Usage(len(req.prompt), slot.cached, len(slot.generated), slot.reasoning_tokens)
            self.stats.prompt_seconds += timings.prompt_ms / 1000.0
            self.stats.predicted_seconds += timings.predicted_ms / 1000.0
            total = len(req.prompt) + len(slot.generated)
            self.stats.n_tokens_max = max(self.stats.n_tokens_max, total)
            done = Done(reason, usage, timings, stop, tuple(slot.generated), index)
        slot.free_samplers()
        if index > 0 or slot.state == "waiting_parent":
            self.memory.clear(slot)  # children share their parent's prompt: never cached
        else:
            slot.saveable = self.memory.cache is not None and req is not None and req.cache_prompt
            slot.answer_from = len(req.prompt) if req is not None else None
        slot.last_used = now
        slot._reset_job()
        slot.state = "idle"
        if stream is not None and done is not None:
            stream._push(done)
