"""A sentencepiece `tokenizer.model` read without the sentencepiece package.

The file is one protobuf `ModelProto`. A converter needs only a few of its fields (the pieces
with their scores and types, the model type, the normalizer's switches and its precompiled
character map), and protobuf's wire format is simple enough to walk for them, so llamactl
does not pull in sentencepiece (or protobuf) for one file read at conversion time.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

from llamactl.core.errors import CheckpointError

__all__ = ["Piece", "SentencePieceModel", "read_sentencepiece", "write_sentencepiece"]

UNIGRAM = 1  # TrainerSpec.model_type
# SentencePiece.type, the numbering GGUF's token types share
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6


@dataclass(frozen=True)
class Piece:
    text: str
    score: float
    kind: int = NORMAL


@dataclass
class SentencePieceModel:
    pieces: list[Piece]
    model_type: int = UNIGRAM
    add_dummy_prefix: bool = True
    remove_extra_whitespaces: bool = True
    precompiled_charsmap: bytes = b""
    normalizer: str = ""


def _varint(buf: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if at >= len(buf):
            raise ValueError("truncated varint")
        byte = buf[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, at
        shift += 7
        if shift > 63:
            raise ValueError("varint too long")


def _fields(buf: bytes) -> list[tuple[int, int | bytes]]:
    """(field number, value) pairs of one message: ints for varints and fixed widths, bytes
    for length-delimited fields."""
    out: list[tuple[int, int | bytes]] = []
    at = 0
    while at < len(buf):
        key, at = _varint(buf, at)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, at = _varint(buf, at)
            out.append((number, value))
        elif wire == 1:
            out.append((number, int.from_bytes(buf[at : at + 8], "little")))
            at += 8
        elif wire == 2:
            size, at = _varint(buf, at)
            if at + size > len(buf):
                raise ValueError("truncated field")
            out.append((number, buf[at : at + size]))
            at += size
        elif wire == 5:
            out.append((number, int.from_bytes(buf[at : at + 4], "little")))
            at += 4
        else:
            raise ValueError(f"unsupported wire type {wire}")
    return out


def _piece(buf: bytes) -> Piece:
    text, score, kind = "", 0.0, NORMAL
    for number, value in _fields(buf):
        if number == 1 and isinstance(value, bytes):
            text = value.decode("utf-8")
        elif number == 2 and isinstance(value, int):
            score = struct.unpack("<f", value.to_bytes(4, "little"))[0]
        elif number == 3 and isinstance(value, int):
            kind = value
    return Piece(text, score, kind)


def read_sentencepiece(path: Path) -> SentencePieceModel:
    """The pieces and normalizer settings of `path`; a malformed file is a CheckpointError."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise CheckpointError(path, None, f"cannot be read ({exc.strerror})") from None
    try:
        model = SentencePieceModel(pieces=[])
        for number, value in _fields(data):
            if number == 1 and isinstance(value, bytes):
                model.pieces.append(_piece(value))
            elif number == 2 and isinstance(value, bytes):
                for sub, sub_value in _fields(value):
                    if sub == 3 and isinstance(sub_value, int):
                        model.model_type = sub_value
            elif number == 3 and isinstance(value, bytes):
                for sub, sub_value in _fields(value):
                    if sub == 1 and isinstance(sub_value, bytes):
                        model.normalizer = sub_value.decode("utf-8", "replace")
                    elif sub == 2 and isinstance(sub_value, bytes):
                        model.precompiled_charsmap = sub_value
                    elif sub == 3 and isinstance(sub_value, int):
                        model.add_dummy_prefix = bool(sub_value)
                    elif sub == 4 and isinstance(sub_value, int):
                        model.remove_extra_whitespaces = bool(sub_value)
    except (ValueError, UnicodeDecodeError) as exc:
        raise CheckpointError(path, None, f"not a sentencepiece model ({exc})") from None
    if not model.pieces:
        raise CheckpointError(path, None, "not a sentencepiece model (no pieces)")
    return model


def _key(number: int, wire: int) -> bytes:
    return _encode_varint(number << 3 | wire)


def _encode_varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _bytes_field(number: int, data: bytes) -> bytes:
    return _key(number, 2) + _encode_varint(len(data)) + data


def write_sentencepiece(model: SentencePieceModel, path: Path) -> None:
    """`model` as a `tokenizer.model` file (what the example checkpoints ship)."""
    out = bytearray()
    for p in model.pieces:
        piece = _bytes_field(1, p.text.encode("utf-8"))
        piece += _key(2, 5) + struct.pack("<f", p.score)
        piece += _key(3, 0) + _encode_varint(p.kind)
        out += _bytes_field(1, piece)
    out += _bytes_field(2, _key(3, 0) + _encode_varint(model.model_type))
    normalizer = _bytes_field(1, model.normalizer.encode())
    if model.precompiled_charsmap:
        normalizer += _bytes_field(2, model.precompiled_charsmap)
    normalizer += _key(3, 0) + _encode_varint(int(model.add_dummy_prefix))
    normalizer += _key(4, 0) + _encode_varint(int(model.remove_extra_whitespaces))
    out += _bytes_field(3, normalizer)
    path.write_bytes(bytes(out))
