"""The token sequence a reranker scores for one (query, document) pair, as llama-server builds it.

A model whose GGUF carries a `rerank` chat template (Qwen3-Reranker and its kind) gets that
template with `{query}` and `{document}` filled in, tokenized with special tokens parsed and
none added. Otherwise the pair is the BERT cross-encoder form, each part tokenized as plain
text: `[BOS] query [EOS] [SEP] document [EOS]`, each special token only where the vocabulary
asks for it (add_bos / add_eos / add_sep), with SEP standing in for a missing EOS.
"""

from __future__ import annotations

import llama_cpp

from llamactl.core.gguf_info import read_gguf_info

from .model import Model

__all__ = ["RANK_HEAD_TENSORS", "has_rank_head", "rerank_template", "rerank_tokens"]

# A classification head (llama.cpp's LLM_TENSOR_CLS / CLS_OUT): what rank pooling reads; without
# one, rank pooling would answer a component of the hidden state as the "score"
RANK_HEAD_TENSORS = frozenset({"cls.weight", "cls.output.weight"})


def has_rank_head(model: Model) -> bool:
    """The model's GGUF has a classification head (from its tensor table)."""
    return any(t.name in RANK_HEAD_TENSORS for t in read_gguf_info(model.path).tensors)


def rerank_template(model: Model) -> str | None:
    """The model's `tokenizer.chat_template.rerank`, if it has one."""
    raw = llama_cpp.llama_model_chat_template(model.handle, b"rerank")
    return raw.decode("utf-8") if raw is not None else None


def rerank_tokens(model: Model, query: str, document: str) -> list[int]:
    """The tokens of the pair (query, document) for the model's rank head."""
    template = rerank_template(model)
    if template is not None:
        prompt = template.replace("{query}", query).replace("{document}", document)
        return model.tokenize(prompt, add_special=False, parse_special=True)
    vocab = model.vocab
    eos = llama_cpp.llama_vocab_eos(vocab)
    if eos == llama_cpp.LLAMA_TOKEN_NULL:
        eos = llama_cpp.llama_vocab_sep(vocab)
    add_eos = llama_cpp.llama_vocab_get_add_eos(vocab)
    tokens: list[int] = []
    if llama_cpp.llama_vocab_get_add_bos(vocab):
        tokens.append(llama_cpp.llama_vocab_bos(vocab))
    tokens += model.tokenize(query, add_special=False, parse_special=False)
    if add_eos:
        tokens.append(eos)
    if llama_cpp.llama_vocab_get_add_sep(vocab):
        tokens.append(llama_cpp.llama_vocab_sep(vocab))
    tokens += model.tokenize(document, add_special=False, parse_special=False)
    if add_eos:
        tokens.append(eos)
    return tokens
