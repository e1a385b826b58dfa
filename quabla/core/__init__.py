"""The IR: graphs, the primitive rule tables, tracing, and binding of primitives to values."""
