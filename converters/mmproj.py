"""Vision towers to an mmproj GGUF (`general.architecture = clip`), in the layouts llama.cpp's
converter writes and its `mtmd` reads: LFM2-VL (projector `lfm2`) and the Qwen3-VL style tower
of Qwen3.5 (projector `qwen3vl_merger`)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gguf

from llamactl.core.errors import CheckpointError

from .checkpoint import Checkpoint
from .lazy import Lazy
from .plan import GGUFPlan, OutTensor, OutType, mmproj_patch_type
from .textmodel import gguf_name, write_general

MMPROJ = gguf.MODEL_ARCH.MMPROJ
CLIP = gguf.MODEL_ARCH_NAMES[MMPROJ]
# PIL's resampling filters, as LFM2-VL's preprocessor_config `resample` names them
RESIZE_ALGOS = {0: "nearest", 1: "lanczos", 2: "bilinear", 3: "bicubic", 4: "box", 5: "hamming"}
RESIZE_ALGO_KEY = "clip.vision.image_resize_algo"


@dataclass(frozen=True)
class VisionBase:
    """The keys every vision mmproj carries (llama.cpp's MmprojModel)."""

    n_embd_text: int
    image_size: int
    patch_size: int
    n_embd: int
    n_ff: int
    n_block: int
    n_head: int
    mean: list[float]
    std: list[float]

    def write(self, w: gguf.GGUFWriter, out: OutType) -> None:
        w.add_file_type(out.file_type)
        w.add_clip_has_vision_encoder(True)
        w.add_vision_projection_dim(self.n_embd_text)
        w.add_vision_image_size(self.image_size)
        w.add_vision_patch_size(self.patch_size)
        w.add_vision_embedding_length(self.n_embd)
        w.add_vision_feed_forward_length(self.n_ff)
        w.add_vision_block_count(self.n_block)
        w.add_vision_head_count(self.n_head)
        w.add_vision_image_mean(self.mean)
        w.add_vision_image_std(self.std)


def vision_config(ckpt: Checkpoint) -> dict[str, Any]:
    vc = ckpt.config.get("vision_config")
    if not isinstance(vc, dict):
        raise CheckpointError(
            ckpt.dir / "config.json",
            "vision_config",
            "missing: this checkpoint has no vision tower for an mmproj",
        )
    return vc


def text_hidden(ckpt: Checkpoint) -> int:
    tc = ckpt.config.get("text_config")
    hp = tc if isinstance(tc, dict) else ckpt.config
    return ckpt.field(hp, "hidden_size", int, where="text_config." if tc else "")


def preprocessor(ckpt: Checkpoint) -> dict[str, Any]:
    return ckpt.json("preprocessor_config.json")


def _mean_std(ckpt: Checkpoint, pre: dict[str, Any]) -> tuple[list[float], list[float]]:
    mean = ckpt.field(pre, "image_mean", list, file="preprocessor_config.json")
    std = ckpt.field(pre, "image_std", list, file="preprocessor_config.json")
    return [float(x) for x in mean], [float(x) for x in std]


def _vision_tensors(
    ckpt: Checkpoint,
    n_block: int,
    rename: Callable[[str], str | None],
    special: Callable[[str, Lazy], list[OutTensor] | None],
) -> list[OutTensor]:
    # projector layers are numbered like blocks (mm.1, mm.2): size the table for them too
    tmap = gguf.get_tensor_name_map(MMPROJ, max(n_block, 8))
    out: list[OutTensor] = []
    for hf_name in ckpt.tensor_names():
        name = rename(hf_name)
        if name is None:
            continue
        data = ckpt.lazy(hf_name)
        handled = special(name, data)
        if handled is not None:
            out.extend(handled)
            continue
        out.append(OutTensor(gguf_name(tmap, name, ckpt, hf_name=hf_name, arch="clip"), data))
    return out


# ------------------------------------------------------------------------ LFM2-VL
def lfm2_vl_plan(
    ckpt: Checkpoint,
    out: OutType,
    *,
    card_dir: Path,
    extra: Callable[[gguf.GGUFWriter], None] | None = None,
) -> GGUFPlan:
    """LFM2-VL's SigLIP2 tower and projector (llama.cpp projector type `lfm2`)."""
    vc = vision_config(ckpt)
    pre = preprocessor(ckpt)

    def need(key: str) -> Any:
        return ckpt.field(vc, key, (int, float), where="vision_config.")

    patch = int(need("patch_size"))
    n_layers = int(need("num_hidden_layers"))
    drop = -(int(ckpt.config.get("vision_feature_layer", -1)) + 1)
    mean, std = _mean_std(ckpt, pre)
    base = VisionBase(
        text_hidden(ckpt),
        256,
        patch,
        int(need("hidden_size")),
        int(need("intermediate_size")),
        n_layers - drop,
        int(need("num_attention_heads")),
        mean,
        std,
    )
    eps = float(need("layer_norm_eps"))
    resample = pre.get("resample")

    def rename(name: str) -> str | None:
        if "vision_tower" not in name and "multi_modal_projector" not in name:
            return None
        return name.replace("model.vision_tower.", "vision_tower.").replace(
            "model.multi_modal_projector.", "multi_modal_projector."
        )

    def special(name: str, data: Lazy) -> list[OutTensor] | None:
        if not name.endswith("patch_embedding.weight"):
            return None
        hidden = data.shape[0]
        conv = data.reshape(hidden, patch, patch, -1).transpose(0, 3, 1, 2)
        return [OutTensor("v.patch_embd.weight", conv, mmproj_patch_type(out))]

    def write_metadata(w: gguf.GGUFWriter, out_: OutType) -> None:
        write_general(w, kind="mmproj", card_dir=card_dir)
        base.write(w, out_)
        w.add_clip_projector_type(gguf.VisionProjectorType.LFM2)
        w.add_vision_attention_layernorm_eps(eps)
        w.add_vision_projector_scale_factor(int(ckpt.config.get("downsample_factor", 2)))
        w.add_vision_use_gelu(True)
        if isinstance(resample, int) and resample in RESIZE_ALGOS:
            w.add_string(RESIZE_ALGO_KEY, RESIZE_ALGOS[resample])
        if extra is not None:
            extra(w)
        w.add_quantization_version(gguf.GGML_QUANT_VERSION)

    tensors = _vision_tensors(ckpt, n_layers, rename, special)
    return GGUFPlan(CLIP, "mmproj", "LFM2-VL vision (lfm2)", tensors, write_metadata)


# --------------------------------------------------------------- Qwen3.5 vision
def qwen_vl_plan(
    ckpt: Checkpoint,
    out: OutType,
    *,
    card_dir: Path,
    keep_image_budget: bool = False,
    extra: Callable[[gguf.GGUFWriter], None] | None = None,
) -> GGUFPlan:
    """The Qwen3-VL style tower of Qwen3.5 (llama.cpp projector type `qwen3vl_merger`);
    `keep_image_budget` writes the preprocessor's min/max pixels."""
    vc = vision_config(ckpt)
    pre = preprocessor(ckpt)

    def need(key: str) -> int:
        return int(ckpt.field(vc, key, int, where="vision_config."))

    patch = int(vc.get("patch_size", 16))
    n_block = need("depth")
    image_size = vc.get("image_size") or int(
        math.sqrt(vc.get("num_position_embeddings", 2304)) * patch
    )
    mean, std = _mean_std(ckpt, pre)
    base = VisionBase(
        text_hidden(ckpt),
        int(image_size),
        patch,
        need("hidden_size"),
        need("intermediate_size"),
        n_block,
        need("num_heads"),
        mean,
        std,
    )
    deepstack = [int(i) for i in vc.get("deepstack_visual_indexes") or []]
    tc = ckpt.config.get("text_config") or {}
    eps = float(tc.get("rms_norm_eps", 1e-6))
    budget = _pixel_budget(ckpt, pre) if keep_image_budget else None

    def rename(name: str) -> str | None:
        name = name.replace("model.visual.", "visual.", 1)
        return name if name.startswith("visual.") else None

    def special(name: str, data: Lazy) -> list[OutTensor] | None:
        if name == "visual.patch_embed.proj.weight":
            if data.ndim != 5 or data.shape[2] != 2:
                raise CheckpointError(
                    ckpt.dir,
                    name,
                    f"expected a Conv3d kernel with a temporal patch of 2, got shape {data.shape}",
                )
            kind = mmproj_patch_type(out)
            return [
                OutTensor("v.patch_embd.weight", data.take(2, 0), kind),
                OutTensor("v.patch_embd.weight.1", data.take(2, 1), kind),
            ]
        if name == "visual.patch_embed.proj.bias":
            return [OutTensor("v.patch_embd.bias", data)]
        if name.startswith("visual.merger."):
            part, _, tail = name[len("visual.merger.") :].partition(".")
            target = {"linear_fc1": "mm.0", "linear_fc2": "mm.2", "norm": "v.post_ln"}.get(part)
            if target is None:
                raise CheckpointError(ckpt.dir, name, "unexpected merger tensor")
            return [OutTensor(f"{target}.{tail}", data)]
        if name.startswith("visual.deepstack_merger_list."):
            idx, part, tail = name.split(".", 4)[2:5]
            layer = deepstack[int(idx)]
            target = {"norm": "norm", "linear_fc1": "fc1", "linear_fc2": "fc2"}[part]
            return [OutTensor(f"v.deepstack.{layer}.{target}.{tail}", data)]
        return None

    def write_metadata(w: gguf.GGUFWriter, out_: OutType) -> None:
        write_general(w, kind="mmproj", card_dir=card_dir)
        base.write(w, out_)
        w.add_clip_projector_type(gguf.VisionProjectorType.QWEN3VL)
        w.add_vision_use_gelu(True)
        if "spatial_merge_size" in vc:
            w.add_vision_spatial_merge_size(int(vc["spatial_merge_size"]))
        w.add_vision_attention_layernorm_eps(eps)
        if n_block:  # written even with no deepstack layer, as llama.cpp writes it
            w.add_vision_is_deepstack_layers([i in deepstack for i in range(n_block)])
        if budget is not None:
            w.add_vision_min_pixels(budget[0])
            w.add_vision_max_pixels(budget[1])
        if extra is not None:
            extra(w)
        w.add_quantization_version(gguf.GGML_QUANT_VERSION)

    tensors = _vision_tensors(ckpt, n_block, rename, special)
    return GGUFPlan(CLIP, "mmproj", "Qwen3.5 vision (qwen3vl_merger)", tensors, write_metadata)


def _pixel_budget(ckpt: Checkpoint, pre: dict[str, Any]) -> tuple[int, int]:
    """min/max pixels per image: `min_pixels`/`max_pixels`, or Qwen3-VL's `size` edges."""
    size = pre.get("size")
    if not isinstance(size, dict):
        size = {}
    lo = pre.get("min_pixels", size.get("shortest_edge"))
    hi = pre.get("max_pixels", size.get("longest_edge"))
    if not isinstance(lo, int) or not isinstance(hi, int):
        raise CheckpointError(
            ckpt.dir / "preprocessor_config.json",
            "max_pixels",
            "the image budget (min_pixels/max_pixels or size.shortest_edge/"
            "size.longest_edge) is missing",
        )
    return lo, hi
