"""Jinja2 templates (HTML, Markdown) found through jinja2.PackageLoader("triage.templates")."""
