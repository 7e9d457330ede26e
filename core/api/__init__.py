"""The API's conventions, shared by every app: defaults (parser), pagination (cursors), the error
shape, the permission rule, the throttles and the reads' OpenAPI entries (``schema``).
"""
