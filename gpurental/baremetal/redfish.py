"""The BMC adapter: power state and power actions over Redfish, with ``sushy``.

The rest of the code calls ``BMC`` (``power_state``, ``power_on``, ``power_off``,
``power_cycle``) and never imports sushy. Errors come out as ``BMCError`` with a
message an operator can act on.
"""

from __future__ import annotations

from dataclasses import dataclass

import sushy
from sushy import exceptions as sushy_exceptions

TIMEOUT_S = 10

# Redfish ResetType for each action. A power cycle asks for PowerCycle where the system
# offers it, and ForceRestart otherwise (what many BMCs call a cold reset).
_ON, _OFF = sushy.ResetType.ON, sushy.ResetType.FORCE_OFF
_CYCLE_PREFERENCE = (sushy.ResetType.POWER_CYCLE, sushy.ResetType.FORCE_RESTART)


class BMCError(Exception):
    """The BMC could not be reached, refused the login, or refused the action."""


@dataclass(frozen=True)
class BMC:
    url: str  # the service root, e.g. https://10.0.0.5 (the adapter adds /redfish/v1)
    username: str
    password: str
    system_id: str = ""  # e.g. /redfish/v1/Systems/1; empty = the only system
    verify_tls: bool = True

    def _system(self):
        root = self.url.rstrip("/").removesuffix("/redfish/v1")
        try:
            conn = sushy.Sushy(
                root,
                verify=self.verify_tls,
                # Basic auth on every request: no session to leak or expire between calls.
                auth=sushy.auth.BasicAuth(self.username, self.password),
                read_timeout=TIMEOUT_S,
                connect_timeout=TIMEOUT_S,
                server_side_retries=1,
                server_side_retries_delay=1,
            )
            if self.system_id:
                return conn.get_system(self.system_id)
            members = conn.get_system_collection().get_members()
        except sushy_exceptions.AccessError as exc:
            raise BMCError(f"the BMC at {self.url} refused the login: {exc}") from exc
        except (sushy_exceptions.SushyError, OSError) as exc:
            raise BMCError(f"the BMC at {self.url} did not answer as Redfish: {exc}") from exc
        if len(members) != 1:
            raise BMCError(
                f"the BMC at {self.url} manages {len(members)} systems: set the system id"
            )
        return members[0]

    def power_state(self) -> str:
        """Redfish's PowerState: "On", "Off", "PoweringOn" or "PoweringOff"; or BMCError."""
        system = self._system()
        try:
            system.refresh()
        except sushy_exceptions.SushyError as exc:
            raise BMCError(f"reading the power state failed: {exc}") from exc
        return system.power_state.value if system.power_state else ""

    def _reset(self, wanted: tuple[str, ...], what: str) -> None:
        system = self._system()
        try:
            allowed = system.get_allowed_reset_system_values()
        except sushy_exceptions.SushyError:
            allowed = set()
        reset = next((r for r in wanted if not allowed or r in allowed), None)
        if reset is None:
            raise BMCError(f"the BMC offers no way to {what} (it allows {sorted(allowed)})")
        try:
            system.reset_system(reset)
        except sushy_exceptions.SushyError as exc:
            raise BMCError(f"the BMC refused to {what}: {exc}") from exc

    def power_on(self) -> None:
        self._reset((_ON,), "power on")

    def power_off(self) -> None:
        self._reset((_OFF,), "power off")

    def power_cycle(self) -> None:
        self._reset(_CYCLE_PREFERENCE, "power cycle")
