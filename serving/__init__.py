"""How our processes serve: the admission port's own HTTP/1.1 server, the aiohttp lifecycle,
TLS and its policy, budgets and readiness, the metrics and probe listeners, and the webhook's
workers with their summed metrics. The command-line and logging pattern is componentbase's.
"""
