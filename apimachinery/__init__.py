"""What every Kubernetes API shares, as k8s.io/apimachinery holds it: objects and their views,
resources, field errors, Status, JSON bodies and the AdmissionReview and ConversionReview codec.

Pure: no I/O library and no Foo. Everything else stands on it.
"""
