"""Comparing arms: statistics, the tuned two-stage comparison, cluster jobs."""
