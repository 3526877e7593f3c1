"""The one base class of every error kvlogdiag raises on purpose.

A leaf module (imports nothing from kvlogdiag). Each layer keeps its own subclass where it is raised
(`InputError` in input/reader.py, `ConfigError` in config.py, `RuleLoadError` in rules/engine.py, …);
the command line turns any `KvlogdiagError` that reaches it into a one-line message and exit 2,
while anything else is a bug and keeps its traceback.
"""

from __future__ import annotations


class KvlogdiagError(Exception):
    """An error whose message is meant for the user: one line, naming the file/flag/rule at fault."""
