"""Renderers of the report dict (installed as ``advisor.reports``): terminal, and more to come."""
