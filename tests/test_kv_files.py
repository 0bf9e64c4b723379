"""KV to and from disk through the real engine on the embedded model: a restarted engine
continues a conversation from the prompt cache on disk (`cache_persist_dir`) with the same
greedy answer, files of another layout are ignored, corrupt ones skipped with a warning, the
budget holds, periodic writes and slot actions do not change what concurrent sessions
generate; slot files restore into another slot; a request pinned to a slot (`id_slot`)
waits for it."""

from __future__ import annotations

import dataclasses
import logging
import threading

import pytest

from llamactl.core.errors import InvalidRequestError
from llamactl.engine.engine import Engine, EngineConfig, GenerationRequest
from llamactl.engine.model import Model
from llamactl.engine.types import SamplingParams
from llamactl.models import embedded_model_path

MODEL_FIXTURES = {"model"}

GREEDY = SamplingParams(temperature=0.0)


@pytest.fixture(scope="module")
def model() -> Model:
    return Model(embedded_model_path())


def chat_tokens(model: Model, user: str) -> list[int]:
    return model.tokenize(
        f"<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n", add_special=False
    )


def run(engine: Engine, prompt: list[int], max_tokens: int = 12):
    _, dones = engine.submit(GenerationRequest(prompt, GREEDY, max_tokens=max_tokens)).collect()
    return dones[0]


def config(**kw) -> EngineConfig:
    kw.setdefault("n_parallel", 1)
    kw.setdefault("n_ctx", 1024)
    kw.setdefault("n_threads", 2)
    return EngineConfig(**kw)


def turn_two(model: Model, first, user1: str) -> list[int]:
    return (
        chat_tokens(model, user1)
        + list(first.token_ids[:-1])
        + model.tokenize(
            "<|im_end|>\n<|im_start|>user\nAnd one more?<|im_end|>\n<|im_start|>assistant\n",
            add_special=False,
        )
    )


def test_a_restarted_engine_continues_from_disk_with_the_same_answer(model, tmp_path):
    user = "Name three rivers of Europe."
    with Engine(model, config(cache_ram_mib=0)) as eng:  # the reference: no restart, no cache
        first = run(eng, chat_tokens(model, user))
        follow = turn_two(model, first, user)
        alone = run(eng, follow)
    with Engine(model, config(cache_persist_dir=tmp_path)) as eng:
        assert run(eng, chat_tokens(model, user)).token_ids == first.token_ids
    assert len(list(tmp_path.glob("*.llkv"))) == 1  # the idle slot's prompt, written on close
    with Engine(model, config(cache_persist_dir=tmp_path)) as eng:
        assert len(eng.cache) == 1
        again = run(eng, follow)
    assert again.usage.cached_tokens == len(chat_tokens(model, user)) + len(first.token_ids) - 1
    assert again.token_ids == alone.token_ids


def test_files_of_another_layout_are_ignored_and_kept(model, tmp_path):
    with Engine(model, config(cache_persist_dir=tmp_path)) as eng:
        run(eng, chat_tokens(model, "Hello there."))
    files = sorted(tmp_path.iterdir())
    with Engine(model, config(n_ctx=512, cache_persist_dir=tmp_path)) as eng:
        assert len(eng.cache) == 0
        assert run(eng, chat_tokens(model, "Hello there.")).usage.cached_tokens == 0
    assert set(files) <= set(tmp_path.iterdir())  # another layout's files are not removed


def test_a_corrupt_file_is_skipped_with_a_warning(model, tmp_path, caplog):
    with Engine(model, config(cache_persist_dir=tmp_path)) as eng:
        run(eng, chat_tokens(model, "Hello there."))
    (path,) = tmp_path.glob("*.llkv")
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 1000])
    with (
        caplog.at_level(logging.WARNING, logger="llamactl.engine"),
        Engine(model, config(cache_persist_dir=tmp_path)) as eng,
    ):
        assert len(eng.cache) == 0
        assert run(eng, chat_tokens(model, "Hello there.")).usage.cached_tokens == 0
    assert any("truncated" in r.getMessage() for r in caplog.records)


def test_the_files_stay_within_the_cache_budget(model, tmp_path):
    prompts = [chat_tokens(model, f"Tell me about the number {n} in detail.") for n in (1, 2, 3)]
    with Engine(model, config(cache_ram_mib=1, cache_persist_dir=tmp_path)) as eng:
        for p in prompts:
            run(eng, p, max_tokens=8)
    total = sum(p.stat().st_size for p in tmp_path.glob("*.llkv"))
    assert 0 < total <= 1024 * 1024 + 4096 * len(prompts)  # states within 1 MiB, plus headers


def test_periodic_writes_leave_concurrent_outputs_as_alone(model, tmp_path):
    prompts = [chat_tokens(model, u) for u in ("Count to five.", "Name a colour.", "Say hi.")]
    with Engine(model, config(n_parallel=3, cache_ram_mib=0)) as eng:
        alone = [run(eng, p, max_tokens=24).token_ids for p in prompts]
    cfg = config(n_parallel=3, cache_persist_dir=tmp_path, cache_persist_interval=0.01)
    with Engine(model, cfg) as eng:
        for _ in range(2):
            got: dict[int, tuple[int, ...]] = {}

            def go(i: int, got: dict[int, tuple[int, ...]] = got) -> None:
                got[i] = run(eng, prompts[i], max_tokens=24).token_ids

            threads = [threading.Thread(target=go, args=(i,)) for i in range(3)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            assert [got[i] for i in range(3)] == alone
            assert eng.persist_cache() >= 0
    assert list(tmp_path.glob("*.llkv"))


def test_a_slot_file_restores_into_another_slot(model, tmp_path):
    user = "Name three rivers of Europe."
    prompt = chat_tokens(model, user)
    with Engine(model, config(n_parallel=2, cache_ram_mib=0)) as eng:
        first = run(eng, prompt)
        follow = turn_two(model, first, user)
        (held,) = [s.seq_id for s in eng._slots if s.kv_tokens]
        saved = eng.slot_files.save(held, tmp_path / "a.bin")
        assert saved.n_tokens == len(prompt) + len(first.token_ids) - 1
        assert saved.n_bytes == (tmp_path / "a.bin").stat().st_size
        assert eng.slot_files.erase(held).result() == saved.n_tokens
        cold = run(eng, follow)
        assert cold.usage.cached_tokens == 0
        for s in range(2):
            eng.slot_files.erase(s).result()
        restored = eng.slot_files.restore(1 - held, tmp_path / "a.bin")
        assert (restored.n_tokens, restored.n_bytes) == (saved.n_tokens, saved.n_bytes)
        warm = run(eng, follow)
        assert warm.usage.cached_tokens == saved.n_tokens
        assert warm.token_ids == cold.token_ids
        with pytest.raises(InvalidRequestError, match="Invalid slot ID"):
            eng.slot_files.save(2, tmp_path / "b.bin")
    with (
        Engine(model, config(n_parallel=2, n_ctx=2048, cache_ram_mib=0)) as eng,
        pytest.raises(InvalidRequestError, match="another model or KV layout.*n_ctx_seq"),
    ):
        eng.slot_files.restore(0, tmp_path / "a.bin")


def test_slot_actions_beside_a_running_generation_leave_it_as_alone(model, tmp_path):
    """Save, restore and erase of one slot, again and again, while another slot decodes: they
    run between decode steps, and the running generation's tokens equal a run alone."""
    long = chat_tokens(model, "Count from one to one hundred.")
    short = chat_tokens(model, "Name a colour.")
    request = GenerationRequest(long, GREEDY, max_tokens=120, ignore_eos=True)
    with Engine(model, config(n_parallel=2, cache_ram_mib=0)) as eng:
        alone = eng.submit(request).collect()[1][0].token_ids
    with Engine(model, config(n_parallel=2, slot_prompt_similarity=0.0)) as eng:
        run(eng, short)
        (other,) = [s.seq_id for s in eng._slots if s.kv_tokens]
        stream = eng.submit(request)  # takes the least recently used slot: the empty one
        stream.admitted.wait(30)
        assert eng.slots_info()[other].busy is False
        rounds = 0
        while not stream.finished:
            files = eng.slot_files
            files.save(other, tmp_path / "o.bin")
            files.erase(other).result()
            assert files.restore(other, tmp_path / "o.bin").n_tokens > 0
            rounds += 1
        assert stream.collect()[1][0].token_ids == alone
        assert rounds > 1


def test_a_request_for_a_busy_slot_waits_for_it(model):
    """llama-server's `id_slot`: the request runs in that slot once its job ends, with the
    output it has alone; the head of the queue waits, as every request waits its turn."""
    long = GenerationRequest(chat_tokens(model, "Count."), GREEDY, max_tokens=40, ignore_eos=True)
    short = chat_tokens(model, "Name a colour.")
    with Engine(model, config(n_parallel=2, cache_ram_mib=0)) as eng:
        alone = run(eng, short).token_ids
        first = eng.submit(dataclasses.replace(long, slot=1))
        pinned = eng.submit(GenerationRequest(short, GREEDY, max_tokens=12, slot=1))
        assert pinned.collect()[1][0].token_ids == alone
        assert first.finished and (first.slot_id, pinned.slot_id) == (1, 1)
        with pytest.raises(InvalidRequestError, match="Invalid slot ID"):
            eng.submit(GenerationRequest(short, GREEDY, slot=2))
