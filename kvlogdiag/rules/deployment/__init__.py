"""The deployment rules: one TOML file per rule (KVD1xx), evaluated over a whole P/D deployment (rules/deployment_rules.py)."""
