"""The speech services several API families share: synthesis and transcription."""
