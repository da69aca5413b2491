"""tether desk."""
