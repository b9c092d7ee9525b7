"""How our processes serve: the admission port's own HTTP/1.1 server, the aiohttp lifecycle,
TLS and its policy, budgets and readiness, the metrics and probe listeners, workers, and the
command-line and logging pattern every process shares.
"""
