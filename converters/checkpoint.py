"""A Hugging Face checkpoint directory read without torch or transformers.

It gives the parsed JSON files (config, tokenizer, preprocessor...) and every weight as a
`Lazy` tensor, from `model.safetensors`, from numbered shards, or from a sharded index
(`model.safetensors.index.json`) whose weight map is checked against the shards: a missing
shard or a tensor the index promises but no shard holds fails with the file and tensor named.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from llamactl.core.errors import CheckpointError

from .lazy import Lazy
from .safetensors_io import SafetensorsFile, TensorEntry

INDEX_NAME = "model.safetensors.index.json"


class Checkpoint:
    """One checkpoint directory; nothing is read until asked for."""

    def __init__(self, path: Path | str, *, weights_prefix: str = "model") -> None:
        self.dir = Path(path)
        if not self.dir.is_dir():
            raise CheckpointError(
                self.dir,
                None,
                "not a directory (expected a Hugging Face checkpoint folder with config.json)",
            )
        self.weights_prefix = weights_prefix
        self._json: dict[str, Any] = {}
        self._files: dict[Path, SafetensorsFile] = {}
        self._tensors: dict[str, TensorEntry] | None = None

    # ------------------------------------------------------------------ JSON files
    def has(self, name: str) -> bool:
        return (self.dir / name).is_file()

    def json(self, name: str) -> dict[str, Any]:
        """A JSON object file of the checkpoint; missing or malformed is a CheckpointError."""
        if name not in self._json:
            path = self.dir / name
            if not path.is_file():
                raise CheckpointError(path, None, "file not found")
            try:
                data = json.loads(path.read_text(encoding="utf-8"))
            except (UnicodeDecodeError, json.JSONDecodeError) as exc:
                raise CheckpointError(path, None, f"not valid JSON ({exc})") from None
            if not isinstance(data, dict):
                raise CheckpointError(path, None, "expected a JSON object")
            self._json[name] = data
        return self._json[name]

    def optional_json(self, name: str) -> dict[str, Any] | None:
        return self.json(name) if self.has(name) else None

    @property
    def config(self) -> dict[str, Any]:
        return self.json("config.json")

    def field(
        self,
        data: dict[str, Any],
        key: str,
        kind: type | tuple[type, ...],
        *,
        file: str = "config.json",
        where: str = "",
    ) -> Any:
        """A required field of a parsed JSON file, type-checked, with an error that names it."""
        label = f"{where}{key}"
        if key not in data:
            raise CheckpointError(self.dir / file, label, "missing")
        value = data[key]
        kinds = kind if isinstance(kind, tuple) else (kind,)
        # bool is an int to Python, never to a config file
        if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
            raise CheckpointError(
                self.dir / file, label, f"expected {_kind_name(kind)}, got {value!r}"
            )
        return value

    # ------------------------------------------------------------------- weights
    @property
    def tensor_entries(self) -> dict[str, TensorEntry]:
        if self._tensors is None:
            self._tensors = self._index()
        return self._tensors

    def tensor_names(self) -> list[str]:
        return list(self.tensor_entries)

    def lazy(self, name: str) -> Lazy:
        """One weight as a Lazy float32 tensor (BF16 widened when it is computed)."""
        e = self.tensor_entries[name]
        st = self._file(e.file)
        return Lazy(e.shape, lambda: st.load(name), f"{name} ({e.dtype})", e.dtype)

    def _file(self, path: Path) -> SafetensorsFile:
        if path not in self._files:
            self._files[path] = SafetensorsFile(path)
        return self._files[path]

    def _index(self) -> dict[str, TensorEntry]:
        index_path = self.dir / f"{self.weights_prefix}.safetensors.index.json"
        if index_path.is_file():
            return self._from_index(index_path)
        parts = sorted(self.dir.glob(f"{self.weights_prefix}*.safetensors"))
        if not parts:
            raise CheckpointError(
                self.dir / f"{self.weights_prefix}.safetensors",
                None,
                "no safetensors weights in the checkpoint (PyTorch .bin files "
                "are not supported: convert them to safetensors first)",
            )
        entries: dict[str, TensorEntry] = {}
        for part in parts:
            for name, e in self._file(part).entries.items():
                if name in entries:
                    raise CheckpointError(part, name, f"tensor also stored in {entries[name].file}")
                entries[name] = e
        return entries

    def _from_index(self, index_path: Path) -> dict[str, TensorEntry]:
        index = self.json(index_path.name)
        weight_map = index.get("weight_map")
        if not isinstance(weight_map, dict) or not weight_map:
            raise CheckpointError(index_path, "weight_map", "missing or empty")
        entries: dict[str, TensorEntry] = {}
        for shard_name in dict.fromkeys(weight_map.values()):
            shard = self.dir / str(shard_name)
            if not shard.is_file():
                raise CheckpointError(
                    index_path, "weight_map", f"names the shard {shard_name}, which does not exist"
                )
            for name, e in self._file(shard).entries.items():
                if weight_map.get(name) != shard_name:
                    raise CheckpointError(
                        shard, name, f"tensor not listed for this shard in {index_path.name}"
                    )
                entries[name] = e
        missing = [n for n in weight_map if n not in entries]
        if missing:
            raise CheckpointError(
                index_path,
                f"weight_map[{missing[0]!r}]",
                f"no tensor {missing[0]} in {weight_map[missing[0]]}"
                + (f" (and {len(missing) - 1} more missing)" if len(missing) > 1 else ""),
            )
        return {n: entries[n] for n in weight_map}

    def close(self) -> None:
        for f in self._files.values():
            f.close()
        self._files.clear()


def _kind_name(kind: type | tuple[type, ...]) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    names = {
        int: "an integer",
        float: "a number",
        str: "a string",
        list: "a list",
        dict: "an object",
        bool: "true or false",
    }
    return " or ".join(names.get(k, k.__name__) for k in kinds)


def merged_text_config(config: dict[str, Any]) -> dict[str, Any]:
    """The language model's hyperparameters: `text_config` lifted over the top level, as
    llama.cpp's converter does for multimodal checkpoints."""
    text = config.get("text_config")
    return {**config, **text} if isinstance(text, dict) else dict(config)
