"""`llamactl tui`: a Textual app for voice and text conversations with a llamactl server.

`client` and `events` speak the realtime protocol without Textual; `audio` is the microphone
(or a file) in and the speaker out; `app` and `widgets` are the screen; `local_server` runs
the server in-process when no --url is given.
"""
