"""From raw scores to calibrated answers: llama.cpp's `format_answer` (spec 5.4).

p = softmax(scores / T) with the model's temperature for the question type and option count;
lev's two variants are averaged; then a choice's argmax and confidence, a score's expectation
and confidence, a noul's probability of "true".
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from llamactl.core.errors import DecisionEvalError

from .registry import DecisionType
from .types import Answer, Question, QuestionType


def softmax(scores: Sequence[float] | np.ndarray, temperature: float = 1.0) -> np.ndarray:
    x = np.asarray(scores, dtype=np.float64) / temperature
    if np.isnan(x).any():
        raise DecisionEvalError()
    x = x - x.max()
    e = np.exp(x)
    return e / e.sum()


def bucket(n: int, scheme: str) -> str:
    """The option-count bucket a temperature may be calibrated for."""
    if scheme == "lev":
        return "small" if n <= 8 else "mid" if n <= 26 else "large"
    return "2" if n <= 2 else "3_5" if n <= 5 else "6_10" if n <= 10 else "11"


def temperature(
    temps: Mapping[str, float], qtype: QuestionType, n_options: int, scheme: str
) -> float:
    """`<type>.<bucket>`, then `<type>`, then 1.0."""
    specific = temps.get(f"{qtype}.{bucket(n_options, scheme)}")
    if specific is not None:
        return specific
    return temps.get(qtype, 1.0)


def choice_confidence(p: np.ndarray) -> float:
    n = len(p)
    if n < 2:
        return 1.0
    return max(0.0, (float(p.max()) - 1.0 / n) / (1.0 - 1.0 / n))


def score_confidence(p: np.ndarray) -> float:
    n = len(p)
    if n < 2:
        return 1.0
    idx = np.arange(n)
    mode = int(np.argmax(p))
    spread = float(np.sum(p * np.abs(idx - mode)))
    uniform = float(np.sum(np.abs(idx - (n - 1) / 2)) / n)
    return max(0.0, 1.0 - spread / uniform)


def commit_noul(p_true: float, floor: float) -> float:
    """H2O-Lightning's noul floor: a yes/no probability less sure than `floor` (on either
    side) is moved to the floor on its own side, a tie to yes. The answer's side never
    changes; a floor of 0 is off."""
    if not floor or max(p_true, 1.0 - p_true) >= floor:
        return p_true
    return floor if p_true >= 0.5 else 1.0 - floor


def format_answer(
    question: Question,
    dtype: DecisionType,
    variants: Sequence[np.ndarray],
    temperature_value: float,
    noul_floor: float = 0.0,
) -> Answer:
    """`variants`: raw scores per variant, in the question's option order (variant 1 of lev
    already un-reversed); lev's noul gives 9 rating scores instead of 2. `noul_floor` is the
    model's (h2o-lightning), applied after the temperature."""
    probs = np.mean([softmax(v, temperature_value) for v in variants], axis=0)
    if question.type == "noul":
        if dtype.noul_scale and len(probs) == dtype.noul_scale:
            rating = float(np.sum(probs * np.arange(len(probs))) / (len(probs) - 1))
            return Answer("noul", noul=rating)
        true_index = next(i for i, o in enumerate(question.options) if o.key == "true")
        return Answer("noul", noul=commit_noul(float(probs[true_index]), noul_floor))
    keyed = {o.key: float(p) for o, p in zip(question.options, probs, strict=True)}
    if question.type == "choice":
        best = int(np.argmax(probs))  # the first of equal maxima, in option order
        return Answer(
            "choice",
            choice=question.options[best].key,
            probabilities=keyed,
            confidence=choice_confidence(probs),
        )
    expectation = float(np.sum(probs * np.arange(len(probs))))
    return Answer(
        "score",
        score=expectation,
        legend={str(i): level for i, level in enumerate(question.levels)},
        probabilities=keyed,
        confidence=score_confidence(probs),
    )
