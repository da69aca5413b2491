"""The desk's web console: FastAPI, Jinja2 templates and htmx served from the package."""
