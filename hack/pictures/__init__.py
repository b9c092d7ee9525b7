"""The Grafana dashboard evaluated against a live plane and drawn as pictures for the docs."""
