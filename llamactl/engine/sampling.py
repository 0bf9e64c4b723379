"""Native llama.cpp sampler chains, one per generating sequence.

The chain order follows llama.cpp's common defaults (bias, penalties, DRY, top-k, top-p,
min-p, temperature, distribution) so results match llama-server for the same parameters. A top-k
prefilter always precedes top-p: top-p alone sorts the whole vocabulary (~4 ms a token).
"""

from __future__ import annotations

import ctypes
import random

import llama_cpp
import numpy as np

from llamactl.core.errors import InvalidRequestError, LlamactlError

from .grammar import check_nesting
from .types import SamplingParams, TokenLogprob

_TOP_P_PREFILTER = 256


class SamplerChain:
    """Owns one `llama_sampler` chain; not thread-safe (used by the decode thread only)."""

    def __init__(self, vocab: llama_cpp.llama_vocab_p, n_vocab: int, params: SamplingParams):
        self.params = params
        self.seed = params.seed if params.seed is not None else random.randrange(2**32 - 1)
        chain = llama_cpp.llama_sampler_chain_init(llama_cpp.llama_sampler_chain_default_params())
        self._chain: llama_cpp.llama_sampler_p | None = chain
        try:
            self._build(vocab, n_vocab, params)
        except Exception:
            self.free()
            raise

    def _add(self, sampler: llama_cpp.llama_sampler_p) -> None:
        llama_cpp.llama_sampler_chain_add(self._live(), sampler)

    def _build(self, vocab: llama_cpp.llama_vocab_p, n_vocab: int, p: SamplingParams) -> None:
        if p.grammar:
            check_nesting(p.grammar)
            grammar = llama_cpp.llama_sampler_init_grammar(vocab, p.grammar.encode(), b"root")
            if not grammar:
                raise InvalidRequestError("the grammar could not be parsed")
            self._add(grammar)
        if p.logit_bias:
            arr = (llama_cpp.llama_logit_bias * len(p.logit_bias))()
            for i, (tok, bias) in enumerate(p.logit_bias.items()):
                if not 0 <= tok < n_vocab:
                    raise InvalidRequestError(
                        f"logit_bias: token id {tok} is out of the vocabulary"
                    )
                arr[i] = llama_cpp.llama_logit_bias(tok, bias)
            self._add(llama_cpp.llama_sampler_init_logit_bias(n_vocab, len(p.logit_bias), arr))
        if p.repeat_penalty != 1.0 or p.presence_penalty != 0.0 or p.frequency_penalty != 0.0:
            self._add(
                llama_cpp.llama_sampler_init_penalties(
                    n_vocab,
                    p.repeat_last_n,
                    p.repeat_penalty,
                    p.frequency_penalty,
                    p.presence_penalty,
                )
            )
        if p.dry_multiplier != 0.0 and p.dry_penalty_last_n != 0:
            self._add(_dry(vocab, p))
        if p.greedy:
            self._add(llama_cpp.llama_sampler_init_greedy())
            return
        top_k = p.top_k if p.top_k > 0 else (_TOP_P_PREFILTER if p.top_p < 1.0 else 0)
        if top_k > 0:
            self._add(llama_cpp.llama_sampler_init_top_k(top_k))
        if p.top_p < 1.0:
            self._add(llama_cpp.llama_sampler_init_top_p(p.top_p, 1))
        if p.min_p > 0.0:
            self._add(llama_cpp.llama_sampler_init_min_p(p.min_p, 1))
        self._add(llama_cpp.llama_sampler_init_temp(p.temperature))
        self._add(llama_cpp.llama_sampler_init_dist(self.seed))

    def sample(self, ctx: llama_cpp.llama_context_p, row: int) -> int:
        """Sample from batch row `row` and accept the token into the chain's state."""
        return llama_cpp.llama_sampler_sample(self._live(), ctx, row)

    def accept(self, token: int) -> None:
        """Record a token chosen outside the chain (forced or drafted) in its history."""
        llama_cpp.llama_sampler_accept(self._live(), token)

    def _live(self) -> llama_cpp.llama_sampler_p:
        if self._chain is None:
            raise LlamactlError("the sampler chain was freed")
        return self._chain

    def free(self) -> None:
        if self._chain:
            llama_cpp.llama_sampler_free(self._chain)
            self._chain = None

    def __del__(self) -> None:
        self.free()


def _dry(vocab: llama_cpp.llama_vocab_p, p: SamplingParams) -> llama_cpp.llama_sampler_p:
    """llama.cpp's DRY sampler; it tokenizes the breakers itself, so the array may go."""
    breakers = [b.encode() for b in p.dry_sequence_breakers if b]
    arr = (ctypes.c_char_p * len(breakers))(*breakers) if breakers else None
    return llama_cpp.llama_sampler_init_dry(
        vocab,
        p.dry_multiplier,
        p.dry_base,
        p.dry_allowed_length,
        p.dry_penalty_last_n,
        arr,
        len(breakers),
    )


def check_grammar(vocab: llama_cpp.llama_vocab_p, grammar: str) -> None:
    """Parse a grammar once up front, so a bad one is refused before the request is queued."""
    check_nesting(grammar)
    sampler = llama_cpp.llama_sampler_init_grammar(vocab, grammar.encode(), b"root")
    if not sampler:
        raise InvalidRequestError("the grammar could not be parsed (GBNF with a 'root' rule)")
    llama_cpp.llama_sampler_free(sampler)


def token_logprobs(
    ctx: llama_cpp.llama_context_p,
    row: int,
    n_vocab: int,
    token: int,
    n_top: int,
    token_text,
) -> tuple[TokenLogprob, tuple[TokenLogprob, ...]]:
    """Log-probabilities from the raw logits row (before sampling transforms), as OpenAI reports."""
    ptr = llama_cpp.llama_get_logits_ith(ctx, row)
    logits = np.ctypeslib.as_array(ctypes.cast(ptr, ctypes.POINTER(ctypes.c_float)), (n_vocab,))
    logits = logits.astype(np.float64)
    peak = logits.max()
    log_z = peak + np.log(np.exp(logits - peak).sum())
    chosen = TokenLogprob(token, token_text(token), float(logits[token] - log_z))
    top: tuple[TokenLogprob, ...] = ()
    if n_top > 0:
        idx = np.argpartition(-logits, n_top)[:n_top]
        idx = idx[np.argsort(-logits[idx])]
        top = tuple(TokenLogprob(int(i), token_text(int(i)), float(logits[i] - log_z)) for i in idx)
    return chosen, top
