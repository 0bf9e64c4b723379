"""llama.cpp's own endpoints: `/tts` and the decision models' `/v1/systemone`."""
