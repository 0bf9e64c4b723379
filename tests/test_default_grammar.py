"""A default grammar for every answer (llama-server's --grammar, --grammar-file, -j, -jf).

The files are read once at start, and only when they are what they claim: every hostile file
is a clear ConfigError before a model loads (never a hang on a FIFO, a read of a huge file, or
a grammar that would crash llama.cpp's parser later). Then through the real server: answers
follow the grammar, a request's own grammar or response_format wins, and several requests at
once each answer as alone.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from serverkit import LiveServer, hermetic_settings, run_server

from llamactl.core.errors import ConfigError
from llamactl.engine_settings import default_grammar

MODEL_FIXTURES = {"yes_no"}
YES_NO = 'root ::= "yes" | "no"'


def settings(**overrides: Any) -> Any:
    return hermetic_settings(overrides)


def write(tmp: Path, name: str, data: bytes) -> Path:
    path = tmp / name
    path.write_bytes(data)
    return path


def fifo(tmp: Path, name: str) -> Path:
    path = tmp / name
    os.mkfifo(path)
    return path


def huge(tmp: Path, name: str) -> Path:
    path = tmp / name
    with path.open("wb") as f:
        f.truncate(10 * 2**30)  # sparse: 10 GiB that are never read
    return path


Maker = Callable[[Path], dict[str, Any]]
HOSTILE: list[tuple[str, Maker, str]] = [
    ("missing file", lambda t: {"grammar_file": t / "nope.gbnf"}, "No such file"),
    ("a directory", lambda t: {"grammar_file": t}, "not a regular file"),
    ("a FIFO", lambda t: {"grammar_file": fifo(t, "pipe.gbnf")}, "not a regular file"),
    ("huge", lambda t: {"grammar_file": huge(t, "big.gbnf")}, "over max_schema_bytes"),
    ("not UTF-8", lambda t: {"grammar_file": write(t, "x.gbnf", b"\xff\xfe")}, "not UTF-8"),
    (
        "nested past the parser's depth",
        lambda t: {"grammar": "root ::= " + "(" * 5000 + '"a"' + ")" * 5000},
        "nest",
    ),
    ("over the byte limit", lambda t: {"grammar": "root ::= " + '"a" ' * 200_000}, "over"),
    ("schema FIFO", lambda t: {"json_schema_file": fifo(t, "s.json")}, "not a regular file"),
    ("schema truncated", lambda t: {"json_schema": '{"type": "obj'}, "not valid JSON"),
    ("schema not an object", lambda t: {"json_schema": "[1, 2]"}, "must be an object"),
    (
        "schema deep",
        lambda t: {"json_schema": '{"items":' * 3000 + "{}" + "}" * 3000},
        "max_schema_depth",
    ),
    (
        "schema bound past the limit",
        lambda t: {"json_schema": json.dumps({"type": "string", "minLength": 100_000})},
        "minLength",
    ),
    (
        "two at once",
        lambda t: {"grammar": YES_NO, "json_schema": "{}"},
        "give one default grammar",
    ),
]


@pytest.mark.parametrize(("case", "make", "said"), HOSTILE, ids=[c for c, _, _ in HOSTILE])
def test_a_hostile_default_grammar_is_a_clear_error(tmp_path, case, make, said) -> None:
    with pytest.raises(ConfigError) as info:
        default_grammar(settings(**make(tmp_path)))
    assert said.lower() in str(info.value).lower(), str(info.value)


def test_a_schema_becomes_its_grammar_and_files_read_as_text(tmp_path) -> None:
    assert default_grammar(settings()) is None
    assert default_grammar(settings(grammar=YES_NO)) == YES_NO
    path = write(tmp_path, "yn.gbnf", YES_NO.encode())
    assert default_grammar(settings(grammar_file=path)) == YES_NO
    schema = write(tmp_path, "s.json", b'{"type": "boolean"}')
    assert "true" in (default_grammar(settings(json_schema_file=schema)) or "")


def test_serve_refuses_a_bad_grammar_before_the_model_loads(tmp_path) -> None:
    from processkit import run_cli

    result = run_cli("serve", "--grammar-file", str(fifo(tmp_path, "g.gbnf")))
    assert result.returncode == 1
    assert "grammar_file" in result.stderr and "not a regular file" in result.stderr
    assert "Traceback" not in result.stderr
    bad = write(tmp_path, "bad.gbnf", b"root ::= (")
    result = run_cli("serve", "--grammar-file", str(bad), "--port", "0")
    assert result.returncode == 1 and "grammar" in result.stderr
    assert "Traceback" not in result.stderr


# ------------------------------------------------------------------------ through the server
@pytest.fixture(scope="module")
def yes_no(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    folder = tmp_path_factory.mktemp("grammar")
    path = folder / "yn.gbnf"
    path.write_text(YES_NO, encoding="utf-8")
    with run_server(parallel=4, grammar_file=path, temperature=0) as live:
        yield live


def ask(live: LiveServer, content: str, **extra: Any) -> str:
    body = {"messages": [{"role": "user", "content": content}], "max_tokens": 8, **extra}
    r = httpx.post(live.url + "/v1/chat/completions", json=body, timeout=120)
    assert r.status_code == 200, r.text
    return r.json()["choices"][0]["message"]["content"]


QUESTIONS = ["Is water wet?", "Is fire cold?", "Do cats bark?", "Is Paris in France?"]


def test_every_answer_follows_the_default_grammar(yes_no: LiveServer) -> None:
    alone = [ask(yes_no, q) for q in QUESTIONS]
    assert set(alone) <= {"yes", "no"}
    with ThreadPoolExecutor(4) as pool:
        together = list(pool.map(lambda q: ask(yes_no, q), QUESTIONS))
    assert together == alone


def test_a_request_that_asks_for_its_own_format_gets_it(yes_no: LiveServer) -> None:
    own = ask(yes_no, "Give me a JSON object.", response_format={"type": "json_object"})
    assert own.startswith("{")  # the request's JSON grammar, not the default yes/no
    grammar = ask(yes_no, "Say maybe.", grammar='root ::= "maybe"')
    assert grammar == "maybe"
