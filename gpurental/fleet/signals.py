"""What fleet announces to the apps built on it.

Fleet sits below rentals and acceptance (they read hosts; fleet imports neither), so when
something about a host matters to them, fleet sends one of these and they answer it from
their ``AppConfig.ready``. Receivers run in the sender's thread and their errors reach the
sender (``send``, not ``send_robust``), as a direct call did.
"""

from django.dispatch import Signal

# A heartbeat was recorded (after its transaction). Arguments: ``host`` (as recorded),
# ``inventory`` (list or None), ``containers`` ({instance id: state} or None, when the beat
# carried no listing), ``containers_listed_at`` (when that listing was taken), ``workspaces``
# ({instance id: bytes} or None), ``images`` (the customer images the host caches, a list
# of {"ref", "bytes", "last_used"}, or None), ``volumes`` ({volume id: bytes} or None),
# ``now``.
# Receivers: rentals (reconcile the host's containers, check workspace sizes) and
# acceptance (a joining host's first inventory starts its benchmark), images (the host's
# cached images, which placement prefers).
heartbeat_recorded = Signal()

# Staff reactivated a host that was in maintenance while ACCEPTANCE_AFTER_MAINTENANCE is on:
# it is benchmarked before it takes placements again, instead of becoming active at once.
# Arguments: ``host`` (locked by the sender's transaction), ``actor``, ``now``.
# Receiver: acceptance (asks for the run, which moves the host to acceptance).
host_back_from_maintenance = Signal()
