"""Leave-one-set-out: every retrieval choice the bench varies, picked on all public sets but
one and read on the one left out (issue 26 part 1).

Each configuration is one ``python -m bench.public --outcomes FILE --set KEY=VALUE ...`` run
(label: its ``--set`` values, ``shipped`` without any). For each setting varied on its own
(the runs that set only that key, beside the shipped run) and for the pool of every
configuration, for each set: the configuration with the best hybrid score on the *other* sets
is picked, and its figures on the left-out set are printed beside the shipped ones and beside
the pick's best single channel there. A default moves only when its pick wins out of sample
(``MOVE_RULE``).

    python -m bench.public.loso /tmp/outcomes.jsonl
"""

from __future__ import annotations

import argparse
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.public.outcomes import read_outcomes

SHIPPED = "shipped"
FUSED = "hybrid"
SINGLES = ("vector", "keyword")
AT_K = (1, 5, 10)
# The query form read on each set: the one the bot asks with (the conversational form, the
# topic change, a LoCoMo question), whatever number of earlier lines the run gave it.
FORM_PREFIXES = ("conversation", "topic change", "question")

# set -> mode -> k -> any@k
Figures = dict[str, dict[str, dict[int, float]]]


@dataclass(frozen=True)
class Rule:
    """How a configuration is scored on the sets it is picked on, and when a pick moves the
    default: written as data so the rule itself is one reviewed line."""

    name: str
    at_k: tuple[int, ...]  # the hybrid any@k averaged, each set counting alike
    must_win_everywhere: bool  # the pick must be ≥ shipped on every left-out set, and > on one


# The rule a default moves by: the same value picked on every fold, and its left-out figures
# above the incumbent's on average over the folds. ``STRICT_RULE`` (above on every left-out set,
# never below) is printed beside it: on six sets of 160-760 cases one or two cases decide it.
MOVE_RULE = Rule("mean hybrid any@1/@5/@10, sets alike", AT_K, must_win_everywhere=False)
STRICT_RULE = Rule("the same, on every left-out set", AT_K, must_win_everywhere=True)
RULES = (MOVE_RULE, STRICT_RULE)


def settings_of(label: str) -> dict[str, str]:
    """A configuration's label (``KEY=VALUE,...`` or ``shipped``) as settings."""
    if label == SHIPPED:
        return {}
    return dict(pair.split("=", 1) for pair in label.split(",") if "=" in pair)


def primary_form(forms: Sequence[str]) -> str:
    """The form of ``FORM_PREFIXES`` a set was asked in (the first found)."""
    for prefix in FORM_PREFIXES:
        for form in forms:
            if form.startswith(prefix):
                return form
    return sorted(forms)[0]


def figures(rows: Sequence[Mapping[str, Any]]) -> dict[str, Figures]:
    """config -> set -> mode -> k -> any@k, on each set's primary form."""
    forms: dict[tuple[str, str], set[str]] = defaultdict(set)
    for row in rows:
        forms[(row["config"], row["set"])].add(row["form"])
    chosen = {key: primary_form(sorted(found)) for key, found in forms.items()}
    hits: dict[tuple[str, str, str, int], list[bool]] = defaultdict(list)
    for row in rows:
        if row["form"] == chosen[(row["config"], row["set"])]:
            hits[(row["config"], row["set"], row["mode"], row["k"])].append(bool(row["hit"]))
    out: dict[str, Figures] = defaultdict(lambda: defaultdict(dict))
    for (config, set_name, mode, k), values in hits.items():
        out[config][set_name].setdefault(mode, {})[k] = sum(values) / len(values)
    return out


def score(found: Figures, sets: Sequence[str], rule: Rule = MOVE_RULE) -> float:
    """The rule's score of one configuration over ``sets``."""
    per_set = [sum(found[s][FUSED][k] for k in rule.at_k) / len(rule.at_k) for s in sets]
    return sum(per_set) / len(per_set)


def best_single(found: Figures, set_name: str) -> dict[int, float]:
    """The best single channel's any@k on a set, k by k."""
    return {k: max(found[set_name][m][k] for m in SINGLES if m in found[set_name]) for k in AT_K}


@dataclass(frozen=True)
class Fold:
    left_out: str
    pick: str
    pick_figures: dict[int, float]
    shipped_figures: dict[int, float]
    single_figures: dict[int, float]


def folds(table: Mapping[str, Figures], configs: Sequence[str], sets: Sequence[str]) -> list[Fold]:
    """For each set, the configuration picked on the others and its figures there."""
    out = []
    for left_out in sets:
        others = [s for s in sets if s != left_out]
        # Ties go to the shipped configuration: a default moves only for a gain.
        pick = max(configs, key=lambda c: (score(table[c], others), c == SHIPPED))
        out.append(
            Fold(
                left_out,
                pick,
                {k: table[pick][left_out][FUSED][k] for k in AT_K},
                {k: table[SHIPPED][left_out][FUSED][k] for k in AT_K},
                best_single(table[pick], left_out),
            )
        )
    return out


def verdict(found: Sequence[Fold], rule: Rule = MOVE_RULE) -> str:
    """What the folds say about the shipped default."""
    picks = {f.pick for f in found}
    if picks == {SHIPPED}:
        return "the shipped value (this code's default) is picked on every fold: it is kept"
    if len(picks) > 1:
        return f"the folds pick different values ({', '.join(sorted(picks))}): the default stays"
    (pick,) = picks

    def mean(values: Mapping[int, float]) -> float:
        return sum(values[k] for k in rule.at_k) / len(rule.at_k)

    gains = [mean(f.pick_figures) - mean(f.shipped_figures) for f in found]
    average = sum(gains) / len(gains)
    if rule.must_win_everywhere and (min(gains) < 0 or max(gains) <= 0):
        return f"{pick} is picked on every fold but loses on a left-out set: the default stays"
    if not rule.must_win_everywhere and average <= 0:
        return f"{pick} is picked on every fold but loses out of sample: the default stays"
    return (
        f"{pick} is picked on every fold and wins out of sample ({average:+.3f} on average, "
        f"{min(gains):+.3f} on its worst left-out set): the default moves"
    )


def _k(values: Mapping[int, float]) -> str:
    return " / ".join(f"{values[k]:.3f}" for k in AT_K)


def report(table: Mapping[str, Figures]) -> None:
    """Print every dimension's folds and verdict, then the pool of every configuration's."""
    if SHIPPED not in table:
        raise SystemExit("no shipped run in the outcomes: run bench.public without --set first")
    sets = sorted(table[SHIPPED])
    complete = [c for c in table if all(s in table[c] for s in sets)]
    for config in sorted(set(table) - set(complete)):
        print(f"({config}: not run on every set, left out)")
    dimensions: dict[str, list[str]] = defaultdict(lambda: [SHIPPED])
    for config in complete:
        keys = list(settings_of(config))
        if len(keys) == 1:
            dimensions[keys[0]].append(config)
    dimensions["every configuration"] = sorted(complete)
    print(f"picked by: {MOVE_RULE.name}; sets: {', '.join(sets)}")
    for name, configs in dimensions.items():
        print(f"\n#### {name} ({len(configs)} values: {', '.join(configs)})\n")
        print(
            "| left out | picked on the others | its hybrid any@1/@5/@10 | shipped hybrid | "
            "its best single channel | hybrid ≥ best single |"
        )
        print("|---|---|---|---|---|---|")
        found = folds(table, configs, sets)
        for fold in found:
            above = all(fold.pick_figures[k] >= fold.single_figures[k] for k in AT_K)
            print(
                f"| {fold.left_out} | {fold.pick} | {_k(fold.pick_figures)} | "
                f"{_k(fold.shipped_figures)} | {_k(fold.single_figures)} | "
                f"{'yes' if above else 'no'} |"
            )
        print()
        for rule in RULES:
            print(f"- by {rule.name}: {verdict(found, rule)}.")
        print()
        print("Every value's hybrid any@1/@5/@10 on each set (in sample and out):\n")
        print("| set | " + " | ".join(configs) + " |")
        print("|---|" + "---|" * len(configs))
        for set_name in sets:
            cells = [_k(table[c][set_name][FUSED]) for c in configs]
            print(f"| {set_name} | " + " | ".join(cells) + " |")
    print("\n#### The shipped configuration, every set\n")
    print("| set | hybrid any@1/@5/@10 | vector | keyword | hybrid ≥ best single |")
    print("|---|---|---|---|---|")
    for set_name in sets:
        found_set = table[SHIPPED][set_name]
        single = best_single(table[SHIPPED], set_name)
        above = all(found_set[FUSED][k] >= single[k] for k in AT_K)
        cells = [_k(found_set[m]) if m in found_set else "–" for m in (FUSED, *SINGLES)]
        print(f"| {set_name} | {' | '.join(cells)} | {'yes' if above else 'no'} |")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("outcomes", nargs="+", type=Path, help="--outcomes files of the runs")
    args = parser.parse_args(argv)
    report(figures(read_outcomes(args.outcomes)))


if __name__ == "__main__":
    main()
