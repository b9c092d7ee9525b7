"""Certificates for foo-operator: a CA, serving and client certificates, and their files."""
