"""Recall quality on public, human-written conversation sets (``python -m bench.public``).

``madial``: MADial-Bench zh and en, from ``../shared/data/madial-bench``; ``chitchat``: a
recall task built from the Chit-Chat data set (PyPI ``chitchat-dataset``, the ``bench`` extra);
``locomo``: LoCoMo-dev, from ``../shared/data/locomo-dev``, scored with windows (``windows``)
beside a plain BM25 (``bm25``);
``scoring``: the shapes every set becomes and the hit@k arithmetic; ``run``: the runner.
"""
