"""A request's tasks: one prompt per question (per variant), tokenized, with the rows to read.

Every question is its own task (lev asks a multi-option choice twice, the second time with the
options reversed). A task knows its prompt units (token ids, and media units where images sit),
which of them the readout needs an output row for, and where its option markers are.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from llamactl.core.errors import InvalidRequestError

from .labels import LabelMaker, Labels
from .media import MediaSet, MediaUnit
from .registry import DecisionType
from .render import OMNI_MARKS, OMNI_SEP, PromptRenderer
from .types import DecisionRequest, Option, Question

Unit = int | MediaUnit
QUESTION_COLUMNS = {"choice": 0, "score": 1, "noul": 2}  # d1-omni's scorer columns
OMNI_MAX_TOKENS = 16384


@dataclass
class Task:
    question: int  # index into the request's questions
    variant: int  # 1: lev's reversed option order
    options: tuple[Option, ...]  # in prompt order
    labels: Labels
    units: list[Unit]
    outputs: tuple[int, ...]  # unit indices whose output rows the readout reads
    markers: tuple[int, ...] = ()  # unit indices of the option markers
    ids: list[int] = field(default_factory=list)  # label readouts: the logits to keep
    rows: dict[int, np.ndarray] = field(default_factory=dict, repr=False)

    @property
    def n_tokens(self) -> int:
        return sum(u.n_tokens if isinstance(u, MediaUnit) else 1 for u in self.units)

    @property
    def has_media(self) -> bool:
        return any(isinstance(u, MediaUnit) for u in self.units)


@dataclass(frozen=True)
class Vocab:
    """What prompt building needs from the model's tokenizer."""

    tokenize: Callable[[str], list[int]]  # no BOS added, special tokens parsed
    box_end: int | None = None  # kev's option marker
    mask: int | None = None  # d1-omni's option marker


class TaskBuilder:
    def __init__(
        self,
        dtype: DecisionType,
        renderer: PromptRenderer,
        labels: LabelMaker,
        vocab: Vocab,
        *,
        class_labels: Sequence[str] = (),
        max_tokens: int = OMNI_MAX_TOKENS,
    ) -> None:
        self.dtype = dtype
        self.renderer = renderer
        self.labels = labels
        self.vocab = vocab
        self.class_labels = tuple(class_labels)
        self.max_tokens = max_tokens

    def build(self, request: DecisionRequest, media: MediaSet | None) -> list[Task]:
        tasks: list[Task] = []
        for qi, q in enumerate(request.questions):
            self._check_classes(q)
            n_variants = self.dtype.choice_variants if q.type == "choice" else 1
            for variant in range(n_variants if len(q.options) > 1 else 1):
                options = q.options[::-1] if variant else q.options
                tasks.append(self._task(request, qi, q, variant, options, media))
        return tasks

    def _task(
        self,
        request: DecisionRequest,
        qi: int,
        q: Question,
        variant: int,
        options: tuple[Option, ...],
        media: MediaSet | None,
    ) -> Task:
        labels = self.labels.for_options(q.type, options)
        text = self.renderer.render(
            q,
            options,
            labels,
            request.state,
            len(request.media),
            audio=any(m.kind == "audio" for m in request.media),
            all_questions=request.questions,
        )
        if self.dtype.readout == "markers":
            units = self._omni_units(text, len(options))
        elif media is not None:
            units = media.tokenize(text)
        else:
            units = list(self.vocab.tokenize(text))
        if not units:
            raise InvalidRequestError(f"questions.{q.id}: the prompt rendered empty")
        if self.dtype.noul_scale and q.type == "noul":
            labels = self.labels.positional(self.dtype.noul_scale)
        return self._with_rows(q, variant, options, labels, units, qi)

    def _with_rows(
        self,
        q: Question,
        variant: int,
        options: tuple[Option, ...],
        labels: Labels,
        units: list[Unit],
        qi: int,
    ) -> Task:
        last = len(units) - 1
        if isinstance(units[last], MediaUnit):
            raise InvalidRequestError(f"questions.{q.id}: the prompt cannot end with an image")
        readout = self.dtype.readout
        if readout == "labels":
            return Task(qi, variant, options, labels, units, (last,), ids=read_ids(labels))
        if readout == "classifier":
            return Task(qi, variant, options, labels, units, (last,))
        marker = self.vocab.box_end if readout == "pointer" else self.vocab.mask
        markers = tuple(i for i, u in enumerate(units) if u == marker)
        if len(markers) != len(options):
            raise InvalidRequestError(
                f"questions.{q.id}: unexpected layout: {len(markers)} option markers "
                f"for {len(options)} options"
            )
        if readout == "pointer":
            return Task(qi, variant, options, labels, units, (*markers, last), markers)
        return Task(qi, variant, options, labels, units, tuple(range(len(units))), markers)

    def _check_classes(self, q: Question) -> None:
        """MiniCPM-OCR-Jev answers with its own classes: a choice names them, a score has one
        level per class."""
        if self.dtype.readout != "classifier":
            return
        classes = self.class_labels
        if q.type == "choice":
            unknown = [o.key for o in q.options if o.key not in classes]
            if unknown:
                raise InvalidRequestError(
                    f"questions.{q.id}: option {unknown[0]!r} is not a class of this model "
                    f"({', '.join(classes)})"
                )
        elif q.type == "score" and len(q.options) != len(classes):
            raise InvalidRequestError(
                f"questions.{q.id}: this model rates {len(classes)} levels "
                f"({', '.join(classes)}), the question has {len(q.options)}"
            )

    # ------------------------------------------------------------------ d1-omni
    def _omni_units(self, text: str, n_options: int) -> list[Unit]:
        """The pieces between separators, tokenized one by one (as in training) and cut to
        d1-omni's budgets: options first, then the question, the state gets what is left."""
        pieces: list[tuple[str, list[int]]] = []
        for piece in text.split(OMNI_SEP):
            kind = "fixed"
            for name, mark in OMNI_MARKS.items():
                if piece.startswith(mark):
                    kind, piece = name, piece[len(mark) :]
                    break
            pieces.append((kind, self.vocab.tokenize(piece) if piece else []))
        total = self.max_tokens
        opt_budget = max(96, min(24 * n_options + 32, total // 2))
        per_option = max(2, (opt_budget - 3 * n_options) // max(n_options, 1))
        cut = {"mark_option": per_option, "mark_question": max(16, opt_budget)}
        pieces = [(k, t[: cut[k]] if k in cut else t) for k, t in pieces]
        used = sum(len(t) for k, t in pieces if k != "mark_state")
        room = total - used
        if room < 0:
            raise InvalidRequestError(
                f"the question and its options take {used} tokens, more than the "
                f"{total} this model reads"
            )
        out: list[Unit] = []
        for kind, toks in pieces:
            out.extend(toks[:room] if kind == "mark_state" else toks)
        return out


def read_ids(labels: Labels) -> list[int]:
    """Every token id a label readout reads, in a fixed order."""
    return list(dict.fromkeys(t for group in labels.groups for t in group))


def label_scores(labels: Labels, ids: list[int], row: np.ndarray) -> np.ndarray:
    """An option's score is the max logit over its label group."""
    where = {t: i for i, t in enumerate(ids)}
    return np.array([max(row[where[t]] for t in group) for group in labels.groups])
