"""A group's spec: JSON, YAML or the source article's HCL block, checked and normalised.

All three formats use one vocabulary, the article's:

    resource "elastic_gpu" "inference" {
      min_nodes     = 1
      max_nodes     = 10
      scaling_metrics {
        metric = "gpu_utilization"
        threshold = 70
      }
      warm_pool {
        size = 2
        instance_type = "A10"
      }
    }

plus, all optional: ``image`` (an image slug; default GROUP_DEFAULT_IMAGE), ``port`` (the
port replicas serve on; default the image's first declared HTTP port), ``gpu_count``
(default 1), ``instance_type`` at the top level, more ``scaling_metrics`` blocks
(``queue``, with a threshold of requests per replica), ``schedule`` blocks
(``cron`` and ``min_nodes``), ``cooldown { scale_up = 30, scale_down = 300 }`` (seconds),
``prewarm_lead_minutes``, ``max_concurrency``, ``queue_size`` and ``zones`` (a list of
zone names: replicas are spread over them, the fewest-used zone first). In JSON and YAML the
name is a ``name`` key beside them.

Every problem is a ``SpecError`` naming the field (``scaling_metrics[0].metric``) and the
rule it breaks; nothing is changed by a spec that has one.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.utils.translation import gettext as _

from gpurental.groups.models import MAX_REPLICAS
from gpurental.rentals.exceptions import RentalError

METRICS = ("gpu_utilization", "queue", "schedule")
KNOWN_KEYS = {
    "name",
    "image",
    "port",
    "instance_type",
    "gpu_count",
    "min_nodes",
    "max_nodes",
    "scaling_metrics",
    "schedule",
    "warm_pool",
    "cooldown",
    "prewarm_lead_minutes",
    "max_concurrency",
    "queue_size",
    "zones",
}
NAME_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,49}$")


class SpecError(RentalError):
    code = "invalid_spec"


@dataclass
class Rule:
    metric: str
    threshold: float | None = None
    cron: str = ""
    min_replicas: int | None = None

    def as_dict(self) -> dict:
        if self.metric == "schedule":
            return {"metric": "schedule", "cron": self.cron, "min_nodes": self.min_replicas}
        return {"metric": self.metric, "threshold": self.threshold}


@dataclass
class Spec:
    name: str
    image: str
    instance_type: str
    gpu_count: int = 1
    port: int | None = None
    min_replicas: int = 1
    max_replicas: int = 4
    rules: list[Rule] = field(default_factory=list)
    warm_pool_size: int = 0
    scale_up_cooldown_s: int = 30
    scale_down_cooldown_s: int = 300
    prewarm_lead_minutes: int = 15
    max_concurrency: int = 4
    queue_size: int = 100
    zones: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        """The normalised spec, in the vocabulary it was written in (JSON-ready)."""
        return {
            "name": self.name,
            "image": self.image,
            "instance_type": self.instance_type,
            "gpu_count": self.gpu_count,
            "port": self.port,
            "min_nodes": self.min_replicas,
            "max_nodes": self.max_replicas,
            "scaling_metrics": [r.as_dict() for r in self.rules if r.metric != "schedule"],
            "schedule": [r.as_dict() for r in self.rules if r.metric == "schedule"],
            "warm_pool": {"size": self.warm_pool_size},
            "cooldown": {
                "scale_up": self.scale_up_cooldown_s,
                "scale_down": self.scale_down_cooldown_s,
            },
            "prewarm_lead_minutes": self.prewarm_lead_minutes,
            "max_concurrency": self.max_concurrency,
            "queue_size": self.queue_size,
            **({"zones": list(self.zones)} if self.zones else {}),
        }


# --- formats -------------------------------------------------------------------


def load(source: str | bytes | dict, fmt: str | None = None) -> dict:
    """The raw spec (a dict) from JSON, YAML or HCL text, or a dict as it is."""
    if isinstance(source, dict):
        return source
    text = source.decode() if isinstance(source, bytes) else source
    fmt = (fmt or _guess(text)).lower()
    if fmt == "json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise SpecError(_("not valid JSON: %(error)s") % {"error": exc}, field="spec") from exc
    elif fmt in ("yaml", "yml"):
        import yaml

        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise SpecError(_("not valid YAML: %(error)s") % {"error": exc}, field="spec") from exc
    elif fmt in ("hcl", "tf"):
        data = _from_hcl(text)
    else:
        raise SpecError(
            _("format %(format)r is not one of json, yaml, hcl") % {"format": fmt}, field="format"
        )
    if not isinstance(data, dict):
        raise SpecError(_("a spec is a mapping of settings (a JSON object)"), field="spec")
    return data


def _guess(text: str) -> str:
    stripped = text.lstrip()
    if stripped.startswith("{"):
        return "json"
    if re.match(r'^(#.*\n\s*)*resource\s+"', stripped):
        return "hcl"
    return "yaml"


def _from_hcl(text: str) -> dict:
    import hcl2
    from lark.exceptions import LarkError

    try:
        document = hcl2.loads(text)
    except (LarkError, ValueError, KeyError) as exc:
        where = getattr(exc, "line", None)
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        if where:
            message = _("HCL syntax error at line %(line)s: %(error)s") % {
                "line": where,
                "error": first,
            }
        else:
            message = _("HCL syntax error: %(error)s") % {"error": first}
        raise SpecError(message, field="spec") from exc
    resources = []
    for block in document.get("resource", []):
        for kind, named in block.items():
            for name, body in named.items():
                resources.append((_unquote(kind), _unquote(name), body))
    groups = [(name, body) for kind, name, body in resources if kind == "elastic_gpu"]
    if len(groups) != 1:
        kinds = sorted({kind for kind, _, _ in resources}) or ["none"]
        raise SpecError(
            _(
                'exactly one resource "elastic_gpu" "<name>" { … } block is needed; found '
                "%(found)s (resource kinds: %(kinds)s)"
            )
            % {"found": len(groups), "kinds": ", ".join(kinds)},
            field="spec",
        )
    name, body = groups[0]
    return {"name": name, **_plain(body)}


def _unquote(value: Any) -> Any:
    if isinstance(value, str) and len(value) >= 2 and value[0] == value[-1] == '"':
        return value[1:-1]
    return value


def _plain(value: Any) -> Any:
    """python-hcl2's output without its quoting and block markers."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items() if k != "__is_block__"}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return _unquote(value)


# --- checking ----------------------------------------------------------------


def _int(data: dict, key: str, default: int, *, low: int, high: int, where: str = "") -> int:
    value = data.get(key, default)
    path = f"{where}{key}"
    if isinstance(value, bool) or not isinstance(value, int | float) or value != int(value):
        raise SpecError(_("%(value)r is not a whole number") % {"value": value}, field=path)
    value = int(value)
    if not low <= value <= high:
        raise SpecError(
            _("%(value)s is outside %(low)s–%(high)s") % {"value": value, "low": low, "high": high},
            field=path,
        )
    return value


def _blocks(data: dict, key: str) -> list[dict]:
    value = data.get(key, [])
    if isinstance(value, dict):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        raise SpecError(_("expected a block (or a list of blocks) of settings"), field=key)
    return value


def _zones(value) -> list[str]:
    """A list of distinct zone names (whether each exists is the catalog's to say)."""
    if not isinstance(value, list):
        raise SpecError(_('a list of zone names, e.g. ["zone-a", "zone-b"]'), field="zones")
    for i, name in enumerate(value):
        if not isinstance(name, str) or not name or name in value[:i]:
            raise SpecError(
                _("%(name)r is not a zone name, or is named twice") % {"name": name},
                field=f"zones[{i}]",
            )
    return list(value)


def check(raw: dict) -> Spec:
    """Check a raw spec against every rule; the normalised Spec, or SpecError."""
    unknown = sorted(set(raw) - KNOWN_KEYS)
    if unknown:
        raise SpecError(
            _("unknown setting %(setting)r; known: %(known)s")
            % {"setting": unknown[0], "known": ", ".join(sorted(KNOWN_KEYS))},
            field=unknown[0],
        )
    name = raw.get("name")
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise SpecError(
            _(
                "%(name)r is not a group name: 1–50 lowercase letters, digits and hyphens, "
                "starting with a letter or digit"
            )
            % {"name": name},
            field="name",
        )
    warm = raw.get("warm_pool") or {}
    if isinstance(warm, list):
        warm = warm[0] if len(warm) == 1 else None
    if not isinstance(warm, dict):
        raise SpecError(_("one warm_pool block at most"), field="warm_pool")
    instance_type = raw.get("instance_type") or warm.get("instance_type")
    if not isinstance(instance_type, str) or not instance_type:
        raise SpecError(
            _(
                "say which GPU: instance_type (at the top or in warm_pool), a GPU model's "
                "short name or slug"
            ),
            field="instance_type",
        )
    image = raw.get("image", settings.GROUP_DEFAULT_IMAGE)
    if not isinstance(image, str) or not image:
        raise SpecError(_("an image slug is needed"), field="image")
    port = raw.get("port")
    if port is not None:
        port = _int(raw, "port", 0, low=1, high=65535)
    spec = Spec(
        name=name,
        image=image,
        instance_type=instance_type,
        gpu_count=_int(raw, "gpu_count", 1, low=1, high=16),
        port=port,
        min_replicas=_int(raw, "min_nodes", 1, low=0, high=MAX_REPLICAS),
        max_replicas=_int(raw, "max_nodes", 4, low=1, high=MAX_REPLICAS),
        warm_pool_size=_int(warm, "size", 0, low=0, high=MAX_REPLICAS, where="warm_pool."),
        prewarm_lead_minutes=_int(raw, "prewarm_lead_minutes", 15, low=0, high=24 * 60),
        max_concurrency=_int(raw, "max_concurrency", 4, low=1, high=1000),
        queue_size=_int(raw, "queue_size", 100, low=0, high=100_000),
    )
    spec.zones = _zones(raw.get("zones", []))
    if spec.min_replicas > spec.max_replicas:
        raise SpecError(
            _("min_nodes (%(min)s) is more than max_nodes (%(max)s)")
            % {"min": spec.min_replicas, "max": spec.max_replicas},
            field="min_nodes",
        )
    cooldown = raw.get("cooldown") or {}
    if isinstance(cooldown, list):
        cooldown = cooldown[0] if len(cooldown) == 1 else None
    if not isinstance(cooldown, dict):
        raise SpecError(_("one cooldown block at most"), field="cooldown")
    spec.scale_up_cooldown_s = _int(cooldown, "scale_up", 30, low=0, high=3600, where="cooldown.")
    spec.scale_down_cooldown_s = _int(
        cooldown, "scale_down", 300, low=0, high=24 * 3600, where="cooldown."
    )
    for i, block in enumerate(_blocks(raw, "scaling_metrics")):
        where = f"scaling_metrics[{i}]"
        metric = block.get("metric")
        if metric not in ("gpu_utilization", "queue"):
            raise SpecError(
                _(
                    "unknown metric %(metric)r; scaling_metrics take gpu_utilization or queue "
                    "(schedules go in schedule blocks)"
                )
                % {"metric": metric},
                field=f"{where}.metric",
            )
        threshold = block.get("threshold")
        high = 100 if metric == "gpu_utilization" else 10_000
        if (
            isinstance(threshold, bool)
            or not isinstance(threshold, int | float)
            or not (0 < threshold <= high)
        ):
            raise SpecError(
                _("%(threshold)r is not a threshold above 0 and at most %(high)s")
                % {"threshold": threshold, "high": high},
                field=f"{where}.threshold",
            )
        spec.rules.append(Rule(metric, threshold=float(threshold)))
    for i, block in enumerate(_blocks(raw, "schedule")):
        where = f"schedule[{i}]"
        cron = block.get("cron")
        if not isinstance(cron, str) or not _cron_ok(cron):
            raise SpecError(
                _(
                    "%(cron)r is not a cron expression (minute hour day month weekday, e.g. "
                    '"* 9-17 * * 1-5")'
                )
                % {"cron": cron},
                field=f"{where}.cron",
            )
        floor = _int(block, "min_nodes", 0, low=0, high=MAX_REPLICAS, where=f"{where}.")
        if floor > spec.max_replicas:
            raise SpecError(
                _("%(floor)s is more than max_nodes (%(max)s)")
                % {"floor": floor, "max": spec.max_replicas},
                field=f"{where}.min_nodes",
            )
        spec.rules.append(Rule("schedule", cron=cron, min_replicas=floor))
    return spec


def _cron_ok(expression: str) -> bool:
    from croniter import croniter

    return len(expression.split()) == 5 and croniter.is_valid(expression)
