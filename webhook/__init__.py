"""The foo-operator webhook service: admission, conversion and the aggregated API over TLS."""
