"""The admission port's own HTTP/1.1 server, in three layers, each importing only those below it.

- ``protocol``: the connection, an asyncio Protocol over httptools (llhttp) in one explicit
  state; it parses requests, bounds their heads, and answers them one at a time, in order.
- ``endpoint``: one POST path and its handler with every bound (body, budget, slots, deadlines);
  the fast path answers a whole review without an await, the slow path with every deadline.
- ``server``: the routes (``ReviewApp``) and the listener (``ReviewServer``).

Why hand-written (issue 17): a review through aiohttp cost more server CPU than Go
controller-runtime's, and most of the gap was what aiohttp adds per request (middleware hop,
response-prepare signal, ``web.Response``, its request object); importing aiohttp is also a
large share of a webhook's start (bench/README, "Lean admission path"). This server does for
the three POST endpoints only what a review needs, and keeps every bound aiohttp gave us, plus
the ones a hand-written server owes (docs/architecture.md, "Resource model (admission port)").
"""
