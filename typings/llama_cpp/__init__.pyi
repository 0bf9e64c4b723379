# Types for the part of llama-cpp-python's low-level API that llamactl's engine uses.
#
# llama-cpp-python ships py.typed, but its ctypes binding decorator is unannotated, so to mypy
# every low-level function is Any. These stubs (found through mypy_path) state what the
# bindings return at run time: ctypes gives plain ints, floats and bools for numeric results,
# an int or None for a pointer (c_void_p), bytes or None for a C string. Only the names
# llamactl uses are listed: a binding used without being declared here is a mypy error.

from .llama_cpp import *  # noqa: F403 - the package re-exports its low-level module
