"""The optional Ray probe: Ray's node and actor state over the dashboard's HTTP API, no ``ray`` import.

A component with ``probe: {ray: {url: http://HEAD:8265}}`` has, while an attempt runs, the head's
state API polled every ``interval`` seconds: ``GET /api/v0/nodes?detail=true`` and
``GET /api/v0/actors?detail=true`` filtered to ``state=DEAD`` (routes of
ray/dashboard/modules/state/state_head.py; ``filter_keys``/``filter_predicates``/``filter_values``
and ``detail`` are read by ray/dashboard/state_api_utils.py ``options_from_req``; Ray 2.60.0).
What dies during the attempt becomes a flag at once (``ray_node_died``, ``ray_actor_died``), and the
attempt's exit diagnosis names the dead actor and its node (:func:`..diagnosis.ray_state.refine`).

Ray 2.60 turns token authentication on by default: every request carries ``Authorization: Bearer
<token>`` (ray/_private/authentication/http_token_authentication.py), the token read as Ray reads
it: ``RAY_AUTH_TOKEN``, else the file ``RAY_AUTH_TOKEN_PATH``, else ``~/.ray/auth_token``
(ray/_private/authentication/authentication_token_setup.py ``_get_default_token_path``).
"""

from __future__ import annotations

import http.client
import json
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..diagnosis.ray_state import (
    RayActor,
    RayApiError,
    RayDeaths,
    RayNode,
    actor_death,
    known_dead,
    new_deaths,
    parse_actors,
    parse_nodes,
)


def auth_token(env: Mapping[str, str], token_file: str | None = None) -> str | None:
    """The token Ray's own clients would send (None: the cluster runs without token auth)."""
    if token_file:
        return _read(Path(token_file).expanduser())
    if env.get("RAY_AUTH_TOKEN", "").strip():
        return env["RAY_AUTH_TOKEN"].strip()
    if env.get("RAY_AUTH_TOKEN_PATH"):
        return _read(Path(env["RAY_AUTH_TOKEN_PATH"]).expanduser())
    return _read(Path(env.get("HOME") or Path.home()) / ".ray" / "auth_token")


def _read(p: Path) -> str | None:
    try:
        return p.read_text().strip() or None
    except OSError:
        return None


def get_json(url: str, token: str | None, timeout: float) -> Any:
    """One GET; raises OSError (unreachable, HTTP error) or RayApiError (not the API's answer)."""
    req = urllib.request.Request(url, headers={"User-Agent": "rlsup-ray-probe", "Accept": "application/json",
                                               **({"Authorization": f"Bearer {token}"} if token else {})})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:  # noqa: S310 (a URL from the user's config)
            body = resp.read(32 << 20)
    except urllib.error.HTTPError as e:
        hint = " (token auth: set RAY_AUTH_TOKEN or probe.ray.token_file)" if e.code in (401, 403) else ""
        raise OSError(f"GET {url}: HTTP {e.code}{hint}") from None
    except (urllib.error.URLError, TimeoutError) as e:
        raise OSError(f"GET {url}: {getattr(e, 'reason', e)}") from None
    except http.client.HTTPException as e:  # a torn answer (IncompleteRead, BadStatusLine): not an OSError
        raise OSError(f"GET {url}: {type(e).__name__}: {e}") from None
    try:
        return json.loads(body)
    except ValueError:
        raise RayApiError(f"GET {url}: not JSON") from None


def read_state(base: str, token: str | None, timeout: float) -> tuple[list[RayNode], list[RayActor]]:
    """Ray's nodes and its dead actors (with their death causes)."""
    base = base.rstrip("/")
    nodes = parse_nodes(get_json(base + "/api/v0/nodes?detail=true&limit=10000", token, timeout))
    actors = parse_actors(get_json(base + "/api/v0/actors?detail=true&limit=10000&filter_keys=state"
                                   "&filter_predicates=%3D&filter_values=DEAD", token, timeout))
    return nodes, actors


@dataclass
class RayTracker:
    """What one component's probe knows: which deaths were already there or already told.

    The first answer is the baseline (deaths from before: an earlier driver's actors); after it,
    every death is told once, and the deaths of the current attempt are kept for its exit."""

    url: str
    known: frozenset[str] | None = None
    nodes: dict[str, RayNode] = field(default_factory=dict)
    attempt: RayDeaths = RayDeaths()
    error: str | None = None

    def new_attempt(self) -> None:
        self.attempt = RayDeaths()

    def observe(self, nodes: list[RayNode], actors: list[RayActor]) -> RayDeaths:
        """The deaths first seen in this answer (none on the baseline)."""
        self.error = None
        self.nodes = {n.node_id: n for n in nodes}
        if self.known is None:
            self.known = known_dead(nodes, actors)
            return RayDeaths()
        fresh, self.known = new_deaths(self.known, nodes, actors)
        self.attempt = self.attempt + fresh
        return fresh

    def flags(self, fresh: RayDeaths) -> list[tuple[str, str, list[str], str]]:
        """(type, message, evidence, action) of a flag per death worth one (not an actor that died
        only because its owner did: that is the owner's death, told elsewhere)."""
        return [("ray_node_died", n.death(), [f"GET {self.url}/api/v0/nodes: {n.node_id} state DEAD"
                                              + (f" ({n.message})" if n.message else "")],
                 "the actors on that node are lost; the component that runs its raylet ends with it")
                for n in fresh.nodes] + [
                ("ray_actor_died", actor_death(a, self.nodes),
                 [f"GET {self.url}/api/v0/actors: {a.actor_id} DEAD ({a.reason or a.cause_kind or '?'})"
                  + (f": {a.error}" if a.error else "")],
                 "Ray's own death cause; a driver waiting on this actor fails or hangs")
                for a in fresh.actors if not a.consequential]


def misconfigured(err: Exception) -> bool:
    """An error no waiting cures: a refused token, or an answer that is not Ray's state API."""
    return isinstance(err, RayApiError) or " HTTP 401" in str(err) or " HTTP 403" in str(err) or " HTTP 404" in str(err)
