"""`llamactl pull` against a local stand-in for the hub (never the real one): picking a file
by quantization, resuming a broken download, refusing a corrupt one, clear errors offline,
and a pulled GGUF that the engine loads."""

from __future__ import annotations

import json
import socket

import pytest
from fake_hub import FakeHub
from typer.testing import CliRunner

from llamactl.cli.main import app
from llamactl.core.errors import DownloadError
from llamactl.hub import ModelRef, parse_ref, pull
from llamactl.models import embedded_model_path

REPO = "someone/Tiny-GGUF"
FILES = {
    "tiny-Q4_K_M.gguf": b"GGUF" + b"a" * 3000,
    "tiny-Q8_0.gguf": b"GGUF" + b"b" * 5000,
    "mmproj-tiny-F16.gguf": b"GGUF" + b"c" * 100,
}


@pytest.fixture
def hub(monkeypatch):
    fake = FakeHub({REPO: dict(FILES)}).start()
    monkeypatch.setenv("HF_ENDPOINT", fake.url)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    yield fake
    fake.stop()


def test_refs_name_a_file_or_a_quantization():
    assert parse_ref("a/b") == ModelRef("a/b")
    assert parse_ref("a/b:q4_k_m") == ModelRef("a/b", quant="q4_k_m")
    assert parse_ref("a/b:dir/x.gguf") == ModelRef("a/b", file="dir/x.gguf")
    with pytest.raises(DownloadError, match="OWNER/REPO"):
        parse_ref("not-a-repo")


def test_a_quantization_picks_its_file_and_lands_under_the_repo(hub, tmp_path):
    paths = pull(parse_ref(f"{REPO}:q8_0"), tmp_path)
    assert paths == [tmp_path / REPO / "tiny-Q8_0.gguf"]
    assert paths[0].read_bytes() == FILES["tiny-Q8_0.gguf"]
    # no name: the repo's Q4_K_M among several (the mmproj is not a model)
    assert pull(parse_ref(REPO), tmp_path)[0].name == "tiny-Q4_K_M.gguf"
    assert not list(tmp_path.rglob("*.part"))


def test_unknown_quantizations_and_files_list_what_is_there(hub, tmp_path):
    with pytest.raises(DownloadError, match="quantizations there: .*Q4_K_M.*Q8_0"):
        pull(parse_ref(f"{REPO}:Q5_K_S"), tmp_path)
    with pytest.raises(DownloadError, match="has no file nope.gguf; it has: tiny-Q4_K_M"):
        pull(parse_ref(f"{REPO}:nope.gguf"), tmp_path)
    with pytest.raises(DownloadError, match="not found"):
        pull(parse_ref("someone/missing"), tmp_path)
    hub.gated.add(REPO)
    with pytest.raises(DownloadError, match="HF_TOKEN"):
        pull(parse_ref(REPO), tmp_path)


def test_a_broken_download_resumes_where_it_stopped(hub, tmp_path):
    hub.cut_after = 1000
    with pytest.raises(DownloadError, match="run the same command again to resume"):
        pull(parse_ref(f"{REPO}:Q8_0"), tmp_path)
    target = tmp_path / REPO / "tiny-Q8_0.gguf"
    assert not target.exists()
    assert (target.parent / "tiny-Q8_0.gguf.part").stat().st_size == 1000
    assert pull(parse_ref(f"{REPO}:Q8_0"), tmp_path) == [target]
    assert hub.ranges == ["bytes=1000-"]
    assert target.read_bytes() == FILES["tiny-Q8_0.gguf"]


def test_a_download_that_does_not_match_the_hubs_hash_is_refused(hub, tmp_path):
    hub.wrong_hash.add("tiny-Q8_0.gguf")
    with pytest.raises(DownloadError, match="SHA-256"):
        pull(parse_ref(f"{REPO}:Q8_0"), tmp_path)
    assert not list((tmp_path / REPO).iterdir())


def test_split_models_come_whole(hub, tmp_path):
    hub.repos["someone/Big-GGUF"] = {
        "big-Q4_0-00001-of-00002.gguf": b"GGUF1",
        "big-Q4_0-00002-of-00002.gguf": b"GGUF2",
    }
    paths = pull(parse_ref("someone/Big-GGUF:Q4_0"), tmp_path)
    assert [p.name for p in paths] == [
        "big-Q4_0-00001-of-00002.gguf",
        "big-Q4_0-00002-of-00002.gguf",
    ]


def test_offline_is_a_clear_error(monkeypatch, tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{port}")
    result = CliRunner().invoke(app, ["pull", REPO, "--models-dir", str(tmp_path)])
    assert result.exit_code == 1
    assert "cannot reach the hub" in result.output and "offline" in result.output


@pytest.mark.slow
def test_a_pulled_gguf_is_listed_and_answers(hub, tmp_path, monkeypatch):
    gguf = embedded_model_path().read_bytes()
    hub.repos["someone/SmolLM2-GGUF"] = {"SmolLM2-135M-Q4_1.gguf": gguf}
    runner = CliRunner()
    pulled = runner.invoke(
        app, ["pull", "someone/SmolLM2-GGUF", "--models-dir", str(tmp_path), "--json"]
    )
    assert pulled.exit_code == 0, pulled.output
    out = json.loads(pulled.output)
    assert out["model"] == "someone/SmolLM2-GGUF/SmolLM2-135M-Q4_1"
    assert out["size_bytes"] == len(gguf)
    listed = runner.invoke(app, ["models", "--models-dir", str(tmp_path), "--json"])
    assert out["model"] in [m["name"] for m in json.loads(listed.output)]
    monkeypatch.setenv("LLAMACTL_MODELS_DIR", str(tmp_path))
    answer = runner.invoke(app, ["chat", "-m", out["model"], "--temp", "0", "-n", "4", "Say hi."])
    assert answer.exit_code == 0 and answer.output.strip(), answer.output


def test_hf_repo_fetches_once_and_then_works_offline(hub, tmp_path, monkeypatch):
    from llamactl.config import load_settings
    from llamactl.models import resolve_model

    settings = load_settings({"hf_repo": f"{REPO}:Q8_0", "models_dir": tmp_path})
    first = resolve_model(settings)
    assert first.source == "hub" and first.name == f"{REPO}/tiny-Q8_0"
    assert first.path.read_bytes() == FILES["tiny-Q8_0.gguf"]
    hub.stop()  # offline now: the fetched copy is used without asking the hub
    assert resolve_model(settings).path == first.path
    other = load_settings({"hf_repo": f"{REPO}:Q4_K_M", "models_dir": tmp_path})
    with pytest.raises(DownloadError, match="cannot reach the hub"):
        resolve_model(other)
    hub.start()  # the fixture's stop needs a live server


# A hostile mirror (issue #31, row 15): listed paths and refs that would leave the models
# directory are refused before anything is fetched or written.
HOSTILE_PATHS = [
    "../../../escape.gguf",  # out of the models directory
    "../escape.gguf",  # out of the repo's folder
    "sub/../../../../escape.gguf",
    "ABSOLUTE",  # replaced by an absolute path under tmp_path
    "sub\\..\\..\\..\\escape.gguf",
    "sub//escape.gguf",
    "./escape.gguf",
    "escape\x00.gguf",
]


@pytest.mark.parametrize("listed", HOSTILE_PATHS)
def test_a_hostile_mirror_cannot_write_outside_the_models_directory(hub, tmp_path, listed):
    from llamactl.config import load_settings
    from llamactl.models import resolve_model

    if listed == "ABSOLUTE":
        listed = str(tmp_path / "abs" / "escape.gguf")
    data = b"GGUF" + b"e" * 100
    hub.repos["someone/Evil-GGUF"] = {listed: data}
    hub.serve_anything = data  # a mirror that answers any path with the bytes it listed
    models = tmp_path / "root" / "models"
    result = CliRunner().invoke(app, ["pull", "someone/Evil-GGUF", "--models-dir", str(models)])
    assert result.exit_code == 1, result.output
    assert "is refused" in result.output and "would leave the models directory" in result.output
    settings = load_settings({"hf_repo": "someone/Evil-GGUF", "models_dir": models})
    with pytest.raises(DownloadError, match="is refused"):
        resolve_model(settings)  # -hf takes the same path
    assert [p for p in tmp_path.rglob("*") if p.is_file()] == []
    assert not [r for r in hub.requests if not r.startswith("/api/")]  # nothing was fetched


@pytest.mark.parametrize(
    "ref",
    ["../..:x.gguf", "a/..:x.gguf", "./b", "a/b:../../x.gguf", "a/b:/tmp/x.gguf",
     "a/b:dir\\x.gguf", "a/b:dir//x.gguf", "a/b:C:x.gguf"],
)  # fmt: skip
def test_refs_that_leave_the_models_directory_are_refused(ref, tmp_path):
    with pytest.raises(DownloadError):
        parse_ref(ref)
    result = CliRunner().invoke(app, ["pull", ref, "--models-dir", str(tmp_path / "models")])
    assert result.exit_code == 1, result.output
    assert "would leave the models directory" in result.output
    assert not list(tmp_path.rglob("*.gguf"))


def test_files_in_a_repo_folder_still_land_in_it(hub, tmp_path):
    hub.repos[REPO]["sub/dir/tiny-Q2_K.gguf"] = b"GGUF" + b"s" * 10
    paths = pull(parse_ref(f"{REPO}:sub/dir/tiny-Q2_K.gguf"), tmp_path)
    assert paths == [tmp_path / REPO / "sub" / "dir" / "tiny-Q2_K.gguf"]
