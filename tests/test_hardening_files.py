"""Files a request or a start reads, and what `/slots` shows, through the real server (issue
#31 rows 6-9, 12, 13): state files with positions out of range are refused and nothing wedges;
a FIFO or an oversized header in `--cache-persist` is skipped with a warning and the server
starts; a FIFO in the slot folder or the media folder is refused at once while other JSON
routes answer; a huge media file is refused from its size before a byte is read; `GET /slots`
shows no one's prompt or answer unless `--slots-content`; slot saves stay within a quota and
long names are a 400 or a save, never a 500 naming the server's folders."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import resource
import shutil
import struct
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from llamactl.server.app import create_app
from serverkit import LiveServer, hermetic_settings, run_server, serve_app

from llamactl.engine.prompt_cache import load_seq
from llamactl.engine.state_file import MAGIC

pytestmark = pytest.mark.slow  # every test here loads a model

MODEL_FIXTURES = {"saving", "hearing"}

USER = "Name three rivers of Europe."
OTHER = "Write a haiku about snow."
INT32_MAX = 2**31 - 1


# ---------------------------------------------------------------------------------- helpers
@pytest.fixture(scope="module")
def saving(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """Two slots, a slot folder with a 1 MiB / 3 file quota (a saved 30-token chat is ~0.8 MB)."""
    folder = tmp_path_factory.mktemp("slots")
    with run_server(
        parallel=2,
        n_ctx=1024,
        slot_save_path=folder,
        slot_save_quota_mib=1,
        slot_save_max_files=3,
        cache_ram=0,
    ) as live:
        yield live


def folder_of(live: LiveServer) -> Path:
    return live.state.settings.slot_save_path


def empty_folder(live: LiveServer) -> Path:
    folder = folder_of(live)
    for entry in folder.iterdir():
        entry.unlink()
    return folder


def action(live: LiveServer, slot: int, act: str, filename: str | None = None) -> httpx.Response:
    body = {"filename": filename} if filename is not None else None
    return httpx.post(f"{live.url}/slots/{slot}", params={"action": act}, json=body, timeout=60)


def chat(live: LiveServer, content: str | list[dict[str, Any]], **extra: Any) -> httpx.Response:
    messages = content if isinstance(content, list) else [{"role": "user", "content": content}]
    body = {"messages": messages, "temperature": 0, "max_tokens": 8, **extra}
    return httpx.post(live.url + "/v1/chat/completions", json=body, timeout=120)


def ok_chat(live: LiveServer, content: str | list[dict[str, Any]]) -> dict[str, Any]:
    r = chat(live, content)
    assert r.status_code == 200, r.text
    return r.json()


def error_of(r: httpx.Response, status: int = 400) -> str:
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert err["code"] == status and err["type"] == "invalid_request_error"
    return err["message"]


def held_slots(live: LiveServer) -> list[int]:
    return [s.seq_id for s in live.state.engine._slots if s.kv_tokens]


def erase_all(live: LiveServer) -> None:
    for s in (0, 1):
        assert action(live, s, "erase").status_code == 200


def set_positions(path: Path, positions: dict[int, int], out: Path | None = None) -> None:
    """Rewrite KV cell positions of the state in the file at `path` (cell index -> position;
    negative indexes count from the end), with the checksum recomputed so the file is sound.

    The state is llama.cpp's for one sequence of a plain attention model: a tag, the sequence
    and the number of KV streams (u32 each), then per stream its cell count and cells, each
    (pos i32, n_seq u32, seq i32), then its layers' data; the streams before the sequence's
    own hold no cells (and no data)."""
    data = bytearray(path.read_bytes())
    assert data[:8] == MAGIC
    (n,) = struct.unpack_from("<I", data, 8)
    header = json.loads(data[12 : 12 + n])
    body = 12 + n
    state = body + 4 * header["n_tokens"]
    at = state + 12
    while (n_cells := struct.unpack_from("<I", data, at)[0]) == 0:
        at += 4
    assert n_cells == header["n_tokens"]
    cells = at + 4
    for cell, pos in positions.items():
        at = cells + 12 * (cell % n_cells)
        assert struct.unpack_from("<iIi", data, at)[1] == 1
        struct.pack_into("<i", data, at, pos)
    header["crc32"] = zlib.crc32(bytes(data[body:]))
    blob = json.dumps(header).encode()
    (out or path).write_bytes(MAGIC + struct.pack("<I", len(blob)) + blob + bytes(data[body:]))


def set_header(path: Path, out: Path, **fields: Any) -> None:
    data = path.read_bytes()
    (n,) = struct.unpack_from("<I", data, 8)
    header = json.loads(data[12 : 12 + n]) | fields
    blob = json.dumps(header).encode()
    out.write_bytes(MAGIC + struct.pack("<I", len(blob)) + blob + data[12 + n :])


@contextlib.contextmanager
def fifo(path: Path) -> Iterator[Path]:
    """A FIFO at `path`; on the way out any reader still blocked opening it is let go (a
    writer opens and closes it), so a test of old code cannot leave threads hung forever."""
    os.mkfifo(path)
    try:
        yield path
    finally:
        for _ in range(50):
            try:
                fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
            except OSError:  # no reader waiting (ENXIO): nothing to let go
                break
            os.close(fd)
            time.sleep(0.02)
        path.unlink()


def at_once(calls: list[Callable[[], Any]], timeout: float) -> list[Any]:
    """Run `calls` in threads together; each result, or the exception it raised."""
    results: list[Any] = [None] * len(calls)

    def run(i: int) -> None:
        try:
            results[i] = calls[i]()
        except Exception as exc:
            results[i] = exc

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(len(calls))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
    return results


def health(live: LiveServer, timeout: float = 10) -> Callable[[], httpx.Response]:
    return lambda: httpx.get(live.url + "/health", timeout=timeout)


# ------------------------------------------------ row 6: positions out of range in a state file
@pytest.mark.parametrize("pos", [INT32_MAX, -7, 100_000], ids=["int32-max", "negative", "far"])
def test_a_restored_state_with_a_position_out_of_range_is_refused_and_nothing_wedges(
    saving: LiveServer, pos: int
) -> None:
    folder = empty_folder(saving)
    erase_all(saving)
    ok_chat(saving, USER)
    (mine,) = held_slots(saving)
    assert action(saving, mine, "save", "a.bin").status_code == 200
    set_positions(folder / "a.bin", {-1: pos}, out=folder / "bad.bin")
    other_first = ok_chat(saving, OTHER)  # the other slot: its KV must survive the refusal
    (other,) = [s for s in held_slots(saving) if s != mine]

    message = error_of(action(saving, mine, "restore", "bad.bin"))
    assert "positions" in message and "slot was erased" in message
    assert mine not in held_slots(saving)
    for _ in range(2):  # every later request is served (was: 500 llama_decode failed, forever)
        ok_chat(saving, USER)
    follow = [
        {"role": "user", "content": OTHER},
        {"role": "assistant", "content": other_first["choices"][0]["message"]["content"]},
        {"role": "user", "content": "Another?"},
    ]
    again = ok_chat(saving, follow)
    assert again["usage"]["prompt_tokens_details"]["cached_tokens"] > 0  # slot `other` kept
    assert other in held_slots(saving)
    assert action(saving, mine, "restore", "a.bin").status_code == 200  # the sound file still


def test_a_failed_decode_clears_even_cells_llama_cpp_cannot_remove(saving: LiveServer) -> None:
    """A state that got past the checks (here put in behind their back): the decode that
    fails on it ends that request, and clears the slot so the next request is served."""
    folder = empty_folder(saving)
    erase_all(saving)
    ok_chat(saving, USER)
    (mine,) = held_slots(saving)
    assert action(saving, mine, "save", "a.bin").status_code == 200
    set_positions(folder / "a.bin", {-1: INT32_MAX})
    engine = saving.state.engine
    snap, _ = engine.slot_files.read(folder / "a.bin")

    def smuggle(slot: Any) -> None:
        assert load_seq(engine._ctx, slot.seq_id, snap.state)
        slot.kv_tokens = list(snap.tokens)

    engine._on_decode_thread(mine, smuggle).result(timeout=30)
    statuses = []
    for _ in range(3):
        statuses.append(chat(saving, USER).status_code)
    assert statuses[-2:] == [200, 200], statuses


# ------------------------------------------ rows 6 and 7: what --cache-persist reads at start
def test_cache_persist_skips_bad_files_with_a_warning_and_starts(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    folder = tmp_path / "cache"
    with run_server(parallel=1, n_ctx=1024, cache_persist=folder) as live:
        ok_chat(live, USER)
    (saved,) = folder.glob("*.llkv")  # the idle slot's prompt, written on close
    shutil.copy(saved, tmp_path / "sound.llkv")
    set_header(saved, folder / "huge.llkv", state_bytes=2**40)  # the header claims 1 TiB
    set_positions(saved, {-1: INT32_MAX})  # same name: a request will restore it
    caplog.set_level(logging.WARNING, logger="llamactl.engine")
    with fifo(folder / "x.llkv"):
        results = at_once([lambda: _start_and_chat(folder)], timeout=150)
    (outcome,) = results
    assert isinstance(outcome, list), outcome  # started, and served (was: never started)
    assert all(status == 200 for status in outcome), outcome
    warned = " ".join(r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING)
    assert "x.llkv" in warned and "not a regular file" in warned
    assert "huge.llkv" in warned and "truncated" in warned


def _start_and_chat(folder: Path) -> list[int]:
    with run_server(parallel=1, n_ctx=1024, cache_persist=folder) as live:
        return [chat(live, USER).status_code for _ in range(2)]


# ----------------------------------------------------------- row 8: a FIFO in the slot folder
def test_restores_naming_a_fifo_are_refused_at_once_and_others_are_served(
    saving: LiveServer,
) -> None:
    folder = empty_folder(saving)
    with fifo(folder / "pipe.bin"):
        restores = [lambda i=i: action(saving, i % 2, "restore", "pipe.bin") for i in range(3)]
        others = [health(saving), lambda: chat(saving, "Hi")]
        t0 = time.monotonic()
        results = at_once(restores + others, timeout=30)
        elapsed = time.monotonic() - t0
    assert all(isinstance(r, httpx.Response) for r in results), results
    for r in results[:3]:
        message = error_of(r)
        assert "not a regular file" in message and str(folder) not in message
    assert [r.status_code for r in results[3:]] == [200, 200]
    assert elapsed < 20


# -------------------------------------------------------------------------- row 12: GET /slots
def test_slots_show_no_prompt_or_answer_by_default(saving: LiveServer) -> None:
    erase_all(saving)
    secret = "My locker code is 48213."
    answer = ok_chat(saving, secret)
    body = httpx.get(saving.url + "/slots", timeout=30)  # client B, no key needed
    assert body.status_code == 200
    assert "48213" not in body.text and "locker" not in body.text
    used = [s for s in body.json() if "params" in s]
    for slot in used:
        assert "prompt" not in slot and "generated" not in slot
        assert "grammar" not in slot["params"]
    counts = {(s["n_prompt_tokens"], s["next_token"][0]["n_decoded"]) for s in used}
    usage = answer["usage"]
    assert (usage["prompt_tokens"], usage["completion_tokens"]) in counts  # the counts stay


# ----------------------------------------------------------------- row 13: slot-save quota
def test_slot_saves_stay_within_the_byte_quota(saving: LiveServer) -> None:
    folder = empty_folder(saving)
    erase_all(saving)
    ok_chat(saving, USER)
    (mine,) = held_slots(saving)
    first = action(saving, mine, "save", "q1.bin")
    assert first.status_code == 200, first.text
    assert first.json()["n_written"] > 512 * 1024  # half the 1 MiB quota: a second cannot fit
    message = error_of(action(saving, mine, "save", "q2.bin"))
    assert "--slot-save-quota-mib" in message and "1 MiB" in message
    assert str(folder) not in message
    assert not (folder / "q2.bin").exists()
    assert action(saving, mine, "save", "q1.bin").status_code == 200  # the same name: once
    assert sorted(p.name for p in folder.iterdir()) == ["q1.bin"]


def test_slot_saves_stay_within_the_file_quota(saving: LiveServer) -> None:
    folder = empty_folder(saving)
    erase_all(saving)
    for name in ("e1.bin", "e2.bin", "e3.bin"):  # empty slots: tiny files
        assert action(saving, 0, "save", name).status_code == 200
    message = error_of(action(saving, 0, "save", "e4.bin"))
    assert "--slot-save-max-files" in message and "3" in message
    assert action(saving, 0, "save", "e1.bin").status_code == 200  # overwriting is not a file
    assert len(list(folder.iterdir())) == 3


def test_long_slot_file_names_are_saved_or_refused_never_a_500(saving: LiveServer) -> None:
    folder = empty_folder(saving)
    erase_all(saving)
    for n in (230, 250, 255):  # fit the file system (255 bytes): saved and restored
        name = "n" * (n - 4) + ".bin"
        saved = action(saving, 0, "save", name)
        assert saved.status_code == 200, saved.text
        assert (folder / name).is_file()
        assert action(saving, 1, "restore", name).status_code == 200
        (folder / name).unlink()
    assert error_of(action(saving, 0, "save", "n" * 256)) == "Invalid filename"
    (folder / "adir").mkdir()
    message = error_of(action(saving, 0, "restore", "adir"))
    assert "not a regular file" in message and str(folder) not in message
    (folder / "adir").rmdir()


# ----------------------------------------------- rows 8 and 9: files named in --media-path
@pytest.fixture(scope="module")
def hearing(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """A converted tiny chat model that hears (its audio projector beside it), with a media
    folder."""
    from fixture_ggufs import build_audio_mmproj
    from llamactl.converters import convert
    from llamactl.converters.examples import HIDDEN
    from synthetic_checkpoints import cached

    root = tmp_path_factory.mktemp("hears")
    model = convert(cached(tmp_path_factory, "llama"), root / "hears.gguf").outfile
    mmproj = build_audio_mmproj(root / "mmproj-hears.gguf", text_hidden=HIDDEN)
    media = tmp_path_factory.mktemp("media")
    settings = hermetic_settings(
        {"model": str(model), "parallel": 1, "threads": 2, "n_ctx": 512, "media_path": media}
    )
    with serve_app(create_app(settings, mmproj=mmproj), settings) as live:
        assert live.state.chat.supports("audio")
        yield live


def audio_message(name: str) -> list[dict[str, Any]]:
    part = {"type": "input_audio", "input_audio": {"data": f"file://{name}", "format": "wav"}}
    return [{"role": "user", "content": [{"type": "text", "text": "Listen."}, part]}]


def test_chats_naming_a_fifo_in_the_media_folder_are_refused_and_others_are_served(
    hearing: LiveServer,
) -> None:
    media = hearing.state.settings.media_path
    with fifo(media / "pipe.wav"):
        naming = [lambda: chat(hearing, audio_message("pipe.wav")) for _ in range(3)]
        others = [health(hearing), lambda: chat(hearing, "Hi")]
        t0 = time.monotonic()
        results = at_once(naming + others, timeout=30)
        elapsed = time.monotonic() - t0
    assert all(isinstance(r, httpx.Response) for r in results), results
    for r in results[:3]:
        message = error_of(r)
        assert "pipe.wav" in message and "not a regular file" in message
    assert [r.status_code for r in results[3:]] == [200, 200]
    assert elapsed < 20


def test_a_huge_media_file_is_refused_from_its_size_before_it_is_read(
    hearing: LiveServer,
) -> None:
    media = hearing.state.settings.media_path
    huge = media / "huge.wav"
    with huge.open("wb") as f:  # 1.5 GB, sparse: no disk is used
        f.truncate(1536 * 1024 * 1024)
    try:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        t0 = time.monotonic()
        r = chat(hearing, audio_message("huge.wav"))
        elapsed = time.monotonic() - t0
        grown_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak
    finally:
        huge.unlink()
    message = error_of(r)
    assert "huge.wav" in message and "--max-media-file-mib" in message and "64 MiB" in message
    assert str(media) not in message
    assert elapsed < 5 and grown_kib < 200 * 1024
    assert health(hearing)().status_code == 200
