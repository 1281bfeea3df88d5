"""Language helpers: text clean-up, keyword terms, time ranges in queries, time stamps, tokens."""
