"""The built-in rules: one TOML file per rule, named by code and slug."""
