"""The fault and soak suite: the real bot over a real WebSocket, on loopback, under faults.

``python -m bench.faults`` runs every scenario (``--only db-kill,hostile`` some of them) and
prints, per scenario: messages sent, answered, user turns stored, replies stored, acknowledged
user turns lost, p50 / p95 reply latency, the bot's RSS, whether it crashed and how many
processes it left behind. It exits non-zero when a target is missed: 0 acknowledged user turns
lost, 0 crashes, every reply within its deadline, no process left behind.

Each scenario starts its own ``bot.py`` (``tests.plugin.wire``) with stand-in chat, embedding
and judge servers on loopback and takes a few tens of seconds; the whole suite a few minutes.
The scenarios are in ``bench.faults.scenarios`` (outages, hostile input, oversized bodies, two
bots), ``failover`` (a primary killed or gone silent, its standby promoted), ``disk`` (a real
ENOSPC on a tmpfs: root only), ``clocks`` (two bots with skewed clocks, one killed holding
claims: needs libfaketime, ``apt-get install libfaketime``), ``attacks`` (the console and import
attacks) and ``promises`` (issue 29's parts 2-5 over the wire); ``catalogue`` names them for
``--only``, and what they share is in ``bench.faults.harness``.
"""
