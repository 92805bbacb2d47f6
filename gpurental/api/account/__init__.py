"""Your account: who you are (/me/) and your API keys."""
