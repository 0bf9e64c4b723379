"""llamactl: a toolkit over llama.cpp: engine, CLI, server, TUI and converters."""

from llamactl.layout import install_checkout_finder

install_checkout_finder()  # from a checkout, llamactl.server & co. are the top-level folders
