"""The container spec: a template's fields, checked (resolve), and turned into the spec a
worker runs; env policy, hardening, mounts, image references and redaction of secrets.
"""
