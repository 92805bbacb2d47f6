"""Operator observability: Prometheus series (DCGM-named per-GPU gauges and the control
plane's own ``gpurental_*`` series), structured logs with request, instance and host ids."""
