"""Instances: GPU containers to launch, watch, stop, start, connect to and terminate."""
