"""`llamactl score`: answer typed questions about a state with a decision model.

The request is the body of `POST /v1/systemone`, built from flags or read whole from a file;
the answers print as a table (or, with --json, as the server's response). The model runs in
this process, or on a running server with --url.
"""

from __future__ import annotations

import base64
import json
import mimetypes
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table
from rich.text import Text

from llamactl.cli._help import PlainHelpCommand
from llamactl.cli._output import stderr_console, stdout_console, usage_error
from llamactl.cli._settings_options import default_text
from llamactl.config import load_settings

HELP = """Answer questions about a state with a decision model (no text is generated).

Each --question is `ID:TYPE:INSTRUCTIONS[:CRITERIA]`: TYPE is choice (CRITERIA: the options,
`a,b,c` or `a=what a means,b=...`), score (CRITERIA: 2 to 10 levels, lowest first) or noul
(yes/no; optional CRITERIA `yes=...,no=...`). The state is text, or `@file` (JSON when the file
ends in .json; `@-` reads stdin). Or give the whole /v1/systemone body with --request.
"""

EPILOG = """\b
Examples:
  llamactl score -m d1-3B.gguf --state 'I was charged twice!' \\
      --question 'route:choice:Which team?:billing,shipping,technical' \\
      --question 'urgency:score:How urgent is it?:can wait,today,right now' \\
      --question 'angry:noul:Is the customer angry?'
  llamactl score -m openjev.gguf --state @ticket.json \\
      --question 'ok:noul:Is it spam?' --json
  llamactl score -m minicpm-ocr-jev.gguf --state 'Total: 42.00' \\
      --image receipt.png \\
      --question 'match:noul:Does the text match the image?'
  llamactl score -m lev.gguf --request body.json
"""

_INPUT = "Input"
_MODEL = "Model"
_OUTPUT = "Output"
NOUL_KEYS = {"yes": "true", "true": "true", "no": "false", "false": "false"}


def register(app: typer.Typer) -> None:
    app.command("score", help=HELP, epilog=EPILOG, cls=PlainHelpCommand)(score_command)


def score_command(
    model: Annotated[
        str | None,
        typer.Option(
            "--model",
            "-m",
            help="Decision model: GGUF path, alias or name in the models directory.",
            metavar="NAME|PATH",
            rich_help_panel=_MODEL,
        ),
    ] = None,
    state: Annotated[
        str | None,
        typer.Option(
            "--state",
            "-s",
            help="The state: text, or @FILE (JSON if it ends in .json; @- for stdin).",
            metavar="TEXT|@FILE",
            rich_help_panel=_INPUT,
        ),
    ] = None,
    question: Annotated[
        list[str] | None,
        typer.Option(
            "--question",
            "-q",
            help="ID:TYPE:INSTRUCTIONS[:CRITERIA], repeatable.",
            metavar="SPEC",
            rich_help_panel=_INPUT,
        ),
    ] = None,
    image: Annotated[
        list[Path] | None,
        typer.Option(
            "--image",
            "-i",
            help="An image file (up to 8); needs the model's mmproj.",
            metavar="PATH",
            exists=True,
            dir_okay=False,
            rich_help_panel=_INPUT,
        ),
    ] = None,
    request_file: Annotated[
        Path | None,
        typer.Option(
            "--request",
            "-r",
            help="A whole /v1/systemone request body (JSON; - for stdin).",
            metavar="FILE",
            rich_help_panel=_INPUT,
        ),
    ] = None,
    mmproj: Annotated[
        Path | None,
        typer.Option(
            "--mmproj",
            help="Vision projector (default: mmproj-<model file> beside the model).",
            metavar="PATH",
            exists=True,
            dir_okay=False,
            rich_help_panel=_MODEL,
        ),
    ] = None,
    threads: Annotated[
        int | None,
        typer.Option(
            "--threads",
            help=f"CPU threads [{default_text('threads')}].",
            metavar="N",
            rich_help_panel=_MODEL,
        ),
    ] = None,
    parallel: Annotated[
        int | None,
        typer.Option(
            "--parallel",
            help="Slots: questions scored side by side, sharing their prompt prefix "
            f"[{default_text('parallel')}].",
            metavar="N",
            rich_help_panel=_MODEL,
        ),
    ] = None,
    url: Annotated[
        str | None,
        typer.Option(
            "--url",
            help="Send the request to a running `llamactl serve` instead.",
            metavar="URL",
            rich_help_panel=_MODEL,
        ),
    ] = None,
    json_output: Annotated[
        bool,
        typer.Option(
            "--json", help="Print the /v1/systemone response as JSON.", rich_help_panel=_OUTPUT
        ),
    ] = False,
) -> None:
    body = build_body(request_file, state, question or [], image or [])
    settings = load_settings({"model": model, "threads": threads, "parallel": parallel})
    if url:
        response = post(settings, body, url=url, mmproj=mmproj)
    else:
        response = score_locally(settings, body, url=url, mmproj=mmproj)
    if json_output:
        sys.stdout.write(json.dumps(response, indent=2, ensure_ascii=False) + "\n")
    else:
        print_answers(response)


# ------------------------------------------------------------------ input
def build_body(
    request_file: Path | None, state: str | None, questions: list[str], images: list[Path]
) -> dict[str, Any]:
    """The /v1/systemone body from --request, or from --state, --question and --image."""
    if request_file is not None:
        if state is not None or questions:
            usage_error("--request holds the whole request: drop --state and --question")
        body = read_json(request_file)
        if not isinstance(body, dict):
            usage_error(f"{request_file}: the request must be a JSON object")
    else:
        if state is None:
            usage_error("give the state with --state (or a whole request with --request)")
        if not questions:
            usage_error("give at least one --question (ID:TYPE:INSTRUCTIONS[:CRITERIA])")
        body = {"state": read_state(state), "questions": dict(map(parse_question, questions))}
    if images:
        body["images"] = [*body.get("images", []), *(data_url(p) for p in images)]
    return body


def read_json(path: Path) -> Any:
    text = sys.stdin.read() if str(path) == "-" else _read_text(path)
    try:
        return json.loads(text)
    except ValueError as exc:
        usage_error(f"{path}: not valid JSON ({exc})")


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        usage_error(f"cannot read {path}: {exc.strerror or exc}")


def read_state(value: str) -> Any:
    if not value.startswith("@"):
        return value
    name = value[1:]
    if name == "-":
        return sys.stdin.read()
    path = Path(name)
    return read_json(path) if path.suffix.lower() == ".json" else _read_text(path)


def parse_question(spec: str) -> tuple[str, dict[str, Any]]:
    """`id:type:instructions[:criteria]` (colons inside the instructions are kept)."""
    parts = spec.split(":", 2)
    if len(parts) < 3 or not parts[0] or not parts[2]:
        usage_error(f"--question {spec!r}: expected ID:TYPE:INSTRUCTIONS[:CRITERIA]")
    qid, qtype, rest = parts
    if qtype not in ("choice", "score", "noul"):
        usage_error(f"--question {spec!r}: TYPE must be choice, score or noul")
    instructions, criteria = rest, None
    if ":" in rest:
        head, tail = rest.rsplit(":", 1)
        if qtype != "noul" or _is_noul_criteria(tail):
            instructions, criteria = head, tail
    question: dict[str, Any] = {"type": qtype, "instructions": instructions}
    if qtype in ("choice", "score") and not criteria:
        usage_error(f"--question {spec!r}: a {qtype} needs its options after the last ':'")
    if criteria:
        items = [c.strip() for c in criteria.split(",") if c.strip()]
        if qtype == "score":
            question["criteria"] = items
        else:
            split = (c.partition("=") for c in items)
            pairs = [(k.strip(), v.strip() or None) for k, _, v in split]
            if qtype == "noul":
                pairs = [(NOUL_KEYS[k.lower()], v) for k, v in pairs]
            question["criteria"] = dict(pairs)
    return qid, question


def _is_noul_criteria(text: str) -> bool:
    items = [c.partition("=") for c in text.split(",")]
    return all(sep and k.strip().lower() in NOUL_KEYS for k, sep, _ in items)


def data_url(path: Path) -> str:
    mime = mimetypes.guess_type(path.name)[0] or ""
    if not mime.startswith("image/"):
        mime = "image/png"  # the decoder reads the format from the bytes
    return f"data:{mime};base64,{base64.b64encode(path.read_bytes()).decode()}"


# ------------------------------------------------------------------ scoring
def score_locally(
    settings: Any, body: dict[str, Any], *, mmproj: Path | None, **_: Any
) -> dict[str, Any]:
    """Load the model here, answer, free it."""
    from llamactl import (
        DecisionEngine,
        InvalidRequestError,
        decision_type_of,
        find_mmproj,
        load_decision_model,
        read_gguf_info,
    )
    from llamactl.engine_settings import decision_config
    from llamactl.models import resolve_model

    resolved = resolve_model(settings)
    if decision_type_of(read_gguf_info(resolved.path)) is None:
        raise InvalidRequestError(
            f"{resolved.name} is not a decision model (its GGUF has no decision.type); "
            "`llamactl score` needs one, e.g. a file written by `llamactl convert`"
        )
    from llamactl.converters.progress import terminal_progress

    dm = load_decision_model(
        resolved.path,
        mmproj=mmproj or find_mmproj(resolved.path),
        n_threads=settings.threads,
        progress=terminal_progress,
    )
    for note in dm.notes:
        stderr_console().print(Text(note, style="dim"), soft_wrap=True)
    try:
        config = decision_config(settings)
        with DecisionEngine(dm, config) as engine:
            result = engine.decide(engine.parse(body))
    finally:
        dm.close()
    return {
        "model": resolved.name,
        "answers": {qid: a.as_dict() for qid, a in result.answers.items()},
        "usage": result.usage(),
    }


def post(settings: Any, body: dict[str, Any], *, url: str, **_: Any) -> dict[str, Any]:
    """POST the request to a running server's /v1/systemone."""
    import httpx

    from llamactl import LlamactlError

    headers = {}
    keys = settings.resolved_api_keys()
    if keys:
        headers["Authorization"] = f"Bearer {keys[0]}"
    try:
        r = httpx.post(url.rstrip("/") + "/v1/systemone", json=body, headers=headers, timeout=600)
    except httpx.HTTPError as exc:
        raise LlamactlError(f"cannot reach {url}: {exc}") from exc
    data = r.json() if r.headers.get("content-type", "").startswith("application/json") else {}
    if r.status_code != 200:
        message = (data.get("error") or {}).get("message") if isinstance(data, dict) else None
        raise LlamactlError(f"{url} answered {r.status_code}: {message or r.text[:200]}")
    return data


# ------------------------------------------------------------------ output
def print_answers(response: dict[str, Any]) -> None:
    console = stdout_console()
    table = Table(box=None, pad_edge=False, header_style="bold")
    for col in ("question", "type", "answer", "confidence", "probabilities"):
        table.add_column(col, justify="right" if col == "confidence" else "left")
    for qid, a in response["answers"].items():
        table.add_row(qid, a["type"], *_cells(a))
    console.print(table)
    usage = response.get("usage", {})
    console.print(
        Text(f"{response.get('model')}: {usage.get('input_tokens', 0)} prompt tokens", style="dim")
    )


def _cells(a: dict[str, Any]) -> tuple[str, str, str]:
    if a["type"] == "noul":
        p = a["noul"]
        return f"{'yes' if p >= 0.5 else 'no'} ({p:.0%} yes)", "", ""
    probs = sorted(a["probabilities"].items(), key=lambda kv: -kv[1])
    shown = "  ".join(f"{k} {p:.2f}" for k, p in probs[:5])
    if len(probs) > 5:
        shown += f"  (+{len(probs) - 5})"
    answer = a["choice"] if a["type"] == "choice" else f"{a['score']:.2f}"
    return answer, f"{a['confidence']:.2f}", shown
