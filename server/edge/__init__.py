"""The HTTP edge: what every request passes before any route sees it.

Who may call (the `Host` check against DNS rebinding, the `Origin` check and CORS headers),
how much a request may send and for how long (body size and receive time), a log-safe request
id, and the uvicorn options that bound connections and websocket frames. `install_middleware`
in `..middleware` puts the layers together for the server and the router alike.
"""
