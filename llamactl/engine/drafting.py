"""The drafting policy: which generating slots get a draft this step, from which speculator,
and how long, from each speculator's acceptance record and the measured cost of a draft row.

The speculators themselves (n-gram lookups, the draft model) live in speculative.py.
"""

from __future__ import annotations

from .requests import EngineConfig
from .slot import Slot
from .speculative import DraftModel, LookupSpeculator, SeqState, Speculator

__all__ = ["DraftPolicy"]


class DraftPolicy:
    def __init__(
        self,
        speculators: list[Speculator],
        config: EngineConfig,
        *,
        row_budget: int,
        n_ctx_slot: int,
    ) -> None:
        self.speculators = speculators
        self.config = config
        self.row_budget = row_budget  # rows a step may hold
        self.n_ctx_slot = n_ctx_slot
        self.timing = {"step": 0.0, "step_n": 0, "row": 0.0, "row_n": 0}

    def drafts(self, slots: list[Slot]) -> dict[int, tuple[Speculator, list[int]]]:
        """A draft for each generating slot whose best speculator expects to gain tokens."""
        live = [s for s in slots if s.state == "generating" and s.pending is not None]
        budget = self.row_budget - len(live)
        n_min = max(1, self.config.spec_draft_n_min)
        out: dict[int, tuple[Speculator, list[int]]] = {}
        model_jobs: list[tuple[Slot, list[int], int]] = []
        drafter: DraftModel | None = None
        for slot in live:
            pending = slot.pending  # set for every live slot
            req = slot.job_request
            if slot.forced or pending is None or req.media is not None:
                continue  # a speculator cannot read a prompt's media
            # the rows this slot leaves a draft: the step's, its context's, its max_tokens'
            room = min(budget, self.n_ctx_slot - len(slot.kv_tokens) - 2)
            if req.max_tokens is not None:
                room = min(room, req.max_tokens - len(slot.generated) - 1)
            if room < 1:
                continue
            n_max = min(self.config.spec_draft_n_max, room)
            history = [*slot.kv_tokens, pending]
            best: Speculator | None = None
            best_draft: list[int] = []
            best_gain = 0.0
            n_model = 0
            slot.spec.rounds += 1
            for spec in self.speculators:
                if isinstance(spec, LookupSpeculator) and spec.n_max is not None:
                    draft, gain = self._own_length_draft(spec, slot.spec, history, room)
                elif n_max < n_min:
                    continue
                else:
                    survival = self._scaled_survival(spec, slot.spec, n_max)
                    n = self.worth_drafting(survival, n_max, slot.spec.rounds)
                    if n < n_min:
                        continue
                    if isinstance(spec, LookupSpeculator):
                        draft = spec.draft(slot.spec, history, n)
                        gain = sum(survival[: len(draft)]) if len(draft) >= n_min else 0.0
                    else:  # the draft model drafts later, for all its slots in one batch
                        draft, gain = [], sum(survival[:n])
                        if gain > best_gain:
                            n_model = n
                if gain > best_gain:
                    best, best_draft, best_gain = spec, draft, gain
            if best is None:
                continue
            if isinstance(best, DraftModel):
                drafter = best
                model_jobs.append((slot, history, n_model))
                budget -= n_model
            else:
                out[slot.seq_id] = (best, best_draft)
                budget -= len(best_draft)
        if drafter is not None:
            made = drafter.draft_many([(s.seq_id, h, n) for s, h, n in model_jobs])
            for slot, _, _ in model_jobs:
                draft = made.get(slot.seq_id, [])
                if len(draft) >= n_min:
                    out[slot.seq_id] = (drafter, draft)
        return out

    def _own_length_draft(
        self, spec: LookupSpeculator, seq: SeqState, history: list[int], room: int
    ) -> tuple[list[int], float]:
        """A speculator with its own draft lengths (ngram-mod) drafts all or nothing: the
        draft is taken when its expected kept tokens pay for its rows, or, while the
        speculator has few records, as a probe (its drafts only come from long matches)."""
        assert spec.n_max is not None and spec.n_min is not None
        if room < spec.n_min:
            return [], 0.0
        draft = spec.draft(seq, history, min(spec.n_max, room))
        if len(draft) < spec.n_min:
            return [], 0.0
        survival = self._scaled_survival(spec, seq, len(draft))
        gain = sum(survival)
        if not self.config.spec_adaptive or spec.stats.drafts < 4:
            return draft, max(gain, 1e-3)
        return (draft, gain) if gain > self._row_cost() * len(draft) else ([], 0.0)

    @staticmethod
    def _scaled_survival(spec: Speculator, seq: SeqState, n: int) -> list[float]:
        """The speculator's per-position survival, scaled by how this request's drafts fare
        against its overall record (expected accepted tokens = the sum over the draft)."""
        survival = spec.survival(n)
        g = spec.stats
        overall = (g.accepted + 1) / (g.drafted + 2)
        scale = spec.rate(seq) / overall
        return [min(1.0, p * scale) for p in survival]

    def worth_drafting(self, survival: list[float], n_max: int, rounds: int) -> int:
        """How many draft tokens pay for their rows: position i is kept with probability
        survival[i] and costs `row_cost` of a step (a share measured on this machine: near 0
        where decoding is memory-bound, much of a step on a small CPU). A speculator too poor
        to draft still gets a one-token probe every 8 rounds, so its record can recover."""
        if not self.config.spec_adaptive:
            return n_max
        cost = self._row_cost()
        n = 0
        while n < n_max and survival[n] > cost:
            n += 1
        if n == 0 and rounds % 8 == 0:
            return 1
        return n

    def _row_cost(self) -> float:
        """Cost of one more row in a generation step, as a share of the step (prior 0.3)."""
        t = self.timing
        if t["step_n"] < 3 or t["row_n"] < 3:
            return 0.3
        return min(0.95, max(0.01, t["row"] / max(t["step"], 1e-6)))

    def time_step(self, seconds: float, n_draft_rows: int) -> None:
        """Follow a generation-only step's decode time (EMA): plain steps give the step cost,
        steps with drafts the marginal cost of a draft row."""
        t = self.timing
        if n_draft_rows == 0:
            t["step"] = seconds if t["step_n"] == 0 else 0.8 * t["step"] + 0.2 * seconds
            t["step_n"] += 1
        elif t["step_n"]:
            row = max(0.0, seconds - t["step"]) / n_draft_rows
            t["row"] = row if t["row_n"] == 0 else 0.8 * t["row"] + 0.2 * row
            t["row_n"] += 1
