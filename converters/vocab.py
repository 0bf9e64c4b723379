"""The tokenizer written the way llama.cpp's converter writes a GPT-2 style (byte-level BPE)
vocabulary: every id up to the model's vocab size (holes as `[PAD<i>]`, unused), added tokens
typed CONTROL or USER_DEFINED, merges, special token ids and the chat templates.

llama.cpp picks the pre-tokenizer by hashing how `transformers` tokenizes a test string; we have
no `transformers`, so each family names the pre-tokenizer of the base model it is built on
(`lfm2`, `qwen35`, `qwen2`), which is what that hash resolves to for those tokenizers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import gguf

from llamactl.core.errors import CheckpointError

from .checkpoint import Checkpoint


@dataclass
class Vocab:
    tokens: list[str]
    types: list[int]
    pre: str
    special: gguf.SpecialVocab = field(repr=False)
    _ids: dict[str, int] = field(default_factory=dict, repr=False)

    def id_of(self, text: str) -> int | None:
        """The id of a token as stored (byte-level form for BPE pieces)."""
        if not self._ids:
            self._ids = {t: i for i, t in reversed(list(enumerate(self.tokens)))}
        return self._ids.get(text)


def _looks_special(token: str) -> bool:
    """The rule llama.cpp's converter uses for added tokens not flagged special."""
    return (
        token in ("<pad>", "<mask>", "<2mass>", "[@BOS@]")
        or (token.startswith("<|") and token.endswith("|>"))
        or (token.startswith("<｜") and token.endswith("｜>"))
        or (token.startswith("<unused") and token.endswith(">"))
    )


def read_bpe_vocab(ckpt: Checkpoint, *, pre: str, vocab_size: int | None) -> Vocab:
    """tokenizer.json (model type BPE) as GGUF token lists; `vocab_size` pads to the model's."""
    tok = ckpt.json("tokenizer.json")
    model = tok.get("model")
    if not isinstance(model, dict) or model.get("type") != "BPE":
        kind = model.get("type") if isinstance(model, dict) else None
        raise CheckpointError(
            ckpt.dir / "tokenizer.json", "model.type", f"expected a BPE tokenizer, found {kind!r}"
        )
    vocab = model.get("vocab")
    if not isinstance(vocab, dict) or not vocab:
        raise CheckpointError(ckpt.dir / "tokenizer.json", "model.vocab", "missing or empty")
    by_id: dict[int, str] = {int(i): t for t, i in vocab.items()}
    added: dict[int, dict[str, Any]] = {}
    for entry in tok.get("added_tokens") or []:
        try:
            added[int(entry["id"])] = entry
            by_id[int(entry["id"])] = str(entry["content"])
        except (KeyError, TypeError, ValueError):
            raise CheckpointError(
                ckpt.dir / "tokenizer.json", "added_tokens", f"malformed entry {entry!r}"
            ) from None
    top = max(by_id) + 1
    size = vocab_size if vocab_size is not None else top
    if top > size:
        raise CheckpointError(
            ckpt.dir / "config.json",
            "vocab_size",
            f"{size} is smaller than the tokenizer's highest id {top - 1}",
        )
    tokens: list[str] = []
    types: list[int] = []
    for i in range(size):
        text = by_id.get(i)
        if text is None:
            tokens.append(f"[PAD{i}]")
            types.append(gguf.TokenType.UNUSED)
        elif i in added:
            if added[i].get("special") or _looks_special(text):
                types.append(gguf.TokenType.CONTROL)
            else:
                text = text.replace("\u2581", " ")  # pre-normalised user-defined spaces
                types.append(gguf.TokenType.USER_DEFINED)
            tokens.append(text)
        else:
            tokens.append(text)
            types.append(gguf.TokenType.NORMAL)
    special = gguf.SpecialVocab(ckpt.dir, load_merges=True, n_vocab=size)
    _byte_level_adds_nothing(tok, special)
    if not special.merges:
        raise CheckpointError(
            ckpt.dir / "tokenizer.json", "model.merges", "a BPE tokenizer needs merges"
        )
    return Vocab(tokens, types, pre, special)


def _byte_level_adds_nothing(tok: dict[str, Any], special: gguf.SpecialVocab) -> None:
    """A ByteLevel post-processor adds no BOS or EOS: llama.cpp's gguf-py (b11434) writes
    `add_bos_token` / `add_eos_token` false for it when nothing else set them; the pinned
    gguf package predates that rule."""
    post = tok.get("post_processor")
    if not isinstance(post, dict):
        return
    for proc in post.get("processors", [post]):
        if isinstance(proc, dict) and proc.get("type") == "ByteLevel":
            special.add_special_token.setdefault("bos", False)
            special.add_special_token.setdefault("eos", False)


def named_templates(special: gguf.SpecialVocab) -> tuple[str | None, dict[str, str]]:
    """The default chat template and the named ones the tokenizer config carries."""
    value = special.chat_template
    if value is None or isinstance(value, str):
        return value, {}
    default, named = None, {}
    for item in value:
        name, text = item.get("name"), item.get("template")
        if not isinstance(name, str) or not isinstance(text, str):
            continue
        if name == "default":
            default = text
        else:
            named[name] = text
    return default, named


def write_vocab(
    w: gguf.GGUFWriter,
    vocab: Vocab,
    *,
    templates: Sequence[dict[str, str]] | None,
    add_bos: bool | None = None,
) -> None:
    """Tokenizer keys in llama.cpp's order; `templates` replaces the tokenizer's own list
    (None keeps the checkpoint's own chat templates, as a chat model's file does)."""
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(vocab.pre)
    w.add_token_list(vocab.tokens)
    w.add_token_types(vocab.types)
    if templates is not None:
        vocab.special.chat_template = list(templates) or None
    if add_bos is not None:
        vocab.special.add_special_token["bos"] = add_bos
    vocab.special.add_to_gguf(w, quiet=True)


def require_single_tokens(vocab: Vocab, labels: Sequence[str], ckpt: Checkpoint, why: str) -> None:
    """Label readouts need each label to be exactly one token of the vocabulary."""
    missing = [s for s in labels if vocab.id_of(byte_level_text(s)) is None]
    if missing:
        raise CheckpointError(
            ckpt.dir / "tokenizer.json",
            "model.vocab",
            f"{why} need {', '.join(repr(m) for m in missing[:8])} as single "
            "tokens" + (f" (and {len(missing) - 8} more)" if len(missing) > 8 else ""),
        )


def _byte_level_table() -> dict[int, str]:
    """GPT-2's byte to printable-character table, which byte-level BPE vocabularies use."""
    keep = [
        *range(ord("!"), ord("~") + 1),
        *range(ord("¡"), ord("¬") + 1),
        *range(ord("®"), ord("ÿ") + 1),
    ]
    table = {b: chr(b) for b in keep}
    n = 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + n)
            n += 1
    return table


def byte_level_text(text: str) -> str:
    """How `text` appears in a byte-level BPE vocabulary (' A' is 'ĠA')."""
    table = _byte_level_table()
    return "".join(table[b] for b in text.encode())
