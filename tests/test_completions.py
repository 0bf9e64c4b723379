"""The committed completion scripts match the app, parse, and complete what they should."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
import typer.main

from llamactl.cli.main import app

ROOT = Path(__file__).resolve().parent.parent
COMPLETIONS = ROOT / "completions"


def _load_generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "gen_completions", ROOT / "scripts" / "gen_completions.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


gen = _load_generator()


def test_committed_scripts_are_up_to_date(tmp_path: Path) -> None:
    gen.write(tmp_path)
    stale = [
        name
        for name in gen.RENDERERS
        if not (COMPLETIONS / name).is_file()
        or (COMPLETIONS / name).read_text() != (tmp_path / name).read_text()
    ]
    assert not stale, (
        f"completions/{', completions/'.join(stale)} out of date with the CLI: "
        "run `python scripts/gen_completions.py` and commit the result"
    )


def test_generation_does_not_depend_on_hash_order(tmp_path: Path) -> None:
    """Click keeps some option names in sets; the scripts must not change from run to run."""
    for seed in ("1", "2"):
        subprocess.run(
            [
                sys.executable,
                str(ROOT / "scripts" / "gen_completions.py"),
                "--out",
                str(tmp_path / seed),
            ],
            check=True,
            capture_output=True,
            env={**os.environ, "PYTHONHASHSEED": seed},
        )
    for name in gen.RENDERERS:
        assert (tmp_path / "1" / name).read_text() == (tmp_path / "2" / name).read_text()


def test_every_command_and_option_is_in_every_script() -> None:
    root = typer.main.get_command(app)
    scripts = {name: (COMPLETIONS / name).read_text() for name in gen.RENDERERS}
    for name, command in root.commands.items():
        for text in scripts.values():
            assert name in text
        for param in command.params:
            if getattr(param, "hidden", False):
                continue  # internal (serve --listen-fd, between the router and a child)
            for opt in getattr(param, "opts", []):
                if opt.startswith("--"):
                    for script_name, text in scripts.items():
                        word = opt if script_name != "llamactl.fish" else f"-l {opt[2:]}"
                        assert word in text, f"{opt} of {name} missing from {script_name}"


def test_check_mode_reports_stale_files(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert gen.main(["--check", "--out", str(tmp_path)]) == 1
    assert "python scripts/gen_completions.py" in capsys.readouterr().err
    gen.write(tmp_path)
    assert gen.main(["--check", "--out", str(tmp_path)]) == 0


# ------------------------------------------------------------------- bash
def bash_complete(*words: str) -> list[str]:
    """Run the completion function as bash would for `llamactl WORDS...` (last is current)."""
    line = " ".join(f"'{w}'" for w in ("llamactl", *words))
    script = (
        f"source {COMPLETIONS / 'llamactl.bash'}\n"
        f"COMP_WORDS=({line})\nCOMP_CWORD={len(words)}\n"
        "_llamactl\nprintf '%s\\n' \"${COMPREPLY[@]}\"\n"
    )
    out = subprocess.run(
        ["bash", "--norc", "--noprofile", "-c", script],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=True,
    )
    return [w for w in out.stdout.splitlines() if w]


def test_bash_script_parses() -> None:
    subprocess.run(["bash", "-n", str(COMPLETIONS / "llamactl.bash")], check=True)


def test_bash_completes_commands_and_options() -> None:
    assert bash_complete("") == app_commands()
    assert bash_complete("mo") == ["models"]
    assert bash_complete("--v") == ["--version"]
    assert bash_complete("chat", "--max") == ["--max-tokens"]
    assert bash_complete("chat", "--temp", "0", "--hide") == ["--hide-reasoning"]
    assert bash_complete("models", "--j") == ["--json"]


def test_bash_completes_values() -> None:
    assert bash_complete("chat", "--model", "pyproj") == []  # not a GGUF file
    assert bash_complete("chat", "--model", "tes") == ["tests"]  # a folder may hold some
    assert bash_complete("chat", "--temperature", "") == []  # free text: nothing to offer
    assert "tests" in bash_complete("models", "--models-dir", "te")
    assert "pyproject.toml" not in bash_complete("models", "--models-dir", "py")
    # an option's value that looks like a command does not switch commands
    words = bash_complete("chat", "--system", "models", "--jso")
    assert sorted(words) == ["--json", "--json-schema", "--json-schema-file"]


def test_bash_completes_the_values_a_setting_takes() -> None:
    """Settings options arrive as text (load_settings checks them); their values complete."""
    assert bash_complete("chat", "--cache-type", "") == ["auto", "bf16", "f16", "q8_0"]
    assert bash_complete("serve", "-fa", "o") == ["on", "off"]
    assert bash_complete("serve", "--split-mode", "") == ["none", "layer", "row"]
    assert bash_complete("serve", "--spec-type", "ngram") == [
        "ngram-simple",
        "ngram-mod",
        "ngram-cache",
    ]


# -------------------------------------------------------------- zsh, fish
@pytest.mark.skipif(shutil.which("zsh") is None, reason="zsh is not installed")
def test_zsh_script_parses() -> None:
    subprocess.run(["zsh", "-n", str(COMPLETIONS / "_llamactl")], check=True)


@pytest.mark.skipif(shutil.which("fish") is None, reason="fish is not installed")
def test_fish_completes() -> None:
    def complete(line: str) -> list[str]:
        script = f"source {COMPLETIONS / 'llamactl.fish'}; complete -C '{line}'"
        out = subprocess.run(
            ["fish", "--no-config", "-c", script],
            capture_output=True,
            text=True,
            cwd=ROOT,
            check=True,
        )
        return [row.split("\t")[0] for row in out.stdout.splitlines()]

    subprocess.run(["fish", "--no-execute", str(COMPLETIONS / "llamactl.fish")], check=True)
    assert complete("llamactl ") == app_commands()
    assert complete("llamactl chat --max") == ["--max-tokens"]
    assert complete("llamactl chat --model pyproj") == ["pyproject.toml"]


def app_commands() -> list[str]:
    """The commands the Typer app has now: completions must offer exactly these."""
    import typer.main

    from llamactl.cli.main import app

    return sorted(typer.main.get_command(app).commands)


def _models_dir(root: Path) -> Path:
    (root / "chat").mkdir(parents=True)
    for name in ("qwen3-4b.gguf", "chat/phi-4.gguf", "mmproj-qwen3-4b.gguf"):
        (root / name).write_bytes(b"GGUF")
    return root


def test_model_names_complete_from_the_catalogue(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--model offers what `llamactl models` names: the embedded model and the models
    directory's files (no projector), then GGUF files and folders of the current directory."""
    monkeypatch.setenv("LLAMACTL_MODELS_DIR", str(_models_dir(tmp_path / "models")))
    assert bash_complete("chat", "-m", "qw") == ["qwen3-4b"]
    assert bash_complete("serve", "--model", "chat/") == ["chat/phi-4"]
    assert bash_complete("chat", "--model", "SmolLM2") == ["SmolLM2-135M-Instruct.Q4_1"]
    assert bash_complete("chat", "--model", "pyproj") == []  # only GGUF files and folders
    assert "mmproj-qwen3-4b" not in bash_complete("chat", "-m", "")


def test_tts_voices_complete() -> None:
    assert bash_complete("tts", "--voice", "piq") == ["piqd"]
    assert "en-us" in bash_complete("tts", "--voice", "en")


@pytest.mark.skipif(shutil.which("fish") is None, reason="fish is not installed")
def test_fish_completes_model_names(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLAMACTL_MODELS_DIR", str(_models_dir(tmp_path / "models")))
    script = f"source {COMPLETIONS / 'llamactl.fish'}; __llamactl_models"
    out = subprocess.run(
        ["fish", "--no-config", "-c", script], capture_output=True, text=True, check=True
    )
    assert sorted(out.stdout.split()) == ["SmolLM2-135M-Instruct.Q4_1", "chat/phi-4", "qwen3-4b"]
