"""The optional semantic answer cache: lookup by exact and near question, and its table."""
