"""Models as sweeps, reports and serving name them: the typed model name (`names`)."""
