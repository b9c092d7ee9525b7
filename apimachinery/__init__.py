"""What every Kubernetes API shares, as k8s.io/apimachinery holds it: objects and their views,
resources, field errors, Status, JSON bodies and the AdmissionReview and ConversionReview codec,
the name and label rules (pkg/util/validation), label and field selectors (pkg/labels,
pkg/fields), and a list answer decoded item by item as it streams.

Pure: no I/O library and no Foo. Everything else stands on it.
"""
