"""The host's context (context.py: devices, settings, limits, logs) and its redaction (redact.py)."""
