#!/usr/bin/env python3
"""Start llamactl (or llama-server) with llama-server's flags, for llama.cpp's own server tests.

llama.cpp's `tools/server/tests` start the binary named by `LLAMA_SERVER_BIN_PATH` with
llama-server's command line, and download their models from the Hugging Face hub. This
launcher is that binary for both servers under test (`scripts/peer_suite.py` runs the suite):

- the model flags that would download (`--hf-repo`, `--hf-file`, `--model-url`,
  `--mmproj-url`) are replaced by a local GGUF: `PEER_MODELS` (a JSON object, hf repo or
  "repo/file" -> path) or else the embedded SmolLM2, with the `mmproj-<name>` beside it
  when there is one (the hub's API hands llama-server a repo's mmproj); `--offline` goes
  with them;
- every other flag is passed unchanged, so a flag llamactl lacks fails the test that needs
  it, as it would fail a user who swapped servers;
- `PEER_TARGET` names the server: `llamactl` (default: the `llamactl serve` installed beside
  this interpreter) or the path of a `llama-server` binary.

The process execs the server, so the suite's signals and exit codes reach it unchanged.
"""

from __future__ import annotations

import json
import os
import sys

DOWNLOAD_FLAGS = ("--hf-repo", "-hfr", "--hf-file", "-hff", "--model-url", "-mu", "--mmproj-url")
DROPPED_SWITCHES = ("--offline",)
MODEL_FLAGS = ("--model", "-m", "--models-dir", "--models-preset")
MMPROJ_FLAGS = ("--mmproj", "-mm", "--no-mmproj")


def _substitutes() -> dict[str, str]:
    raw = os.environ.get("PEER_MODELS", "").strip()
    return json.loads(raw) if raw else {}


def _embedded_model() -> str:
    from llamactl.models import embedded_model_path

    return str(embedded_model_path())


def local_model(repo: str | None, file: str | None, table: dict[str, str]) -> str:
    """The local GGUF standing in for a hub model: `repo/file`, then `repo`, then SmolLM2."""
    for key in (f"{repo}/{file}" if repo and file else None, repo):
        if key and key in table:
            return table[key]
    return table.get("*") or _embedded_model()


def translate(args: list[str], table: dict[str, str]) -> list[str]:
    """llama-server's argv with the downloads replaced by a local model."""
    out: list[str] = []
    repo = file = None
    wants_model = False
    i = 0
    while i < len(args):
        arg = args[i]
        if arg in DOWNLOAD_FLAGS and i + 1 < len(args):
            value = args[i + 1]
            if arg in ("--hf-repo", "-hfr"):
                repo, wants_model = value.split(":")[0], True
            elif arg in ("--hf-file", "-hff"):
                file, wants_model = value, True
            elif arg in ("--model-url", "-mu"):
                wants_model = True
            i += 2
            continue
        if arg in DROPPED_SWITCHES:
            i += 1
            continue
        if arg in MODEL_FLAGS:
            wants_model = False
        out.append(arg)
        i += 1
    has_model = any(a in MODEL_FLAGS for a in out)
    if wants_model and not has_model:
        model = local_model(repo, file, table)
        out += ["--model", model]
        # the hub hands llama-server a repo's mmproj with its model; locally it is the
        # `mmproj-<name>` beside the stand-in (llamactl finds that one by itself too)
        mmproj = os.path.join(os.path.dirname(model), "mmproj-" + os.path.basename(model))
        if os.path.isfile(mmproj) and not any(a in MMPROJ_FLAGS for a in out):
            out += ["--mmproj", mmproj]
    return out


def command(target: str, args: list[str]) -> list[str]:
    if target == "llamactl":
        from llamactl.layout import entry_point

        return [*entry_point(), "serve", *args]
    return [target, *args]


def main() -> None:
    target = os.environ.get("PEER_TARGET", "llamactl")
    argv = command(target, translate(sys.argv[1:], _substitutes()))
    sys.stdout.flush()
    os.execv(argv[0], argv)


if __name__ == "__main__":
    if any(a in ("-h", "--help") for a in sys.argv[1:2]):
        print(__doc__)
        sys.exit(0)
    main()
