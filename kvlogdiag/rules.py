"""Rule engine (placeholder until the rules issue lands): returns no findings."""

from __future__ import annotations


def evaluate_rules(facts, analysis, options=None):
    return []
