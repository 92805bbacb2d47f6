"""Host-side code: runtime backends, GPU sources, host tasks, sampler. Imports no models."""
