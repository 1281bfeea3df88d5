"""Operator-editable defaults (prompts, retention bands, preloaded answers), shipped inside the
core as ``memory_core.defaults``; settings can point each at a file of the operator's own."""
