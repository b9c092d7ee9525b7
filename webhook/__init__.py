"""The foo-operator webhook service: admission and conversion over TLS (the aggregated API is `insights`)."""
