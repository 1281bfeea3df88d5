"""The memory text of a prompt: distilled lines and recalled dialogue windows within one token
budget (``builder``), the recalled-dialogue block alone (``block``)."""
