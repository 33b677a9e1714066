"""The Ray probe's parser, on answers recorded from a real Ray 2.60.0 (tests/fixtures/ray-state-2.60.0)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlsup.supervisor.diagnosis import diagnose
from rlsup.supervisor.diagnosis.offline import read_tail
from rlsup.supervisor.diagnosis.ray_state import (
    RayApiError,
    RayDeaths,
    actor_death,
    new_deaths,
    parse_actors,
    parse_nodes,
    refine,
)
from rlsup.supervisor.run.rayprobe import RayTracker, auth_token

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "ray-state-2.60.0"
URL = "http://head:8265"


def load(name: str) -> bytes:
    return (FIX / name).read_bytes()


def test_nodes_are_parsed_with_why_ray_declared_one_dead():
    nodes = {n.node_id[:8]: n for n in parse_nodes(load("nodes_worker_dead.json"))}
    assert set(nodes) == {"7e321a46", "dff5d0e6"}
    dead, head = nodes["7e321a46"], nodes["dff5d0e6"]
    assert dead.state == "DEAD" and not dead.is_head and dead.ip == "192.0.2.2"
    assert dead.message == "Unexpected termination: health check failed due to missing too many heartbeats"
    assert head.state == "ALIVE" and head.is_head and head.message is None
    assert dead.death() == ("Ray node 7e321a46 (192.0.2.2) is DEAD: Unexpected termination: health check failed "
                            "due to missing too many heartbeats")


def test_alive_actors_have_no_death_cause():
    actors = parse_actors(load("actors_alive.json"))
    assert [(a.name, a.state, a.reason, a.pid) for a in actors] == [
        ("learner-0", "ALIVE", None, 1635), ("learner-1", "ALIVE", None, 1591)]


def test_an_actor_lost_with_its_node_is_named_with_the_node_and_why():
    nodes = {n.node_id: n for n in parse_nodes(load("nodes_two_workers_dead.json"))}
    actors = parse_actors(load("actors_dead_node_died.json"))
    by_reason = {a.reason for a in actors}
    assert by_reason == {"OWNER_DIED", "NODE_DIED"}
    lost = next(a for a in actors if a.reason == "NODE_DIED")
    assert lost.name == "learner-0" and lost.pid == 2675 and lost.node_death.get("reason") == "UNEXPECTED_TERMINATION"
    assert lost.error and lost.error.startswith("The actor died because its node has died.")
    text = actor_death(lost, nodes)
    assert text.startswith("Ray actor learner-0 (Learner, pid 2675) died: its node died (Ray node 316ca70c "
                           "(192.0.2.2) is DEAD: Unexpected termination: health check failed")


def test_an_actor_whose_owner_died_is_a_consequence():
    actors = parse_actors(load("actors_dead_owner_died.json"))
    assert all(a.consequential for a in actors)
    d = RayDeaths(actors=tuple(actors))
    assert d.causes() == actors
    text = actor_death(actors[0], {})
    assert "The actor is dead because its owner has died" in text


def test_only_deaths_after_the_baseline_are_told_once():
    nodes = parse_nodes(load("nodes_worker_dead.json"))
    w = RayTracker(URL)
    # The baseline: the first run's dead worker and actors were there before this attempt.
    assert not w.observe(nodes, parse_actors(load("actors_dead_owner_died.json")))
    w.new_attempt()
    fresh = w.observe(parse_nodes(load("nodes_two_workers_dead.json")), parse_actors(load("actors_dead_node_died.json")))
    assert [n.short for n in fresh.nodes] == ["316ca70c"]
    assert sorted(a.name for a in fresh.actors) == ["learner-0", "learner-1"]  # this job's two
    flags = w.flags(fresh)
    kinds = [f[0] for f in flags]
    assert kinds == ["ray_node_died", "ray_actor_died"]  # learner-1 died of its owner: no flag of its own
    assert "learner-0" in flags[1][1] and "316ca70c" in flags[1][1]
    # The same answer again tells nothing new.
    again = w.observe(parse_nodes(load("nodes_two_workers_dead.json")), parse_actors(load("actors_dead_node_died.json")))
    assert not again
    assert len(w.attempt.actors) == 2


def test_new_deaths_is_pure():
    nodes = parse_nodes(load("nodes_worker_dead.json"))
    d, known = new_deaths(frozenset(), nodes, [])
    assert [n.short for n in d.nodes] == ["7e321a46"] and known == {f"node:{nodes[0].node_id}"}
    d2, known2 = new_deaths(known, nodes, [])
    assert not d2 and known2 == known


def test_the_drivers_exit_diagnosis_names_the_actor_and_its_node():
    """The driver's own log says ActorDiedError; the probe adds which node and why Ray declared it dead."""
    log = read_tail(FIX / "driver_actor_died_node.log")
    base = diagnose(log, exit_code=1).to_dict()
    # The real tail ends with raylet lines about broken connections after the ActorDiedError: read alone,
    # the log is taken for a refused connection (a symptom); Ray's own record outranks it.
    assert base["category"] in ("ray_actor_died", "connection_refused")
    nodes = parse_nodes(load("nodes_two_workers_dead.json"))
    actors = parse_actors(load("actors_dead_node_died.json"))
    deaths = RayDeaths(nodes=tuple(n for n in nodes if n.node_id.startswith("316ca70c")),
                       actors=tuple(a for a in actors if a.job_id == "02000000"))
    out = refine(base, deaths, {n.node_id: n for n in nodes}, URL)
    assert out["category"] == "ray_actor_died"
    assert out["summary"].startswith("Ray actor learner-0 (Learner, pid 2675) died: its node died (Ray node 316ca70c")
    assert "health check failed" in out["summary"]
    assert [a["name"] for a in out["ray"]["dead_actors"]] == ["learner-0", "learner-1"]  # the cause first
    assert out["ray"]["dead_nodes"][0]["node_id"].startswith("316ca70c")
    assert any(e.startswith(f"{URL}/api/v0/actors: Ray actor learner-0") for e in out["evidence"])
    assert out["exception"] == base["exception"] and out["location"] == base["location"]


def test_a_cause_the_program_printed_stays_first():
    base = {"category": "cuda_oom", "summary": "CUDA out of memory", "exception": "torch.OutOfMemoryError",
            "location": None, "step": 3, "evidence": []}
    nodes = parse_nodes(load("nodes_worker_dead.json"))
    out = refine(base, RayDeaths(nodes=tuple(n for n in nodes if n.state == "DEAD")), {}, URL)
    assert out["category"] == "cuda_oom" and out["summary"] == "CUDA out of memory"
    assert out["ray"]["dead_nodes"] and out["evidence"]


def test_nothing_dead_changes_nothing():
    base = {"category": "unknown", "summary": "exit 1", "evidence": []}
    assert refine(base, RayDeaths(), {}, URL) == base


@pytest.mark.parametrize("body, msg", [
    (b"<html>", "not JSON"),
    (b'{"x": 1}', "no 'result'"),
    (json.dumps({"result": False, "msg": "Max number of in-progress requests=100 reached", "data": None}).encode(),
     "Max number of in-progress requests"),
    (b'{"result": true, "msg": "", "data": {"result": {"result": 3}}}', "no list of rows"),
])
def test_answers_that_are_not_the_state_api_are_errors(body, msg):
    with pytest.raises(RayApiError, match=msg):
        parse_nodes(body)


def test_token_is_read_as_ray_reads_it(tmp_path):
    (tmp_path / ".ray").mkdir()
    (tmp_path / ".ray" / "auth_token").write_text("home-token\n")
    (tmp_path / "t").write_text("path-token")
    assert auth_token({"HOME": str(tmp_path)}) == "home-token"
    assert auth_token({"HOME": str(tmp_path), "RAY_AUTH_TOKEN_PATH": str(tmp_path / "t")}) == "path-token"
    assert auth_token({"HOME": str(tmp_path), "RAY_AUTH_TOKEN": "env-token",
                       "RAY_AUTH_TOKEN_PATH": str(tmp_path / "t")}) == "env-token"
    assert auth_token({"HOME": str(tmp_path), "RAY_AUTH_TOKEN": "env"}, str(tmp_path / "t")) == "path-token"
    assert auth_token({"HOME": str(tmp_path / "nowhere")}) is None


def test_a_refused_token_is_a_misconfigured_probe_an_unreachable_head_is_not():
    import http.server
    import threading

    from rlsup.supervisor.run.rayprobe import get_json, misconfigured

    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # Ray 2.60's answer without a token (http_token_authentication.py)
            body = b"Unauthorized: Missing authentication token"
            self.send_response(401)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a):
            pass

    srv = http.server.HTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        with pytest.raises(OSError) as ei:
            get_json(f"http://127.0.0.1:{srv.server_port}/api/v0/nodes", None, 5)
        assert "HTTP 401" in str(ei.value) and "RAY_AUTH_TOKEN" in str(ei.value) and misconfigured(ei.value)
    finally:
        srv.shutdown()
        srv.server_close()
    with pytest.raises(OSError) as ei:
        get_json(f"http://127.0.0.1:{srv.server_port}/api/v0/nodes", None, 2)
    assert not misconfigured(ei.value)  # nothing listening: the head is not up (yet), not news
