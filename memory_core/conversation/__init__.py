"""One chat turn: the engine (store, recall, prompt, model, reply), the context and prompt text."""
