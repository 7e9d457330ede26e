"""The request side: a request's transaction (services), the moves and history of an
instance (lifecycle), and what holds a create/start slot (slots).
"""
