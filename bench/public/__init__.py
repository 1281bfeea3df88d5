"""Recall quality on public, human-written conversation sets (``python -m bench.public``).

``madial``: MADial-Bench zh and en, from ``../shared/data/madial-bench``; ``chitchat``: a
recall task built from the Chit-Chat data set (PyPI ``chitchat-dataset``, the ``bench`` extra);
``locomo``: LoCoMo-dev, from ``../shared/data/locomo-dev``, scored with windows (``windows``)
beside a plain BM25 (``bm25``);
``madial.topic_change_task``: the topic change sets (``topic-zh``, ``topic-en``), each case's
message after two lines of another dialogue;
``scoring``: the shapes every set becomes and the hit@k arithmetic; ``run``: the runner;
``outcomes``: every case's hit per configuration (``--outcomes``), read by ``loso``, which
picks each setting on all sets but one and reads it on the one left out;
``evidence``: evidence any/all at the bot's own budget (the prompt's recall, rules for spending
its turns, BM25 on the same turns), with its own leave-one-set-out; ``prompt_recall_latency``:
what the prompt's recall costs beside the windows it replaced.
"""
