"""Your SSH public keys, for the SSH gateway."""
