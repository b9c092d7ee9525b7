"""Certificates for foo-operator: a CA, serving and client certificates, their files and the names
every server reads them by (files.py), and the rotator that keeps them and every caBundle."""
