"""JSON Schemas written into the OpenAPI document by hand, where FastAPI collects none."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel


def inline_schema(
    model: type[BaseModel], *, mode: Literal["validation", "serialization"] = "validation"
) -> dict[str, Any]:
    """`model`'s JSON Schema with its `$defs` inlined: for a streamed response's media type
    (`mode="serialization"`) or a request body documented by hand."""
    schema = model.model_json_schema(mode=mode)
    defs = schema.pop("$defs", {})

    def resolve(node: Any) -> Any:
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/$defs/"):
                return resolve(defs[ref.removeprefix("#/$defs/")])
            return {key: resolve(value) for key, value in node.items()}
        if isinstance(node, list):
            return [resolve(item) for item in node]
        return node

    return resolve(schema)
