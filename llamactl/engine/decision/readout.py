"""From the rows a task's prompt produced to its option scores, and from a request's task
scores to its answers."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .answer import format_answer, temperature
from .heads import ClassifierHead, OmniHead, PointerHead
from .loader import DecisionModel
from .prompt import QUESTION_COLUMNS, Task, label_scores
from .types import Answer, DecisionRequest, Option

POSITIVE = ("true", "yes", "match", "positive", "1")


def task_scores(dm: DecisionModel, task: Task, question_type: str) -> np.ndarray:
    """Raw scores in the task's option (prompt) order; lev's noul gives its 9 ratings."""
    readout = dm.dtype.readout
    if readout == "labels":
        return label_scores(task.labels, task.ids, task.rows[task.outputs[-1]])
    if readout == "classifier":
        assert isinstance(dm.head, ClassifierHead)
        z = dm.head.scores(task.rows[task.outputs[-1]])
        return class_scores(z, dm.class_labels, question_type, task.options)
    if readout == "pointer":
        assert isinstance(dm.head, PointerHead)
        last = task.rows[task.outputs[-1]]
        keys = np.stack([task.rows[m] for m in task.markers])
        return dm.head.scores(last, keys)
    assert isinstance(dm.head, OmniHead)
    hidden = np.stack([task.rows[i] for i in range(len(task.units))])
    return dm.head.scores(hidden, task.markers, QUESTION_COLUMNS[question_type])


def class_scores(
    z: np.ndarray, classes: Sequence[str], question_type: str, options: Sequence[Option]
) -> np.ndarray:
    """A classifier's scores as option scores: a choice names classes, a score's levels are
    the classes in order, a noul is the positive class against the others."""
    if question_type == "score":
        return z
    if question_type == "choice":
        return np.array([z[classes.index(o.key)] for o in options])
    lowered = [c.lower() for c in classes]
    pos = next((lowered.index(p) for p in POSITIVE if p in lowered), len(classes) - 1)
    others = np.delete(z, pos)
    rest = float(np.log(np.sum(np.exp(others - others.max()))) + others.max())
    return np.array([z[pos] if o.key == "true" else rest for o in options])


def answers(
    dm: DecisionModel, request: DecisionRequest, tasks: Sequence[Task]
) -> dict[str, Answer]:
    """Every question's answer, in request order (lev's reversed variant un-reversed)."""
    per_question: dict[int, list[np.ndarray]] = {}
    for task in tasks:
        q = request.questions[task.question]
        scores = task_scores(dm, task, q.type)
        if task.variant:
            scores = scores[::-1]
        per_question.setdefault(task.question, []).append(scores)
    out: dict[str, Answer] = {}
    media = bool(request.media)
    for qi, q in enumerate(request.questions):
        t = temperature(dm.temperatures, q.type, len(q.options), dm.dtype.buckets)
        if media and dm.dtype.name == "lfm2-d1-omni":
            t = 1.0  # image and audio answers are not calibrated
        out[q.id] = format_answer(q, dm.dtype, per_question[qi], t, dm.noul_floor)
    return out
