"""Write docs/openapi.json, the HTTP API's OpenAPI schema, from the app itself.

The schema comes from `create_app(...).openapi()`: building the app loads no model (loading
starts in its lifespan, which never runs here), so this takes a second and needs no GGUF file.
Rerun it after changing a route or a request/response model:

    python scripts/gen_openapi.py            # rewrite docs/openapi.json
    python scripts/gen_openapi.py --check    # exit 1 if docs/openapi.json is stale
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs" / "openapi.json"
COMMAND = "python scripts/gen_openapi.py"


def build_app():
    """The app with default settings and a model path that is never opened."""
    from llamactl.server.app import create_app

    from llamactl.config import Settings

    # Settings() rather than load_settings(): nothing from this machine's config file or
    # LLAMACTL_* variables may leak into a committed file.
    return create_app(Settings(), model_path=Path("model.gguf"))


def schema() -> dict[str, Any]:
    return build_app().openapi()


def render() -> str:
    """Sorted keys and a final newline: the same text on every machine and run, whatever
    order routes and models were registered in."""
    return json.dumps(schema(), indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the file is stale")
    parser.add_argument("--out", type=Path, default=OUT, help=f"default: {OUT.relative_to(ROOT)}")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        current = args.out.read_text(encoding="utf-8") if args.out.is_file() else None
        if current != text:
            print(f"{args.out} is out of date with the app: run `{COMMAND}`", file=sys.stderr)
            return 1
        return 0
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
