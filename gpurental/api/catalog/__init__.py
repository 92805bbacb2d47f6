"""The catalog: GPU models, plans and images (read-only, the same for everyone)."""
