"""The exporter's error: tracing or shape propagation failed."""


class ExportError(RuntimeError):
    """Tracing or shape propagation failed; the message says where and what to try."""
