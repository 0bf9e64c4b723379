"""The state-file format (slot files and the persistent prompt cache) and the slot-file name
rules, without a model: round trips, refusals of foreign, truncated and altered files, atomic
writes, the persister's bounds and what it leaves alone."""

from __future__ import annotations

import ctypes
import dataclasses
import logging
from pathlib import Path

import pytest
from llamactl.server.llamacpp.slots.serving import valid_filename

from llamactl.engine import state_file
from llamactl.engine.cache_persist import CachePersister, PersistItem
from llamactl.engine.prompt_cache import Checkpoint
from llamactl.engine.state_file import (
    SeqSnapshot,
    StateFileCorrupt,
    StateFileMismatch,
    StateIdentity,
    read_state_file,
    write_state_file,
)

IDENTITY = StateIdentity("/models/a.gguf", 1234, 5678, 1024, "f16", False, True)


def snap(tokens: list[int], fill: int = 7, size: int = 64) -> SeqSnapshot:
    state = (ctypes.c_uint8 * size)(*([fill] * size))
    cp = Checkpoint(len(tokens) // 2, (ctypes.c_uint8 * 5)(1, 2, 3, 4, 5))
    return SeqSnapshot(tokens, state, [cp])


def test_a_snapshot_reads_back_as_written(tmp_path: Path) -> None:
    path = tmp_path / "s.bin"
    size = write_state_file(path, IDENTITY, snap([1, 2, 3, 50000]), kind="slot")
    got, n_read = read_state_file(path, IDENTITY)
    assert n_read == size == path.stat().st_size
    assert got.tokens == [1, 2, 3, 50000]
    assert bytes(got.state) == bytes([7] * 64)
    assert [(c.n_tokens, bytes(c.data)) for c in got.checkpoints] == [(2, b"\1\2\3\4\5")]
    assert [p.name for p in tmp_path.iterdir()] == ["s.bin"]  # no temporary file left


@pytest.mark.parametrize(
    "change", [{"model_mtime_ns": 1}, {"n_ctx_seq": 2048}, {"kv_type": "q8_0"}, {"model_size": 9}]
)
def test_another_model_or_layout_is_refused_by_name(tmp_path: Path, change: dict) -> None:
    path = tmp_path / "s.bin"
    write_state_file(path, IDENTITY, snap([1, 2]), kind="slot")
    with pytest.raises(StateFileMismatch, match=next(iter(change))):
        read_state_file(path, dataclasses.replace(IDENTITY, **change))


def test_truncated_altered_and_foreign_files_are_corrupt(tmp_path: Path) -> None:
    path = tmp_path / "s.bin"
    write_state_file(path, IDENTITY, snap([1, 2, 3]), kind="slot")
    data = path.read_bytes()
    for bad, why in (
        (data[:-1], "truncated"),
        (data[:20], "truncated"),
        (data + b"x", "trailing"),
        (data[:-3] + bytes([data[-3] ^ 1]) + data[-2:], "checksum"),
        (b"GGUF" + data[4:], "not a llamactl state file"),
        (b"", "not a llamactl state file"),
    ):
        path.write_bytes(bad)
        with pytest.raises(StateFileCorrupt, match=why):
            read_state_file(path, IDENTITY)


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "s.bin"
    write_state_file(path, IDENTITY, snap([1, 2, 3]), kind="slot")
    before = path.read_bytes()

    def disk_full(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(state_file.os, "fsync", disk_full)
    with pytest.raises(OSError, match="No space"):
        write_state_file(path, IDENTITY, snap([4, 5, 6]), kind="slot")
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["s.bin"]


@pytest.mark.parametrize(
    "name",
    [
        "",
        ".",
        "..",
        "../x",
        "a/b",
        "a\\b",
        "/etc/passwd",
        "x..y",
        " a",
        "a ",
        "a.",
        "a:b",
        "a*b",
        "a?b",
        'a"b',
        "a<b",
        "a>b",
        "a|b",
        "a\nb",
        "a\x7fb",
        "a\u2215b",
        "a\uff0eb",
        "x" * 256,
    ],
)
def test_slot_file_names_refused(name: str) -> None:
    assert not valid_filename(name)


@pytest.mark.parametrize("name", ["slot1.bin", "a.b.c", "état", "x" * 255, "with space.bin"])
def test_slot_file_names_accepted(name: str) -> None:
    assert valid_filename(name)


def test_the_persister_keeps_what_fits_newest_first_and_removes_only_its_own(
    tmp_path: Path,
) -> None:
    other = dataclasses.replace(IDENTITY, n_ctx_seq=2048)
    foreign = CachePersister(tmp_path, other, None)
    foreign.write([PersistItem(foreign.name_for([9]), 69, snap([9]))])
    (tmp_path / "notes.txt").write_text("mine")
    p = CachePersister(tmp_path, IDENTITY, limit=150)  # two 69-byte snapshots fit
    items = [PersistItem(p.name_for([t]), 69, snap([t])) for t in (1, 2, 3)]
    assert p.write(items) == 2
    assert {s.tokens[0] for s in CachePersister(tmp_path, IDENTITY, None).load()} == {1, 2}
    assert p.write(items[1:]) == 1  # 1 left the cache: its file goes, 3 now fits
    again = CachePersister(tmp_path, IDENTITY, None)
    assert sorted(s.tokens[0] for s in again.load()) == [2, 3]
    assert [s.tokens for s in CachePersister(tmp_path, other, None).load()] == [[9]]
    assert (tmp_path / "notes.txt").read_text() == "mine"


def test_corrupt_cache_files_are_skipped_with_a_warning(tmp_path: Path, caplog) -> None:
    p = CachePersister(tmp_path, IDENTITY, None)
    good, bad = p.name_for([1]), p.name_for([2])
    p.write([PersistItem(good, 69, snap([1])), PersistItem(bad, 69, snap([2]))])
    data = (tmp_path / bad).read_bytes()
    (tmp_path / bad).write_bytes(data[: len(data) // 2])
    (tmp_path / "junk.llkv").write_bytes(b"\0" * 10)
    with caplog.at_level(logging.WARNING, logger="llamactl.engine"):
        loaded = CachePersister(tmp_path, IDENTITY, None).load()
    assert [s.tokens for s in loaded] == [[1]]
    warned = " ".join(r.getMessage() for r in caplog.records)
    assert bad in warned and "truncated" in warned and "junk.llkv" in warned
