"""docs/openapi.json matches the app, covers every route family, and is built without a model."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from serverkit import app_routes

ROOT = Path(__file__).resolve().parent.parent
SCHEMA_FILE = ROOT / "docs" / "openapi.json"
SCRIPT = ROOT / "scripts" / "gen_openapi.py"

# (method, path) -> the request body's schema name (None: no body)
FAMILIES: dict[tuple[str, str], str | None] = {
    ("get", "/health"): None,
    ("get", "/v1/models"): None,
    ("get", "/metrics"): None,
    ("post", "/v1/chat/completions"): "ChatCompletionRequest",
    ("post", "/v1/chat/completions/control"): "ControlRequest",
    ("post", "/v1/completions"): "CompletionRequest",
    ("post", "/v1/responses"): "ResponsesRequest",
    ("post", "/v1/responses/input_tokens"): "InputTokensRequest",
    ("get", "/v1/responses/{response_id}"): None,
    ("delete", "/v1/responses/{response_id}"): None,
    ("post", "/v1/messages"): "MessagesRequest",
    ("post", "/v1/messages/count_tokens"): "CountTokensRequest",
}


def _load_generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_openapi", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


gen = _load_generator()


@pytest.fixture(scope="module")
def committed() -> dict[str, Any]:
    return json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))


def refs(node: Any) -> set[str]:
    """Names of every component schema that `node` points at, however deeply."""
    if isinstance(node, dict):
        found = {node["$ref"].rsplit("/", 1)[-1]} if "$ref" in node else set()
        return found.union(*(refs(v) for v in node.values()))
    if isinstance(node, list):
        return set().union(*(refs(v) for v in node))
    return set()


def test_committed_schema_is_up_to_date() -> None:
    assert SCHEMA_FILE.read_text(encoding="utf-8") == gen.render(), (
        "docs/openapi.json is out of date with the app: run `python scripts/gen_openapi.py` "
        "and commit the result"
    )


def test_building_the_schema_loads_no_model() -> None:
    loaders = {t for t in threading.enumerate() if t.name == "llamactl-load"}
    app = gen.build_app()
    app.openapi()
    state = app.state.llamactl
    assert not state.ready and state.engine is None and state.load_error is None
    assert {t for t in threading.enumerate() if t.name == "llamactl-load"} <= loaders


@pytest.mark.parametrize(("method", "path"), list(FAMILIES), ids=[" ".join(k) for k in FAMILIES])
def test_every_route_family_and_its_request_schema(
    committed: dict[str, Any], method: str, path: str
) -> None:
    operation = committed["paths"].get(path, {}).get(method)
    assert operation is not None, f"{method.upper()} {path} missing from docs/openapi.json"
    body = FAMILIES[(method, path)]
    if body is None:
        assert "requestBody" not in operation
        return
    schema = operation["requestBody"]["content"]["application/json"]["schema"]
    assert body in refs(schema)
    assert committed["components"]["schemas"][body]["properties"]


def test_every_documented_app_route_is_in_the_file(committed: dict[str, Any]) -> None:
    """Catches a new route nobody added to FAMILIES (or to the committed file)."""
    routes = [r for r in app_routes(gen.build_app()) if r.in_schema and not r.websocket]
    assert len(routes) > 20  # included routers are flattened (FastAPI 0.165 nests them)
    for route in routes:
        assert route.method.lower() in committed["paths"].get(route.path, {}), route.path


def test_every_component_reference_resolves(committed: dict[str, Any]) -> None:
    assert refs(committed) <= set(committed["components"]["schemas"])


def test_check_mode_reports_stale_files(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "openapi.json"
    assert gen.main(["--check", "--out", str(out)]) == 1
    assert "python scripts/gen_openapi.py" in capsys.readouterr().err
    assert gen.main(["--out", str(out)]) == 0
    assert gen.main(["--check", "--out", str(out)]) == 0


def test_output_does_not_depend_on_hash_seed_or_settings(tmp_path: Path) -> None:
    """A user's LLAMACTL_* variables (here: API keys, an alias) never reach the file."""
    env = {**os.environ, "PYTHONHASHSEED": "7", "LLAMACTL_API_KEY": "k", "LLAMACTL_ALIAS": "x"}
    subprocess.run(
        [sys.executable, str(SCRIPT), "--out", str(tmp_path / "a.json")],
        check=True,
        capture_output=True,
        env=env,
    )
    assert (tmp_path / "a.json").read_text(encoding="utf-8") == gen.render()


def test_error_responses_are_the_ones_the_server_sends(committed: dict[str, Any]) -> None:
    """Bad input is a 400 in the family's shape (never FastAPI's 422), keys a 401, loading a 503."""
    for path, operations in committed["paths"].items():
        for operation in operations.values():
            responses = operation["responses"]
            assert "422" not in responses, path
            if path in ("/health", "/metrics"):
                continue
            expected = "AnthropicError" if path.startswith("/v1/messages") else "OpenAIError"
            for status in ("401", "503"):
                assert expected in refs(responses[status]), (path, status)
    chat = committed["paths"]["/v1/chat/completions"]["post"]["responses"]
    assert "OpenAIError" in refs(chat["400"])
    messages = committed["paths"]["/v1/messages"]["post"]["responses"]
    assert "AnthropicError" in refs(messages["400"])
    assert "HTTPValidationError" not in committed["components"]["schemas"]
