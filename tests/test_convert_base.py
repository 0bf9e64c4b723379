"""The converters' shared base: reading checkpoints without torch, writing GGUF atomically,
type rules, calibration names, detection, and the errors for checkpoints that lie."""

from __future__ import annotations

import io
import json
import re
import shutil
from pathlib import Path

import gguf
import numpy as np
import pytest
from llamactl.converters import CheckpointError, ConvertError, OutType, convert, detect
from llamactl.converters.calibration import read_lev_temperatures, read_temperatures
from llamactl.converters.checkpoint import Checkpoint
from llamactl.converters.lazy import Lazy, concat
from llamactl.converters.plan import OutTensor, tensor_type
from llamactl.converters.safetensors_io import SafetensorsFile, f32_to_bf16, save_file
from llamactl.converters.torch_pickle import load as load_torch
from llamactl.converters.writer import temp_path
from rich.console import Console
from synthetic_checkpoints import (
    FAMILIES,
    build,
    cached,
    read_gguf,
    read_tensor,
    tokenizer_files,
    write_torch_file,
)

Q = gguf.GGMLQuantizationType


# --------------------------------------------------------------------- safetensors
def test_safetensors_round_trip_with_bf16(tmp_path):
    a = np.array([[1.0, -2.5, 3.14159], [1e-3, 65504.0, -0.0]], dtype=np.float32)
    save_file({"a": a, "b": a[0].astype(np.float16)}, tmp_path / "x.safetensors", bf16=True)
    st = SafetensorsFile(tmp_path / "x.safetensors")
    assert st.entries["a"].dtype == "BF16" and st.entries["b"].dtype == "F16"
    back = st.load("a")
    assert back.dtype == np.float32 and back.shape == (2, 3)
    np.testing.assert_allclose(back, a, rtol=2**-8)  # bf16 keeps 8 bits of mantissa
    np.testing.assert_array_equal(st.load("b"), a[0].astype(np.float16))


def test_bf16_rounds_to_nearest_even():
    # 1 + 2^-8 sits exactly between two bf16 values: ties go to the even mantissa (1.0)
    bits = f32_to_bf16(np.array([1 + 2**-8, 1 + 3 * 2**-8, np.nan], dtype=np.float32))
    assert bits[0] == 0x3F80 and bits[1] == 0x3F82 and (bits[2] & 0x7F80) == 0x7F80


def test_a_truncated_safetensors_file_names_the_tensor(tmp_path):
    path = tmp_path / "model.safetensors"
    save_file({"w": np.zeros((4, 4), np.float32)}, path)
    path.write_bytes(path.read_bytes()[:-8])
    with pytest.raises(CheckpointError, match=r"model.safetensors: w: byte range"):
        SafetensorsFile(path)


def test_sharded_index_is_checked_against_the_shards(tmp_path_factory, tmp_path):
    src = cached(tmp_path_factory, "openjev-qwen3", shards=2)
    ckpt = Checkpoint(src)
    assert len(ckpt.tensor_names()) == 24
    assert {e.file.name for e in ckpt.tensor_entries.values()} == {
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
    }
    broken = tmp_path / "broken"
    shutil.copytree(src, broken)
    (broken / "model-00002-of-00002.safetensors").unlink()
    with pytest.raises(CheckpointError, match="names the shard model-00002-of-00002"):
        Checkpoint(broken).tensor_names()
    index = json.loads((src / "model.safetensors.index.json").read_text())
    index["weight_map"]["model.extra.weight"] = "model-00001-of-00002.safetensors"
    shutil.copy(src / "model-00002-of-00002.safetensors", broken)
    (broken / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(CheckpointError, match=r"weight_map\['model.extra.weight'\]"):
        Checkpoint(broken).tensor_names()


def test_torch_files_load_without_torch(tmp_path):
    q = np.arange(6, dtype=np.float32).reshape(2, 3)
    write_torch_file(tmp_path / "h.pt", {"head": {"q.weight": q}, "head_dim": 2, "t": 0.5})
    saved = load_torch(tmp_path / "h.pt")
    np.testing.assert_array_equal(saved["head"]["q.weight"], q)
    assert saved["head_dim"] == 2 and saved["t"] == 0.5


def test_torch_files_cannot_run_code(tmp_path):
    import pickle
    import zipfile

    class Evil:
        def __reduce__(self):
            return (print, ("pwned",))

    with zipfile.ZipFile(tmp_path / "evil.pt", "w") as z:
        z.writestr("archive/data.pkl", pickle.dumps(Evil(), protocol=2))
    with pytest.raises(CheckpointError, match="refusing to load .*print: not a plain tensor"):
        load_torch(tmp_path / "evil.pt")


def _torch_zip(
    path,
    storage: bytes | int,
    shape,
    stride,
    offset: int = 0,
    numel: int | None = None,
    deflate: bool = False,
) -> Path:
    """A torch.save zip of {"w": one float32 tensor} whose view (offset, shape, stride) is
    written as given, whatever its storage holds: what a corrupt or hostile head.pt says.
    An int `storage` is that many zero bytes, written a MiB at a time."""
    import pickle
    import pickletools
    import zipfile

    def op(value) -> bytes:  # one value's pickle opcodes (protocol 2, no memo, no stop)
        return pickletools.optimize(pickle.dumps(value, protocol=2))[2:-1]

    def tup(values) -> bytes:
        return b"(" + b"".join(op(v) for v in values) + b"t"

    size = storage if isinstance(storage, int) else len(storage)
    pkl = (
        b"\x80\x02}(" + op("w") + b"ctorch._utils\n_rebuild_tensor_v2\n("
        + b"(" + op("storage") + b"ctorch\nFloatStorage\n" + op("0") + op("cpu")
        + op(size // 4 if numel is None else numel) + b"tQ"
        + op(offset) + tup(shape) + tup(stride) + b"\x89"
        + b"ccollections\nOrderedDict\n)R" + b"tRu."
    )  # fmt: skip
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED if deflate else zipfile.ZIP_STORED) as z:
        z.writestr("archive/data.pkl", pkl)
        if isinstance(storage, int):
            with z.open("archive/data/0", "w") as f:
                for _ in range(storage >> 20):
                    f.write(bytes(1 << 20))
        else:
            z.writestr("archive/data/0", storage)
        z.writestr("archive/version", "3\n")
    return path


def test_a_storage_larger_than_its_pickle_says_is_refused_before_decompressing(tmp_path):
    """A zip bomb: 1 GiB of zeros deflates to ~1 MB; the pickle says the storage holds 4
    floats. The zip's stated size is compared with the pickle's count before anything is
    read, so the gigabyte is never decompressed."""
    import resource

    from llamactl.converters.torch_pickle import load

    bomb = tmp_path / "bomb.pt"
    _torch_zip(bomb, 1 << 30, (4,), (1,), numel=4, deflate=True)
    assert bomb.stat().st_size < 2_000_000
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(CheckpointError, match="1073741824 bytes in the zip, but 4 elements"):
        load(bomb)
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 200_000  # KiB


def test_torch_views_inside_their_storage_load(tmp_path):
    data = np.arange(12, dtype="<f4")
    path = _torch_zip(tmp_path / "ok.pt", data.tobytes(), (3, 2), (1, 3), offset=2)
    np.testing.assert_array_equal(load_torch(path)["w"], data[2:8].reshape(2, 3).T)
    path = _torch_zip(tmp_path / "one.pt", data.tobytes(), (1, 12), (2**40, 1))
    np.testing.assert_array_equal(load_torch(path)["w"], data[None])
    path = _torch_zip(tmp_path / "empty.pt", b"", (0, 5), (5, 1))
    assert load_torch(path)["w"].shape == (0, 5)


@pytest.mark.parametrize(
    ("shape", "stride", "offset", "problem"),
    [
        ((64, 64), (64, 1), 0, "reaches element 4095 of a storage of 4 elements"),
        ((4,), (1,), 1, "reaches element 4 of a storage of 4"),
        ((2, 2), (2**40, 1), 0, "reaches element 1099511627777"),
        ((-4,), (1,), 0, "shape"),
        ((2,), (-1,), 1, "strides"),
        ((2,), (1,), -1, "offset"),
        ((2, 2), (1,), 0, "with the strides"),
        ((8,), (0,), 0, "more than its storage's 4"),
    ],
)
def test_torch_views_outside_their_storage_are_refused(tmp_path, shape, stride, offset, problem):
    """Issue #31 row 16: the old reader let numpy stride past the storage (heap bytes copied
    into the GGUF, or a crash)."""
    path = _torch_zip(tmp_path / "bad.pt", np.ones(4, "<f4").tobytes(), shape, stride, offset)
    with pytest.raises(CheckpointError, match=rf"bad.pt: a tensor .*{re.escape(problem)}"):
        load_torch(path)


def test_a_huge_torch_shape_is_an_error_not_a_crash(tmp_path):
    """Shape 10^8 over 16 bytes: the old reader crashed the process (SIGSEGV); now exit 1."""
    import subprocess
    import sys

    path = _torch_zip(tmp_path / "huge.pt", np.ones(4, "<f4").tobytes(), (10**8,), (1,))
    code = (
        "import sys\n"
        "from llamactl.converters.torch_pickle import load\n"
        "from llamactl.core.errors import CheckpointError\n"
        "try:\n    load(sys.argv[1])\n"
        "except CheckpointError as exc:\n    print(exc); sys.exit(3)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 3, (done.returncode, done.stderr[-2000:])
    assert "reaches element 99999999 of a storage of 4 elements" in done.stdout


def test_a_kev_head_that_lies_about_its_shape_fails_the_conversion(tmp_path_factory, tmp_path):
    """Through `llamactl convert`: a clear error naming head.pt, exit 1, nothing written."""
    from typer.testing import CliRunner

    from llamactl.cli.main import app

    src = tmp_path / "kev"
    shutil.copytree(cached(tmp_path_factory, "kev"), src)
    _torch_zip(src / "head.pt", np.ones(4, "<f4").tobytes(), (8, 64), (64, 1))
    out = tmp_path / "out" / "kev.gguf"
    out.parent.mkdir()
    base = cached(tmp_path_factory, "qwen35-base")
    result = CliRunner().invoke(app, ["convert", str(src), "-o", str(out), "--base", str(base)])
    assert result.exit_code == 1, result.output
    assert "head.pt: a tensor of shape (8, 64)" in result.output
    assert "corrupt or hostile" in result.output
    assert list(out.parent.iterdir()) == []


# --------------------------------------------------------------------- planning
def test_lazy_shapes_are_known_before_computing():
    calls = []

    def compute():
        calls.append(1)
        return np.arange(24, dtype=np.float32).reshape(2, 3, 4)

    t = Lazy((2, 3, 4), compute, "t")
    parts = concat([t.rows(0, 1).reshape(3, 4), t.take(0, 1)], axis=0)
    moved = t.transpose(2, 0, 1).squeeze()
    assert parts.shape == (6, 4) and moved.shape == (4, 2, 3) and not calls
    np.testing.assert_array_equal(parts()[3:], compute()[1])


@pytest.mark.parametrize(
    ("name", "shape", "out", "expected"),
    [
        ("blk.0.attn_q.weight", (64, 64), OutType.Q8_0, Q.Q8_0),
        ("blk.0.attn_q.weight", (64, 48), OutType.Q8_0, Q.F16),  # rows not a multiple of 32
        ("blk.0.attn_norm.weight", (64,), OutType.BF16, Q.F32),
        ("blk.0.attn_q_norm.weight", (8, 8), OutType.F16, Q.F32),
        ("blk.0.ssm_conv1d.weight", (8, 4), OutType.F16, Q.F32),
        ("blk.0.shortconv.conv.weight", (8, 3), OutType.BF16, Q.F32),
        ("blk.0.ssm_a", (4, 4), OutType.F16, Q.F32),  # no .weight suffix
        ("cls.output.weight", (16, 64), OutType.BF16, Q.BF16),
        ("token_embd.weight", (400, 64), OutType.F32, Q.F32),
    ],
)
def test_tensor_types_follow_llama_cpp(name, shape, out, expected):
    t = OutTensor(name, Lazy(shape, lambda: np.zeros(shape), name))
    assert tensor_type(t, out) == expected


def test_temperature_names_are_normalized(tmp_path):
    f = tmp_path / "calibration.json"
    temps = read_temperatures({"choice:3-5": 1.4, "choice:11+": 1.3, "noul": 2, "score:6-10": 1}, f)
    assert temps == {"choice.3_5": 1.4, "choice.11": 1.3, "noul": 2.0, "score.6_10": 1.0}
    lev = read_lev_temperatures({"choice:A:small": 1.1, "choice:B:large": 9.0, "noul:A": 1.0}, f)
    assert lev == {"choice.small": 1.1, "noul": 1.0}
    with pytest.raises(CheckpointError, match=r"temperatures\['choice'\]: a temperature must be"):
        read_temperatures({"choice": 0}, f)
    with pytest.raises(CheckpointError, match=r"temperatures\['pick'\]"):
        read_temperatures({"pick": 1.0}, f)


# ------------------------------------------------------------------ atomic write
def test_an_interrupted_conversion_leaves_nothing(tmp_path_factory, tmp_path, monkeypatch):
    src = cached(tmp_path_factory, "openjev-qwen3")
    target = tmp_path / "out.gguf"
    written = []
    real = gguf.GGUFWriter.write_tensor_data

    def interrupt(self, tensor, *args, **kwargs):
        written.append(1)
        if len(written) == 5:
            raise KeyboardInterrupt  # Ctrl-C in the middle of the tensor data
        return real(self, tensor, *args, **kwargs)

    monkeypatch.setattr(gguf.GGUFWriter, "write_tensor_data", interrupt)
    with pytest.raises(KeyboardInterrupt):
        convert(src, target)
    assert len(written) == 5
    assert not target.exists() and not temp_path(target).exists()
    assert list(tmp_path.iterdir()) == []

    target.write_bytes(b"previous model")  # a failed run never touches an existing file
    written.clear()
    with pytest.raises(KeyboardInterrupt):
        convert(src, target)
    assert target.read_bytes() == b"previous model" and list(tmp_path.iterdir()) == [target]


def test_bf16_sharded_input_converts_to_the_same_values(tmp_path_factory, tmp_path):
    plain = cached(tmp_path_factory, "openjev-qwen3")
    bf16 = cached(tmp_path_factory, "openjev-qwen3", bf16=True, shards=2)
    convert(plain, tmp_path / "a.gguf", outtype="f32")
    convert(bf16, tmp_path / "b.gguf", outtype="f32")
    meta_a, tensors_a = read_gguf(tmp_path / "a.gguf")
    meta_b, tensors_b = read_gguf(tmp_path / "b.gguf")
    assert tensors_a == tensors_b
    a = read_tensor(tmp_path / "a.gguf", "blk.1.ffn_up.weight")
    b = read_tensor(tmp_path / "b.gguf", "blk.1.ffn_up.weight")
    np.testing.assert_allclose(a, b, rtol=2**-8, atol=1e-6)
    assert not np.array_equal(a, b)  # really went through bf16


# ----------------------------------------------------------- detection and lies
@pytest.mark.parametrize("family", FAMILIES)
def test_every_family_is_detected(family, tmp_path_factory):
    expected = "openjev" if family == "openjev-qwen3" else family
    assert detect(Checkpoint(cached(tmp_path_factory, family))).decision_type == expected


def test_a_plain_model_converts_as_a_chat_model(tmp_path_factory, tmp_path):
    src = tmp_path / "qwen3"
    shutil.copytree(cached(tmp_path_factory, "openjev-qwen3"), src)
    config = json.loads((src / "config.json").read_text())
    del config["decision_type"]
    (src / "config.json").write_text(json.dumps(config))
    result = convert(src, tmp_path / "x.gguf", dry_run=True)
    assert result.decision_type is None and result.family == "qwen3"
    config["architectures"] = ["MambaForCausalLM"]
    (src / "config.json").write_text(json.dumps(config))
    with pytest.raises(ConvertError, match=r"not a checkpoint .*MambaForCausalLM.*supported chat"):
        convert(src, tmp_path / "x.gguf")
    (tmp_path / "empty").mkdir()
    with pytest.raises(CheckpointError, match=r"empty/config.json: file not found"):
        convert(tmp_path / "empty", tmp_path / "x.gguf")
    with pytest.raises(CheckpointError, match="not a directory"):
        convert(tmp_path / "missing", tmp_path / "x.gguf")


def _copy_with_config(tmp_path: Path, src: Path, edit) -> Path:
    dst = tmp_path / src.name
    shutil.copytree(src, dst)
    config = json.loads((dst / "config.json").read_text())
    edit(config)
    (dst / "config.json").write_text(json.dumps(config))
    return dst


def test_a_d1_that_is_not_lfm2_names_the_field(tmp_path_factory, tmp_path):
    def claim_qwen(config):
        config["text_config"]["model_type"] = "qwen3"

    src = _copy_with_config(tmp_path, cached(tmp_path_factory, "lfm2-d1"), claim_qwen)
    with pytest.raises(CheckpointError) as err:
        convert(src, tmp_path / "x.gguf")
    assert str(err.value).startswith(f"{src / 'config.json'}: text_config.model_type: ")
    assert "built on LFM2" in str(err.value)


def test_a_missing_or_mistyped_hyperparameter_names_the_field(tmp_path_factory, tmp_path):
    def drop_layers(config):
        config["text_config"]["num_hidden_layers"] = "two"

    src = _copy_with_config(tmp_path, cached(tmp_path_factory, "lfm2-d1"), drop_layers)
    with pytest.raises(
        CheckpointError, match=r"config.json: text_config.num_hidden_layers: expected"
    ):
        convert(src, tmp_path / "x.gguf")


def test_a_classifier_without_its_head_is_refused(tmp_path_factory, tmp_path):
    src = cached(tmp_path_factory, "openbmb-minicpm-ocr-jev")
    dst = tmp_path / "minicpm"
    shutil.copytree(src, dst)
    st = SafetensorsFile(dst / "model.safetensors")
    tensors = {n: st.load(n) for n in st.entries if n != "score.weight"}
    st.close()
    save_file(tensors, dst / "model.safetensors")
    with pytest.raises(
        CheckpointError, match=r"architectures: claims MiniCPMOCR.* no score.weight"
    ):
        convert(dst, tmp_path / "x.gguf")


def test_an_unexpected_tensor_names_the_file_and_tensor(tmp_path_factory, tmp_path):
    dst = tmp_path / "d1"
    shutil.copytree(cached(tmp_path_factory, "lfm2-d1"), dst)
    st = SafetensorsFile(dst / "model.safetensors")
    tensors = {n: st.load(n) for n in st.entries}
    st.close()
    tensors["model.language_model.layers.0.mystery.weight"] = np.zeros((4, 4), np.float32)
    save_file(tensors, dst / "model.safetensors")
    with pytest.raises(CheckpointError) as err:
        convert(dst, tmp_path / "x.gguf")
    assert "model.safetensors: model.language_model.layers.0.mystery.weight: unexpected" in str(
        err.value
    )


def test_a_tokenizer_that_is_not_bpe_is_refused(tmp_path_factory, tmp_path):
    dst = tmp_path / "d1"
    shutil.copytree(cached(tmp_path_factory, "lfm2-d1"), dst)
    tok = json.loads((dst / "tokenizer.json").read_text())
    tok["model"]["type"] = "Unigram"
    (dst / "tokenizer.json").write_text(json.dumps(tok))
    with pytest.raises(CheckpointError, match=r"tokenizer.json: model.type: expected a BPE"):
        convert(dst, tmp_path / "x.gguf")


def test_the_synthetic_tokenizer_has_every_label_as_one_token():
    tok, _, _ = tokenizer_files("qwen")
    vocab = tok["model"]["vocab"]
    for text in ("ĠA", "Ġz", "00", "99", "yes", "ĠYes", "YES", "Ġno", "NO"):
        assert text in vocab
    assert len(vocab) < 500


def test_the_build_helper_writes_a_real_checkpoint(tmp_path):
    path = build("openjev-qwen3", tmp_path / "q3", bf16=True)
    assert {p.name for p in path.iterdir()} == {
        "config.json",
        "tokenizer.json",
        "tokenizer_config.json",
        "model.safetensors",
    }
    assert SafetensorsFile(path / "model.safetensors").entries["model.norm.weight"].dtype == "BF16"


def test_the_progress_bar_shows_only_on_a_terminal(tmp_path_factory, tmp_path):
    src = cached(tmp_path_factory, "openjev-qwen3")
    tty = Console(file=io.StringIO(), force_terminal=True, width=120)
    convert(src, tmp_path / "a.gguf", progress=True, console=tty)
    assert "[24/24] output_norm.weight" in tty.file.getvalue()
    pipe = Console(file=io.StringIO(), width=120)
    convert(src, tmp_path / "a.gguf", progress=True, console=pipe)
    quiet = Console(file=io.StringIO(), force_terminal=True, width=120)
    convert(src, tmp_path / "a.gguf", progress=False, console=quiet)
    assert pipe.file.getvalue() == "" and quiet.file.getvalue() == ""
