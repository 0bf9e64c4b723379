"""llama.cpp's quantizer through the engine: a Q4_0 copy of the embedded model loads and
answers; bad requests are clear errors and never leave a file under the target name."""

from __future__ import annotations

import pytest
from gguf import GGUFReader

from llamactl.core.errors import InvalidRequestError, ModelLoadError
from llamactl.engine.engine import Engine, EngineConfig, GenerationRequest
from llamactl.engine.model import Model
from llamactl.engine.quantize import QUANT_TYPES, quantize
from llamactl.engine.types import SamplingParams
from llamactl.models import embedded_model_path


@pytest.mark.slow
def test_a_q4_0_copy_loads_and_generates(tmp_path):
    target = quantize(embedded_model_path(), tmp_path / "q4_0.gguf", "q4_0", threads=2)
    assert target.is_file() and [p.name for p in tmp_path.iterdir()] == ["q4_0.gguf"]
    file_type = GGUFReader(target).fields["general.file_type"]
    assert int(file_type.parts[-1][0]) == QUANT_TYPES["Q4_0"]
    model = Model(target)
    try:
        with Engine(model, EngineConfig(n_parallel=1, n_ctx=512)) as eng:
            prompt = model.tokenize("The capital of France is", add_special=True)
            texts, dones = eng.submit(
                GenerationRequest(prompt, SamplingParams(temperature=0.0), max_tokens=4)
            ).collect()
    finally:
        model.close()
    assert dones[0].usage.completion_tokens == 4 and texts[0].strip()


def test_unknown_types_and_missing_sources_are_clear_errors(tmp_path):
    with pytest.raises(InvalidRequestError, match="known: Q4_0"):
        quantize(embedded_model_path(), tmp_path / "x.gguf", "Q3_Z")
    with pytest.raises(ModelLoadError, match="no GGUF"):
        quantize(tmp_path / "missing.gguf", tmp_path / "x.gguf", "Q8_0")
    assert list(tmp_path.iterdir()) == []
