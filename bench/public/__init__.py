"""Recall quality on public, human-written conversation sets (``python -m bench.public``).

``madial``: MADial-Bench zh and en, from ``../shared/data/madial-bench``; ``chitchat``: a
recall task built from the Chit-Chat data set (PyPI ``chitchat-dataset``, the ``bench`` extra);
``scoring``: the shapes every set becomes and the hit@k arithmetic; ``run``: the runner.
"""
