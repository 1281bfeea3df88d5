"""Every case's hit or miss, kept per configuration so that choices can be read out of sample
(``bench.public.loso``): one JSON line a configuration, set, case, query form, mode and k."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any


def outcome(set_name: str, case: str, form: str, mode: str, k: int, hit: bool) -> dict[str, Any]:
    """One recall's outcome: did any relevant unit come among the first k."""
    return {"set": set_name, "case": case, "form": form, "mode": mode, "k": k, "hit": hit}


def write_outcomes(path: Path, config: str, rows: Sequence[dict[str, Any]]) -> None:
    """Append ``rows`` to ``path``, each labelled with the run's configuration, replacing any
    rows of the same configuration and set that an earlier run wrote there."""
    sets = {row["set"] for row in rows}
    kept: list[str] = []
    if path.exists():
        for line in path.read_text(encoding="utf-8").splitlines():
            old = json.loads(line)
            if not (old["config"] == config and old["set"] in sets):
                kept.append(line)
    new = [json.dumps({"config": config, **row}, ensure_ascii=False) for row in rows]
    path.write_text("".join(line + "\n" for line in [*kept, *new]), encoding="utf-8")
    print(f"{len(new)} outcomes of {config!r} written to {path}")


def read_outcomes(paths: Sequence[Path]) -> list[dict[str, Any]]:
    """Every row of the files, in order."""
    rows: list[dict[str, Any]] = []
    for path in paths:
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                rows.append(json.loads(line))
    return rows
