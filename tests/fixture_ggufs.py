"""Tiny GGUFs that llama.cpp loads for real, for the rerank, /infill and mtmd speech tests.

- `build_rank_bert`: a 2-layer BERT cross-encoder with a classification head (`cls`, `cls.output`,
  one output label), the shape of bge-reranker / jina-reranker GGUFs, with a WordPiece vocab
  over letters, digits, punctuation and a few whole words, pooling `rank`. Random weights: the
  scores mean nothing, but they are what llama.cpp computes, which is what the tests compare.
- `build_fim_copy`: the embedded SmolLM2 with FIM token ids written into its metadata (the
  `<repo_name>` ... `<jupyter_*>` specials it already has stand in for FIM markers).
- `build_audio_mmproj`: a Qwen2-Audio style hearing projector (`qwen2a`: Whisper's encoder of
  two convolutions, position embeddings and a transformer layer, then a linear projection),
  64 wide, for a chat model of `text_hidden`: mtmd hears through it, and the model's
  transcript is noise.

Both are written once per test session into pytest's temp folder (never committed).
"""

from __future__ import annotations

import string
from pathlib import Path

import gguf
import numpy as np

__all__ = [
    "FIM_MARKERS",
    "RANK_WORDS",
    "build_audio_mmproj",
    "build_fim_copy",
    "build_moe_copy",
    "build_rank_bert",
    "copy_metadata",
]

RANK_WORDS = ["machine", "learning", "is", "the", "paris", "city", "data", "which"]

_N_EMBD, _N_HEAD, _N_FF, _N_LAYER, _N_CTX = 32, 2, 64, 2, 512


def copy_metadata(reader: gguf.GGUFReader, w: gguf.GGUFWriter) -> None:
    """Every key of `reader`'s GGUF into `w`, but the architecture (the writer's own) and the
    file's GGUF.* bookkeeping."""
    for key, field in reader.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture":
            continue
        value_type = field.types[0]
        if value_type == gguf.GGUFValueType.ARRAY:
            w.add_key_value(key, field.contents(), value_type, sub_type=field.types[-1])
        else:
            w.add_key_value(key, field.contents(), value_type)


def _rank_vocab() -> tuple[list[str], list[int]]:
    """WordPiece tokens as llama.cpp's WPM tokenizer reads them: a word's first piece carries
    the `▁` prefix, continuations none. Ids 0-4 are the specials."""
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    pieces = list(string.ascii_lowercase + string.digits + string.punctuation)
    normal = [f"\u2581{p}" for p in pieces] + pieces + [f"\u2581{w}" for w in RANK_WORDS]
    types = [gguf.TokenType.CONTROL] * len(specials) + [gguf.TokenType.NORMAL] * len(normal)
    return specials + normal, [int(t) for t in types]


def build_rank_bert(path: Path, *, seed: int = 7, rerank_template: str | None = None) -> Path:
    """A BERT reranker (pooling rank, `cls` + `cls.output` head) at `path`, with
    `rerank_template` as its `tokenizer.chat_template.rerank` if given."""
    rng = np.random.default_rng(seed)
    tokens, types = _rank_vocab()
    tmp = path.with_name(path.name + ".tmp")
    w = gguf.GGUFWriter(str(tmp), "bert")
    w.add_name("tiny-rank-bert")
    w.add_context_length(_N_CTX)
    w.add_embedding_length(_N_EMBD)
    w.add_feed_forward_length(_N_FF)
    w.add_block_count(_N_LAYER)
    w.add_head_count(_N_HEAD)
    w.add_layer_norm_eps(1e-12)
    w.add_causal_attention(False)
    w.add_pooling_type(gguf.PoolingType.RANK)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    w.add_tokenizer_model("bert")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_type_count(2)
    w.add_bos_token_id(2)
    w.add_sep_token_id(3)
    w.add_pad_token_id(0)
    w.add_unk_token_id(1)
    w.add_mask_token_id(4)
    w.add_array("bert.classifier.output_labels", ["LABEL_0"])
    if rerank_template is not None:
        w.add_string("tokenizer.chat_template.rerank", rerank_template)

    def mat(name: str, *shape: int, scale: float = 0.2) -> None:
        w.add_tensor(name, (rng.standard_normal(shape) * scale).astype(np.float32))

    def norm(name: str, n: int) -> None:
        w.add_tensor(f"{name}.weight", (1 + 0.1 * rng.standard_normal(n)).astype(np.float32))
        w.add_tensor(f"{name}.bias", (0.1 * rng.standard_normal(n)).astype(np.float32))

    d, ff = _N_EMBD, _N_FF
    mat("token_embd.weight", len(tokens), d, scale=0.5)  # numpy (rows, cols) = ggml {cols, rows}
    mat("token_types.weight", 2, d)
    mat("position_embd.weight", _N_CTX, d)
    norm("token_embd_norm", d)
    for i in range(_N_LAYER):
        b = f"blk.{i}"
        for part in ("attn_q", "attn_k", "attn_v", "attn_output"):
            mat(f"{b}.{part}.weight", d, d)
            mat(f"{b}.{part}.bias", d, scale=0.05)
        norm(f"{b}.attn_output_norm", d)
        mat(f"{b}.ffn_up.weight", ff, d)
        mat(f"{b}.ffn_up.bias", ff, scale=0.05)
        mat(f"{b}.ffn_down.weight", d, ff)
        mat(f"{b}.ffn_down.bias", d, scale=0.05)
        norm(f"{b}.layer_output_norm", d)
    mat("cls.weight", d, d, scale=0.5)
    mat("cls.bias", d, scale=0.1)
    mat("cls.output.weight", 1, d, scale=1.0)
    mat("cls.output.bias", 1, scale=0.1)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    tmp.replace(path)
    return path


# SmolLM2's own specials, unused in its chat template, as (marker, token text)
FIM_MARKERS = {
    "pre": "<filename>",
    "suf": "<gh_stars>",
    "mid": "<issue_start>",
    "rep": "<repo_name>",
    "sep": "<file_sep>",
}


def build_fim_copy(source: Path, path: Path, kinds: tuple[str, ...] = tuple(FIM_MARKERS)) -> Path:
    """A copy of the GGUF at `source` whose metadata declares the FIM tokens `kinds` (of
    `FIM_MARKERS`: pre, suf, mid, rep, sep)."""
    reader = gguf.GGUFReader(source)
    arch = str(reader.fields["general.architecture"].contents())
    tokens: list[str] = reader.fields["tokenizer.ggml.tokens"].contents()
    ids = {kind: tokens.index(FIM_MARKERS[kind]) for kind in kinds}
    tmp = path.with_name(path.name + ".tmp")
    w = gguf.GGUFWriter(str(tmp), arch)
    copy_metadata(reader, w)
    for kind, token_id in ids.items():
        w.add_uint32(f"tokenizer.ggml.fim_{kind}_token_id", token_id)
    for t in reader.tensors:
        w.add_tensor_info(t.name, t.data.shape, t.data.dtype, t.data.nbytes, t.tensor_type)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    for t in reader.tensors:
        w.write_tensor_data(t.data)
    w.close()
    tmp.replace(path)
    return path


def build_audio_mmproj(path: Path, *, text_hidden: int, seed: int = 0) -> Path:
    """A `qwen2a` mmproj: 128 mel bins in (llama.cpp computes them, 16 kHz), `text_hidden`-wide
    embeddings out, four 10 ms frames each (two convolutions' stride, then the average pool)."""
    width, ff, mel, positions = 64, 128, 128, 1500  # 1500: Whisper's 30 s after the stride
    rng = np.random.default_rng(seed)
    w = gguf.GGUFWriter(str(path), "clip")
    w.add_type("mmproj")
    w.add_bool("clip.has_vision_encoder", False)
    w.add_bool("clip.has_audio_encoder", True)
    w.add_string("clip.projector_type", "qwen2a")
    w.add_uint32("clip.audio.num_mel_bins", mel)
    w.add_uint32("clip.audio.embedding_length", width)
    w.add_uint32("clip.audio.feed_forward_length", ff)
    w.add_uint32("clip.audio.block_count", 1)
    w.add_uint32("clip.audio.projection_dim", text_hidden)
    w.add_uint32("clip.audio.attention.head_count", 1)
    w.add_float32("clip.audio.attention.layer_norm_epsilon", 1e-5)

    def weight(name: str, *shape: int, scale: float | None = None, f16: bool = False) -> None:
        std = scale if scale is not None else 1 / np.sqrt(shape[-1])
        data = rng.standard_normal(shape) * std
        w.add_tensor(name, data.astype(np.float16 if f16 else np.float32))

    def norm(name: str) -> None:
        w.add_tensor(f"{name}.weight", np.ones(width, np.float32))
        w.add_tensor(f"{name}.bias", np.zeros(width, np.float32))

    weight("a.conv1d.1.weight", width, mel, 3, f16=True)  # ggml's conv kernels are F16
    weight("a.conv1d.1.bias", width, 1, scale=0.01)
    weight("a.conv1d.2.weight", width, width, 3, f16=True)
    weight("a.conv1d.2.bias", width, 1, scale=0.01)
    weight("a.position_embd.weight", positions, width, scale=0.02)
    for part in ("attn_q", "attn_k", "attn_v", "attn_out"):
        weight(f"a.blk.0.{part}.weight", width, width)
    for part in ("attn_q", "attn_v", "attn_out"):  # Whisper's keys have no bias
        weight(f"a.blk.0.{part}.bias", width, scale=0.01)
    norm("a.blk.0.ln1")
    norm("a.blk.0.ln2")
    weight("a.blk.0.ffn_up.weight", ff, width)
    weight("a.blk.0.ffn_up.bias", ff, scale=0.01)
    weight("a.blk.0.ffn_down.weight", width, ff)
    weight("a.blk.0.ffn_down.bias", width, scale=0.01)
    norm("a.post_ln")
    weight("mm.a.fc.weight", text_hidden, width)
    weight("mm.a.fc.bias", text_hidden, scale=0.01)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def build_moe_copy(source: Path, path: Path, *, n_expert: int = 4, n_used: int = 2) -> Path:
    """A Mixtral-style mixture of experts made from a dense `llama` GGUF (the synthetic
    `llama` chat example): each layer's feed-forward becomes `n_expert` perturbed copies of
    itself behind a random router (`ffn_gate_inp`), `n_used` experts a token. llama.cpp loads
    it as a MoE (`llama.expert_count`) and routes every token for real."""
    reader = gguf.GGUFReader(source)
    arch = str(reader.fields["general.architecture"].contents())
    rng = np.random.default_rng(5)
    tensors: list[tuple[str, np.ndarray, gguf.GGMLQuantizationType]] = []
    for t in reader.tensors:
        base, _, kind = t.name.rpartition(".ffn_")
        data = np.asarray(t.data)
        if kind in ("gate.weight", "up.weight", "down.weight"):
            experts = np.stack(
                [
                    (data.astype(np.float32) * rng.uniform(0.5, 1.5, data.shape)).astype(data.dtype)
                    for _ in range(n_expert)
                ]
            )
            tensors.append((f"{base}.ffn_{kind.split('.')[0]}_exps.weight", experts, t.tensor_type))
            if kind == "gate.weight":
                router = rng.normal(0, 0.5, (n_expert, data.shape[1])).astype(np.float32)
                tensors.append(
                    (f"{base}.ffn_gate_inp.weight", router, gguf.GGMLQuantizationType.F32)
                )
        else:
            tensors.append((t.name, data, t.tensor_type))
    tmp = path.with_name(path.name + ".tmp")
    w = gguf.GGUFWriter(str(tmp), arch)
    copy_metadata(reader, w)
    w.add_uint32(f"{arch}.expert_count", n_expert)
    w.add_uint32(f"{arch}.expert_used_count", n_used)
    for name, data, kind in tensors:
        w.add_tensor_info(name, data.shape, data.dtype, data.nbytes, kind)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    for _, data, _ in tensors:
        w.write_tensor_data(data)
    w.close()
    tmp.replace(path)
    return path
