"""Pieces below both the engine and the converters: the error tree, the GGUF metadata reader,
the decision GGUF keys and heads (written by the converters, read by the engine).

Nothing here imports the engine, the converters, the config or a front end, and nothing talks
to llama.cpp, so every package may import these modules without a cycle.
"""
