"""What every foo-operator command shares, as k8s.io/component-base holds it for Kubernetes'
own: the command-line pattern (flags, their types, one-line mistakes), logging, and the escaping
of a tenant's text before it reaches a log line or a terminal. Stdlib only: the bottom layer,
beside apimachinery, so every package may use it.
"""
