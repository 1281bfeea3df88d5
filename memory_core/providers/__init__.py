"""The outside services: an OpenAI-compatible chat client and the embedders (API and local)."""
