"""Headless probe scripts (``python -m probes.<script>``): extract -> cache -> train -> report."""
