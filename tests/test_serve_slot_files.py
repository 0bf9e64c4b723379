"""llama-server's `POST /slots/{id}?action=save|restore|erase` (with `--slot-save-path`) and the
prompt cache kept across restarts (`--cache-persist`), through the real server on the embedded
model: answers and errors in llama-server's shapes, a restored slot reused by the next request
with the same greedy answer, a busy slot waited for, and a conversation continued from disk
after the server process was stopped and started again."""

from __future__ import annotations

import dataclasses
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from llamactl.server.prepare import PREPARE_WORKERS
from processkit import NO_EOS, run_cli, serve
from serverkit import LiveServer, free_port, run_server

from llamactl.engine.state_file import SeqSnapshot, empty_state, write_state_file

pytestmark = pytest.mark.slow  # every test here loads a model

MODEL_FIXTURES = {"saving"}

USER = "Name three rivers of Europe."


@pytest.fixture(scope="module")
def saving(tmp_path_factory) -> Iterator[LiveServer]:
    folder = tmp_path_factory.mktemp("slots")
    with run_server(parallel=2, n_ctx=1024, slot_save_path=folder, cache_ram=0) as live:
        yield live


def folder_of(live: LiveServer) -> Path:
    return live.app.state.llamactl.settings.slot_save_path


def action(live: LiveServer, slot: int | str, act: str, filename: str | None = None):
    body = {"filename": filename} if filename is not None else None
    return httpx.post(f"{live.url}/slots/{slot}", params={"action": act}, json=body, timeout=120)


def chat(url: str, messages: list[dict], **extra) -> dict:
    body = {"messages": messages, "temperature": 0, "max_tokens": 12, **extra}
    r = httpx.post(url + "/v1/chat/completions", json=body, timeout=120)
    assert r.status_code == 200, r.text
    return r.json()


def turn_two(first: dict) -> list[dict]:
    return [
        {"role": "user", "content": USER},
        {"role": "assistant", "content": first["choices"][0]["message"]["content"]},
        {"role": "user", "content": "And one more?"},
    ]


def cached(answer: dict) -> int:
    return answer["usage"]["prompt_tokens_details"]["cached_tokens"]


def held_slot(live: LiveServer) -> int:
    (slot,) = [s for s in live.app.state.llamactl.engine._slots if s.kv_tokens]
    return slot.seq_id


def erase_all(live: LiveServer) -> None:
    for s in (0, 1):
        assert action(live, s, "erase").status_code == 200


def test_save_erase_restore_and_the_next_request_reuses_it(saving) -> None:
    erase_all(saving)
    first = chat(saving.url, [{"role": "user", "content": USER}])
    slot = held_slot(saving)
    saved = action(saving, slot, "save", "turn1.bin")
    assert saved.status_code == 200, saved.text
    body = saved.json()
    n = first["usage"]["prompt_tokens"] + first["usage"]["completion_tokens"] - 1
    assert body["id_slot"] == slot and body["filename"] == "turn1.bin"
    assert body["n_saved"] == n
    assert body["n_written"] == (folder_of(saving) / "turn1.bin").stat().st_size
    assert body["timings"]["save_ms"] >= 0
    assert action(saving, slot, "erase").json() == {"id_slot": slot, "n_erased": n}

    cold = chat(saving.url, turn_two(first))
    assert cached(cold) == 0
    erase_all(saving)
    restored = action(saving, 1 - slot, "restore", "turn1.bin")
    assert restored.status_code == 200, restored.text
    got = restored.json()
    assert (got["id_slot"], got["n_restored"], got["n_read"]) == (1 - slot, n, body["n_written"])
    assert got["timings"]["restore_ms"] >= 0
    warm = chat(saving.url, turn_two(first))
    assert cached(warm) == n
    assert warm["choices"][0]["message"] == cold["choices"][0]["message"]
    listed = httpx.get(saving.url + "/slots", timeout=30).json()
    assert listed[1 - slot]["n_prompt_tokens_cache"] == n


def error_of(r: httpx.Response, status: int) -> str:
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert set(err) >= {"code", "message", "type"} and err["code"] == status
    return err["message"]


@pytest.mark.parametrize(
    "name", ["../escape.bin", "/etc/passwd", "a/b.bin", "..", "a\\b", "", "x.", " x", "a:b"]
)
def test_names_that_would_leave_the_folder_are_refused(saving, name: str) -> None:
    for act in ("save", "restore"):
        assert error_of(action(saving, 0, act, name), 400) == "Invalid filename"
    assert not (folder_of(saving).parent / "escape.bin").exists()


def test_bad_slot_ids_actions_and_files_are_400(saving) -> None:
    assert error_of(action(saving, "x", "erase"), 400) == "Invalid slot ID"
    assert error_of(action(saving, 2, "save", "a.bin"), 400) == "Invalid slot ID"
    assert error_of(action(saving, -1, "erase"), 400) == "Invalid slot ID"
    assert error_of(action(saving, 0, "dump", "a.bin"), 400) == "Invalid action"
    assert "filename" in error_of(action(saving, 0, "save"), 400)
    assert "no file" in error_of(action(saving, 0, "restore", "missing.bin"), 400)

    folder = folder_of(saving)
    (folder / "junk.bin").write_bytes(b"not a state file at all")
    assert "not a llamactl state file" in error_of(action(saving, 0, "restore", "junk.bin"), 400)

    engine = saving.app.state.llamactl.engine
    other = dataclasses.replace(engine.identity, n_ctx_seq=engine.identity.n_ctx_seq * 2)
    write_state_file(folder / "other.bin", other, SeqSnapshot([], empty_state()), kind="slot")
    message = error_of(action(saving, 0, "restore", "other.bin"), 400)
    assert "another model or KV layout" in message and "n_ctx_seq" in message

    saved = action(saving, 0, "save", "cut.bin")
    assert saved.status_code == 200
    data = (folder / "cut.bin").read_bytes()
    (folder / "cut.bin").write_bytes(data[:-7])
    assert "truncated" in error_of(action(saving, 0, "restore", "cut.bin"), 400)
    assert httpx.get(saving.url + "/health", timeout=10).status_code == 200


def test_a_busy_slot_is_saved_when_its_job_ends_and_waiting_holds_no_worker(saving) -> None:
    """Saves of a busy slot wait for its job (llama-server defers them); more waiting saves
    than the server has preparation workers do not stop it from answering other requests."""
    erase_all(saving)
    result: dict = {}
    body = {"max_tokens": 400, "logit_bias": NO_EOS}

    def generate() -> None:
        result["answer"] = chat(saving.url, [{"role": "user", "content": "Count."}], **body)

    worker = threading.Thread(target=generate)
    worker.start()
    engine = saving.app.state.llamactl.engine
    busy: list[int] = []
    while not busy and worker.is_alive():
        busy = [s.id for s in engine.slots_info() if s.busy]
        time.sleep(0.005)
    assert busy, "the generation ended before it was seen running"
    saves: list[httpx.Response] = []
    savers = [
        threading.Thread(target=lambda i=i: saves.append(action(saving, busy[0], "save", f"b{i}")))
        for i in range(PREPARE_WORKERS + 1)
    ]
    for t in savers:
        t.start()
    tokens = httpx.post(saving.url + "/tokenize", json={"content": "hello"}, timeout=30)
    still_busy = engine.slots_info()[busy[0]].busy
    worker.join()
    for t in savers:
        t.join()
    assert tokens.status_code == 200 and tokens.json()["tokens"]
    assert still_busy  # answered while every save was still waiting
    usage = result["answer"]["usage"]
    assert len(saves) == PREPARE_WORKERS + 1
    for saved in saves:
        assert saved.status_code == 200, saved.text
        assert saved.json()["n_saved"] == usage["prompt_tokens"] + usage["completion_tokens"] - 1


def test_without_slot_save_path_slot_actions_are_501() -> None:
    with run_server(parallel=1, n_ctx=512) as live:
        message = error_of(action(live, 0, "save", "a.bin"), 501)
        assert (
            message == "This server does not support slots action. Start it with `--slot-save-path`"
        )
        assert httpx.get(live.url + "/slots", timeout=10).status_code == 200


def test_turn_two_after_a_restart_is_served_from_disk(tmp_path: Path) -> None:
    folder = tmp_path / "cache"
    port = free_port()
    args = [
        "--port",
        str(port),
        "--threads",
        "2",
        "--parallel",
        "1",
        "--cache-persist",
        str(folder),
    ]
    with serve(tmp_path, *args, port=port) as live:
        live.wait_healthy()
        first = chat(live.url, [{"role": "user", "content": USER}])
        # the reference: turn 2 without the restart, decoded from scratch
        alone = chat(live.url, turn_two(first), cache_prompt=False)
        assert cached(alone) == 0
        assert live.stop(signal.SIGTERM) == 0
    assert list(folder.glob("*.llkv"))
    with serve(tmp_path, *args, port=port) as live:
        live.wait_healthy()
        again = chat(live.url, turn_two(first))
        assert live.stop(signal.SIGTERM) == 0
    assert cached(again) > first["usage"]["prompt_tokens"]  # the prompt and the answer
    assert again["choices"][0]["message"] == alone["choices"][0]["message"]


def test_a_slot_save_path_that_is_not_a_directory_is_refused(tmp_path: Path) -> None:
    result = run_cli("serve", "--slot-save-path", str(tmp_path / "missing"))
    assert result.returncode != 0 and "not a directory" in result.stderr


def complete(live: LiveServer, prompt: str, id_slot: int) -> dict:
    body = {"prompt": prompt, "id_slot": id_slot, "cache_prompt": True, "n_predict": 16}
    r = httpx.post(live.url + "/completion", json={**body, "temperature": 0}, timeout=120)
    assert r.status_code == 200, r.text
    return r.json()


def test_llama_servers_slot_file_pattern_with_id_slot(saving) -> None:
    """llama.cpp's test_slot_save_restore on the embedded model: a request pinned to slot 1,
    saved, then a related prompt reuses the prefix; the file restored into slot 0 serves the
    same prompt there; slot 1 was not disturbed by the restore."""
    erase_all(saving)
    france = complete(saving, "What is the capital of France?", 1)
    assert france["id_slot"] == 1
    n_prompt = france["timings"]["prompt_n"]
    assert france["timings"]["cache_n"] == 0
    saved = action(saving, 1, "save", "slot1.bin").json()
    assert saved["n_saved"] == n_prompt + france["tokens_predicted"] - 1

    germany = complete(saving, "What is the capital of Germany?", 1)
    shared = germany["timings"]["cache_n"]
    assert 0 < shared < n_prompt and germany["timings"]["prompt_n"] == n_prompt - shared

    assert action(saving, 0, "restore", "slot1.bin").json()["n_restored"] == saved["n_saved"]
    on_zero = complete(saving, "What is the capital of Germany?", 0)
    assert on_zero["id_slot"] == 0
    assert on_zero["timings"]["prompt_n"] == n_prompt - shared
    assert on_zero["content"] == germany["content"]

    again = complete(saving, "What is the capital of Germany?", 1)
    assert again["timings"]["prompt_n"] == 1
    assert again["content"] == germany["content"]
    wrapped = complete(saving, "What is the capital of Germany?", 3)  # 3 mod 2 slots: slot 1
    assert wrapped["id_slot"] == 1


def test_an_id_slot_below_minus_one_is_400(saving) -> None:
    r = httpx.post(saving.url + "/completion", json={"prompt": "Hi", "id_slot": -2}, timeout=30)
    assert error_of(r, 400) == "Invalid slot ID"
