"""The one config check: pydantic judges the composed config against typed signatures, once per run (docs/checks.md)."""
