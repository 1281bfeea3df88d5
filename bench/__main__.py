"""`make bench`: every benchmark in turn, each in its own process; figures go to stdout.

`python -m bench` runs the standard set (about 25–35 minutes on 2 cores; the first run of
`bench.public` also embeds ~6,600 texts of the public sets and `bench.public.ceiling` ~14,000,
cached in /tmp afterwards);
`python -m bench --full` adds the 1M-row storage run (index build included: much longer).
Copy the printed figures, with date and machine, into bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import subprocess
import sys

STANDARD = [
    ["bench.storage_bench", "--rows", "100000", "--dim", "384", "--heavy-share", "0.25"],
    ["bench.storage_bench", "--rows", "100000", "--dim", "1024", "--heavy-share", "0.25"],
    ["bench.e2e_bench"],
    ["bench.retrieval"],
    ["bench.public"],
    ["bench.public.ceiling"],
    ["bench.distilled_bench"],
    ["bench.bot_throughput", "--sessions", "200", "--messages", "3"],
    ["bench.import_bench", "--messages", "1000"],
    ["bench.console_bench", "--rows", "100000"],
    ["bench.shared_group_bench"],
    ["bench.prompt_prefix"],
    ["bench.tool_rounds"],
    ["bench.mcp_bench"],
    ["bench.pictures_bench"],
]
FULL = [
    ["bench.storage_bench", "--rows", "1000000", "--sessions", "1000", "--heavy-share", "0.05"],
]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--full", action="store_true", help="also run the 1M-row storage bench")
    args = parser.parse_args()
    failed = 0
    for module, *options in STANDARD + (FULL if args.full else []):
        print(f"\n### python -m {module} {' '.join(options)}", flush=True)
        failed += subprocess.run([sys.executable, "-m", module, *options]).returncode != 0
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
