"""llama.cpp's grammar sampler as a test oracle: does a GBNF compile, and does it let the
model write exactly a given text?"""

from __future__ import annotations

import ctypes
import math

import llama_cpp

__all__ = ["compile_grammar", "grammar_accepts"]


def compile_grammar(model, grammar: str):
    sampler = llama_cpp.llama_sampler_init_grammar(model.vocab, grammar.encode(), b"root")
    assert sampler, "llama.cpp rejected the grammar:\n" + grammar
    return sampler


def grammar_accepts(model, grammar: str, text: str) -> bool:
    """Whether the grammar lets the model write exactly `text` and then stop."""
    sampler = compile_grammar(model, grammar)
    try:
        tokens = model.tokenize(text, add_special=False, parse_special=False)
        for token in [*tokens, model.eos_token_id]:
            data = (llama_cpp.llama_token_data * 1)()
            data[0].id, data[0].logit, data[0].p = token, 0.0, 0.0
            candidates = llama_cpp.llama_token_data_array(data, 1, -1, False)
            llama_cpp.llama_sampler_apply(sampler, ctypes.byref(candidates))
            if math.isinf(data[0].logit):
                return False
            if token != model.eos_token_id:
                llama_cpp.llama_sampler_accept(sampler, token)
        return True
    finally:
        llama_cpp.llama_sampler_free(sampler)
