"""Fill-in-the-middle prompts, built as llama-server's `/infill` builds them.

The repo-level pattern (arXiv 2409.12186), for a model whose GGUF declares FIM tokens:

    [FIM_REP]myproject\\n [FIM_SEP]name0\\n text0 ... [FIM_SEP]filename\\n
    [BOS] [FIM_PRE]prefix prompt [FIM_SUF]suffix [FIM_MID]

The extra files come first (without FIM_REP / FIM_SEP, each chunk is introduced by a plain
"--- snippet ---" line instead); the prefix keeps its last 3/4 of a batch, the suffix its first
quarter less the prompt; the extra context fills what the context leaves after a batch and
twice the generation budget, keeping its end. `spm` puts the suffix first (SPM order).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import llama_cpp

from llamactl.core.errors import NotSupportedError

from .model import Model

__all__ = ["FimTokens", "infill_tokens"]

_SNIPPET = "\n\n--- snippet ---\n\n"


@dataclass(frozen=True)
class FimTokens:
    """A vocabulary's FIM token ids; None where the GGUF declares none."""

    pre: int | None
    suf: int | None
    mid: int | None
    rep: int | None
    sep: int | None

    @classmethod
    def of(cls, model: Model) -> FimTokens:
        v = model.vocab

        def known(token: int) -> int | None:
            return None if token == llama_cpp.LLAMA_TOKEN_NULL else token

        return cls(
            pre=known(llama_cpp.llama_vocab_fim_pre(v)),
            suf=known(llama_cpp.llama_vocab_fim_suf(v)),
            mid=known(llama_cpp.llama_vocab_fim_mid(v)),
            rep=known(llama_cpp.llama_vocab_fim_rep(v)),
            sep=known(llama_cpp.llama_vocab_fim_sep(v)),
        )

    def require(self) -> tuple[int, int, int]:
        """(FIM_PRE, FIM_SUF, FIM_MID), or NotSupportedError (llama-server's 501, its words)."""
        if self.pre is None or self.suf is None or self.mid is None:
            missing = "prefix token is missing. " if self.pre is None else ""
            missing += "suffix token is missing. " if self.suf is None else ""
            missing += "middle token is missing. " if self.mid is None else ""
            raise NotSupportedError(f"Infill is not supported by this model: {missing}")
        return self.pre, self.suf, self.mid


def infill_tokens(
    model: Model,
    prefix: Sequence[int],
    suffix: Sequence[int],
    extra: Sequence[tuple[str, str]],
    prompt: Sequence[int],
    *,
    n_batch: int,
    n_predict: int,
    n_ctx: int,
    spm: bool = False,
) -> list[int]:
    """The FIM prompt for `prefix` + `prompt` ... `suffix` (token lists), with `extra` files
    as (filename, text). NotSupportedError unless the model declares FIM_PRE, FIM_SUF and
    FIM_MID (`FimTokens.require`)."""
    fim = FimTokens.of(model)
    pre, suf, mid = fim.require()

    def plain(text: str) -> list[int]:
        return model.tokenize(text, add_special=False, parse_special=False)

    extra_tokens: list[int] = []
    if fim.rep is not None:
        extra_tokens += [fim.rep, *plain("myproject\n")]
    for filename, text in extra:
        if fim.sep is not None:
            extra_tokens += [fim.sep, *plain(filename + "\n")]
        else:
            extra_tokens += plain(_SNIPPET)
        extra_tokens += plain(text)
    if fim.sep is not None:
        extra_tokens += [fim.sep, *plain("filename\n")]

    n_prefix = min(len(prefix), 3 * (n_batch // 4))
    n_suffix = min(len(suffix), max(0, n_batch // 4 - (2 + len(prompt))))
    n_extra = min(max(0, n_ctx - n_batch - 2 * n_predict), len(extra_tokens))

    head = [pre, *prefix[len(prefix) - n_prefix :], *prompt]
    tail = [suf, *suffix[:n_suffix]]
    first, second = (tail, head) if spm else (head, tail)
    out = extra_tokens[len(extra_tokens) - n_extra :] if n_extra else []
    if llama_cpp.llama_vocab_get_add_bos(model.vocab):
        out.append(model.bos_token_id)
    return [*out, *first, *second, mid]
