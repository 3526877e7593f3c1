"""kvlogdiag: read vLLM / vLLM-Ascend logs, derive exact KV-cache figures, flag wrong settings."""

__version__ = "0.1.0"
