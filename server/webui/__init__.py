"""The browser face of `llamactl serve`: the chat page at `/` and offline API docs.

Every asset is a file in this package, served by llamactl itself: no CDN, no web font from
elsewhere, no build step (plain ES modules). `--no-webui` turns the page off.
"""
