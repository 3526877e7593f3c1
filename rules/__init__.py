"""kvlogdiag's built-in rules: one TOML file per rule (this file only makes the folder package data)."""
