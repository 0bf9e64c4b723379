"""OpenAI's API families: chat, completions, responses, audio (transcriptions and speech) and
realtime, one package each (router / protocol / serving)."""
