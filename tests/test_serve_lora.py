"""LoRA adapters on the real engine (`--lora`, `--lora-scaled`, `--lora-init-without-apply`,
`GET/POST /lora-adapters`) with a tiny adapter GGUF written for the embedded SmolLM2: scale 0
answers as the base model, a non-zero scale changes the answer, a POST switches it live (and
no KV computed under other scales is reused), concurrency equals solo at a fixed setting."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from lorakit import write_lora_gguf
from processkit import run_cli
from serverkit import LiveServer, run_server

from llamactl.models import embedded_model_path

MODEL_FIXTURES = {"adapted"}
PROMPT = "The capital of France is"
PROMPTS = [f"{PROMPT} {w}" for w in ("not", "and", "the", "a")]


@pytest.fixture(scope="session")
def lora_file(tmp_path_factory) -> Path:
    base = embedded_model_path()
    assert base is not None
    return write_lora_gguf(tmp_path_factory.mktemp("lora") / "smollm2-lora.gguf", base)


@pytest.fixture(scope="module")
def adapted(lora_file) -> Iterator[LiveServer]:
    with run_server(parallel=4, lora=[str(lora_file)], lora_init_without_apply=True) as live:
        yield live


def complete(live: LiveServer, prompt: str = PROMPT, **extra) -> httpx.Response:
    body = {"prompt": prompt, "n_predict": 12, "temperature": 0, **extra}
    return httpx.post(live.url + "/completion", json=body, timeout=120)


def content(live: LiveServer, prompt: str = PROMPT, **extra) -> str:
    r = complete(live, prompt, **extra)
    assert r.status_code == 200, r.text
    return r.json()["content"]


def set_scale(live: LiveServer, scale: float) -> None:
    r = httpx.post(live.url + "/lora-adapters", json=[{"id": 0, "scale": scale}], timeout=60)
    assert r.status_code == 200, r.text
    assert r.json() == {"success": True}


def test_scale_zero_is_the_base_model_and_a_scale_changes_it(adapted, server, lora_file) -> None:
    listed = httpx.get(adapted.url + "/lora-adapters", timeout=30).json()
    assert listed == [
        {
            "id": 0,
            "path": str(lora_file),
            "scale": 0.0,
            "task_name": "test-task",
            "prompt_prefix": "",
        }
    ]
    base = [content(server, p) for p in PROMPTS]
    set_scale(adapted, 0.0)
    assert [content(adapted, p) for p in PROMPTS] == base
    set_scale(adapted, 1.0)
    try:
        assert httpx.get(adapted.url + "/lora-adapters", timeout=30).json()[0]["scale"] == 1.0
        props = httpx.get(adapted.url + "/props", timeout=30).json()
        assert props["default_generation_settings"]["params"]["lora"] == [{"id": 0, "scale": 1.0}]
        # the same prompts again: no KV computed under scale 0 serves them
        first = complete(adapted, PROMPTS[0]).json()
        assert first["timings"]["cache_n"] == 0
        adapted_out = [first["content"], *(content(adapted, p) for p in PROMPTS[1:])]
        assert adapted_out != base
        set_scale(adapted, 0.0)
        assert [content(adapted, p) for p in PROMPTS] == base  # and back
        set_scale(adapted, 1.0)
        assert [content(adapted, p) for p in PROMPTS] == adapted_out
    finally:
        set_scale(adapted, 0.0)


def test_concurrency_equals_solo_at_a_fixed_scale(adapted) -> None:
    set_scale(adapted, 0.7)
    try:
        alone = [content(adapted, p) for p in PROMPTS]
        with ThreadPoolExecutor(4) as pool:
            together = list(pool.map(lambda p: content(adapted, p), PROMPTS))
        assert together == alone
    finally:
        set_scale(adapted, 0.0)


def test_a_request_lora_must_equal_the_global_scales(adapted) -> None:
    same = complete(adapted, lora=[{"id": 0, "scale": 0.0}])
    assert same.status_code == 200, same.text
    assert complete(adapted, lora=[]).status_code == 200  # left out: scale 0
    other = complete(adapted, lora=[{"id": 0, "scale": 0.5}])
    assert other.status_code == 400
    error = other.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert "per-request LoRA scales are not supported" in error["message"]
    chat = httpx.post(
        adapted.url + "/v1/chat/completions",
        json={"messages": [{"role": "user", "content": "hi"}], "lora": [{"id": 0, "scale": 1}]},
        timeout=60,
    )
    assert chat.status_code == 400 and "POST /lora-adapters" in chat.json()["error"]["message"]


def test_bad_scale_lists_are_a_400(adapted) -> None:
    url = adapted.url + "/lora-adapters"
    wrong_id = httpx.post(url, json=[{"id": 3, "scale": 1.0}], timeout=30)
    assert wrong_id.status_code == 400
    assert "invalid LoRA adapter id 3" in wrong_id.json()["error"]["message"]
    assert httpx.post(url, json={"id": 0, "scale": 1.0}, timeout=30).status_code == 400
    assert httpx.get(url, timeout=30).json()[0]["scale"] == 0.0


def test_a_server_without_adapters_lists_none(server) -> None:
    assert httpx.get(server.url + "/lora-adapters", timeout=30).json() == []
    assert complete(server, lora=[]).status_code == 200


@pytest.mark.slow
def test_a_missing_or_foreign_adapter_stops_the_start(tmp_path: Path) -> None:
    base = embedded_model_path()
    assert base is not None
    missing = run_cli("serve", "--port", "0", "--lora", str(tmp_path / "none.gguf"))
    assert missing.returncode == 1
    assert "LoRA adapter file not found" in missing.stderr and "Traceback" not in missing.stderr
    foreign = write_lora_gguf(tmp_path / "qwen.gguf", base, arch="qwen2")
    wrong = run_cli("serve", "--port", "0", "--lora-scaled", f"{foreign}:0.5")
    assert wrong.returncode == 1
    assert "is for architecture 'qwen2'; the model is 'llama'" in wrong.stderr
    bad = run_cli("serve", "--port", "0", "--lora-scaled", "just-a-path.gguf")
    assert bad.returncode == 1 and "expected FNAME:SCALE" in bad.stderr
