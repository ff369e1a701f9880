"""The deployment files (deploy/) agree with each other and with the gateway's settings.

Nothing here starts a container: the files are parsed and the invariants that a typo or a
changed default would silently break are checked. Above all the stop budget: every stop
timeout (systemd's TimeoutStopSec, compose's stop_grace_period, Kubernetes'
terminationGracePeriodSeconds) must outlast what a drain may take with the settings that
file gives the gateway (or the gateway's defaults): ASR_DRAIN_DELAY + ASR_DRAIN_TIMEOUT +
the close grace + ASR_WORKER_STOP_TIMEOUT. Past it the process is SIGKILLed mid-drain.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

import pytest

from gateway.session.closing import CLOSE_GRACE_S
from shared import settings_table as table
from tests.deploy.deploy_files import (
    COMMENTED_FILES,
    COMPOSE,
    FUNASR_PORT,
    HAPROXY_CFG,
    ROOT,
    compose,
    container_env,
    container_port,
    dockerfile,
    dockerfile_cmd,
    gateway_container,
    gateway_pod,
    gateway_services,
    haproxy_default_server,
    k8s,
    option,
    seconds,
    setting,
    stop_budget,
    unit_environment,
    unit_value,
)

# -- every file ---------------------------------------------------------------------------


@pytest.mark.parametrize("path", COMMENTED_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_file_explains_itself(path: Path) -> None:
    lines = path.read_text().splitlines()
    assert lines[0].startswith("#"), "the file opens with a comment saying what it is"
    comments = [line for line in lines if line.strip().startswith("#")]
    # A comment for roughly every few values, not a header alone.
    assert len(comments) >= max(5, len(lines) // 4), f"{len(comments)} of {len(lines)} lines"


def test_stop_budget_reads_the_gateways_defaults() -> None:
    # With nothing set, the budget is the defaults' sum; a changed default changes it.
    expected = (
        table.DRAIN_DELAY.default
        + table.DRAIN_TIMEOUT.default
        + CLOSE_GRACE_S
        + table.WORKER_STOP_TIMEOUT.default
    )
    assert stop_budget({}) == expected
    assert stop_budget({"ASR_DRAIN_TIMEOUT": "${ASR_DRAIN_TIMEOUT:-100}"}) == expected + 80


# -- systemd ------------------------------------------------------------------------------


def test_systemd_stop_timeout_outlasts_the_drain() -> None:
    timeout = seconds(unit_value("Service", "TimeoutStopSec"))
    assert timeout > stop_budget(unit_environment())


def test_systemd_signals_only_the_gateway_first() -> None:
    # mixed: SIGTERM to the main process (it drains, then stops its workers), SIGKILL to
    # what is left. control-group would SIGTERM the workers under the live sessions.
    assert unit_value("Service", "KillMode") == "mixed"
    assert unit_value("Service", "KillSignal") in ("SIGTERM", "TERM", "15")
    assert unit_value("Service", "Restart") == "on-failure"  # a drain's exit 0 stays down


def test_systemd_serves_the_draining_entry_point_on_funasr_port() -> None:
    argv = unit_value("Service", "ExecStart").split()
    assert argv[0].endswith("/bin/python")
    assert argv[1:3] == ["-m", "gateway"]  # bare uvicorn only drains as a fallback
    assert option(argv, "--host") == "0.0.0.0"
    assert int(option(argv, "--port")) == FUNASR_PORT
    assert unit_value("Service", "EnvironmentFile").lstrip("-").startswith("/etc/")
    # One fd per session: room for far more than the default ASR_MAX_SESSIONS.
    assert int(unit_value("Service", "LimitNOFILE")) >= 16 * table.MAX_SESSIONS.default


# -- Dockerfile ---------------------------------------------------------------------------


def test_dockerfile_runs_the_draining_gateway_as_pid_1() -> None:
    argv = dockerfile_cmd()
    assert argv[:3] == ["python", "-m", "gateway"]
    assert option(argv, "--host") == "0.0.0.0"
    assert int(option(argv, "--port")) == FUNASR_PORT
    assert dockerfile("STOPSIGNAL") == ["SIGTERM"]
    assert not dockerfile("ENTRYPOINT"), "a shell entrypoint would take the signal instead"


def test_dockerfile_exposes_the_gateway_and_agent_ports() -> None:
    exposed = {int(port) for args in dockerfile("EXPOSE") for port in args.split()}
    services = gateway_services().values()
    agent_ports = {int(spec["environment"]["ASR_AGENT_PORT"]) for spec in services}
    assert {FUNASR_PORT} | agent_ports <= exposed


def test_dockerfile_healthcheck_is_healthz_without_curl() -> None:
    (healthcheck,) = dockerfile("HEALTHCHECK")
    assert "CMD" in healthcheck
    assert "curl" not in healthcheck  # not in python:3.12-slim
    assert "wget" not in healthcheck
    assert f"127.0.0.1:{FUNASR_PORT}/healthz" in healthcheck  # liveness, not /readyz
    start_period = re.search(r"--start-period=(\S+)", healthcheck)
    assert start_period is not None
    # uvicorn listens only once the workers have loaded the model.
    assert seconds(start_period.group(1)) > table.WORKER_START_TIMEOUT.default


def test_dockerfile_installs_cpu_torch_unless_told_otherwise() -> None:
    args = dict(arg.partition("=")[::2] for arg in dockerfile("ARG"))
    assert args["TORCH_INDEX_URL"].endswith("/whl/cpu")
    assert any("$TORCH_INDEX_URL" in run and "torch==" in run for run in dockerfile("RUN"))
    assert args["PYTHON_IMAGE"] == "python:3.12-slim"


def test_dockerignore_keeps_what_the_dockerfile_copies() -> None:
    ignore = (ROOT / ".dockerignore").read_text().splitlines()
    allowed = {line[1:].rstrip("/") for line in ignore if line.startswith("!")}
    copied = {
        source.rstrip("/")
        for args in dockerfile("COPY")
        if not args.startswith("--from")
        for source in args.split()[:-1]
    }
    assert copied <= allowed, "a COPY source the build context would not hold"
    assert "*" in ignore  # .venv (GBs) and .git stay out


# -- Compose ------------------------------------------------------------------------------


def test_compose_replica_ids_are_the_service_names() -> None:
    services = gateway_services()
    assert len(services) >= 2
    for name, spec in services.items():
        # HAProxy names its servers after the services, and routes resumes by the id.
        assert spec["environment"]["ASR_REPLICA_ID"] == name


def test_compose_stop_grace_outlasts_the_drain() -> None:
    for name, spec in gateway_services().items():
        grace = seconds(spec["stop_grace_period"])
        assert grace > stop_budget(spec["environment"]), name


def test_compose_replicas_answer_the_agent_and_share_haproxys_maxconn() -> None:
    services = compose()["services"]
    haproxy_sessions = setting(services["haproxy"]["environment"], table.MAX_SESSIONS)
    for name, spec in gateway_services().items():
        env = spec["environment"]
        assert env["ASR_AGENT_PORT"] == "10096", name
        assert setting(env, table.MAX_SESSIONS) == haproxy_sessions, name
        assert spec["build"]["dockerfile"] == "deploy/Dockerfile"
        assert (COMPOSE.parent / spec["build"]["context"] / "pyproject.toml").is_file()


def test_the_agent_listens_where_haproxy_reaches_it() -> None:
    """The agent port listens on the server's --host unless ASR_AGENT_HOST says otherwise;
    HAProxy is another container or pod, so neither may be the loopback."""

    def agent_host(env: Mapping[str, str], argv: list[str]) -> str:
        return env.get("ASR_AGENT_HOST") or option(argv, "--host")

    hosts = [
        agent_host(spec["environment"], dockerfile_cmd()) for spec in gateway_services().values()
    ]
    if "ASR_AGENT_PORT" in container_env():
        hosts.append(agent_host(container_env(), dockerfile_cmd()))
    assert hosts
    for host in hosts:
        assert host not in ("localhost", "127.0.0.1", "::1"), host


def test_compose_haproxy_publishes_funasr_port_and_mounts_the_config_read_only() -> None:
    haproxy = compose()["services"]["haproxy"]
    assert haproxy["image"].startswith("haproxy:2.6")
    assert "./haproxy.cfg:/usr/local/etc/haproxy/haproxy.cfg:ro" in haproxy["volumes"]
    published = {str(port).split(":")[0] for port in haproxy["ports"]}
    assert {str(FUNASR_PORT), "8404"} <= published
    assert set(haproxy["depends_on"]) == set(gateway_services())
    # The replicas trust X-Forwarded-For from HAProxy's fixed address and nobody else's.
    address = haproxy["networks"]["asr"]["ipv4_address"]
    for spec in gateway_services().values():
        assert spec["environment"]["FORWARDED_ALLOW_IPS"] == address
        assert "ports" not in spec, "a published replica port bypasses HAProxy"


def test_compose_drain_delay_outlasts_haproxys_checks() -> None:
    """Sessions arriving while HAProxy has not yet seen "drain" must still be admitted."""
    if not HAPROXY_CFG.exists():
        pytest.skip("deploy/haproxy.cfg is not there yet")
    words = haproxy_default_server()

    def word_after(name: str, default: str) -> str:
        return words[words.index(name) + 1] if name in words else default

    inter = seconds(word_after("inter", "2000"), bare="ms")
    agent_inter = seconds(word_after("agent-inter", str(inter * 1000)), bare="ms")
    fall = int(word_after("fall", "3"))
    # The slower of the two ways HAProxy learns it: the agent's next poll, or `fall`
    # failed /readyz checks.
    noticed = max(agent_inter, inter * fall)
    for name, spec in gateway_services().items():
        assert float(setting(spec["environment"], table.DRAIN_DELAY)) > noticed, name


def test_compose_services_are_haproxys_servers() -> None:
    if not HAPROXY_CFG.exists():
        pytest.skip("deploy/haproxy.cfg is not there yet")
    # A server's name is `"${GWn_NAME-gwN}"`: its default is compose's service name.
    servers = {
        re.sub(r'^"\$\{\w+-([^}]*)\}"$', r"\1", line.split()[1])
        for line in HAPROXY_CFG.read_text().splitlines()
        if line.split()[:1] == ["server"]
    }
    assert servers == set(gateway_services())


# -- Kubernetes ---------------------------------------------------------------------------


def test_kubernetes_grace_period_outlasts_the_drain() -> None:
    pod = gateway_pod()
    assert "lifecycle" not in gateway_container(), "a preStop hook would spend the budget"
    assert pod["terminationGracePeriodSeconds"] > stop_budget(container_env())


def test_kubernetes_probes_point_at_readyz_and_healthz_on_the_gateway_port() -> None:
    container = gateway_container()
    assert int(option(dockerfile_cmd(), "--port")) == container_port("ws") == FUNASR_PORT
    probes = {
        kind: container[kind]["httpGet"]
        for kind in ("readinessProbe", "livenessProbe", "startupProbe")
    }
    assert probes["readinessProbe"]["path"] == "/readyz"
    assert probes["livenessProbe"]["path"] == "/healthz"
    assert probes["startupProbe"]["path"] == "/healthz"
    for probe in probes.values():
        assert container_port(probe["port"]) == FUNASR_PORT


def test_kubernetes_probe_timing() -> None:
    container = gateway_container()
    readiness, liveness, startup = (
        container[kind] for kind in ("readinessProbe", "livenessProbe", "startupProbe")
    )
    # A full or draining pod leaves the endpoints within seconds.
    assert readiness["periodSeconds"] * readiness["failureThreshold"] <= 5
    # A restart kills every session on the pod: not for a slow minute.
    assert liveness["periodSeconds"] * liveness["failureThreshold"] >= 60
    # Model load: uvicorn listens only after it.
    start_timeout = float(setting(container_env(), table.WORKER_START_TIMEOUT))
    assert startup["periodSeconds"] * startup["failureThreshold"] > start_timeout


def test_kubernetes_one_gpu_per_pod_named_after_the_pod() -> None:
    container = gateway_container()
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert container_env()["ASR_DEVICES"] == "cuda:0"
    (replica_id,) = [e for e in container["env"] if e["name"] == "ASR_REPLICA_ID"]
    assert replica_id["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"


def test_kubernetes_services_reach_the_pods() -> None:
    (workload,) = k8s("StatefulSet")
    labels = workload["spec"]["template"]["metadata"]["labels"]
    assert workload["spec"]["selector"]["matchLabels"].items() <= labels.items()
    services = {svc["metadata"]["name"]: svc["spec"] for svc in k8s("Service")}
    headless = services[workload["spec"]["serviceName"]]
    assert headless["clusterIP"] == "None"
    # Full and draining pods still take the resumes of the sessions parked on them.
    assert headless["publishNotReadyAddresses"] is True
    for spec in services.values():
        assert spec["selector"].items() <= labels.items()
        for port in spec["ports"]:
            container_port(port["targetPort"])  # names a port the container has
    (pdb,) = k8s("PodDisruptionBudget")
    assert pdb["spec"]["maxUnavailable"] == 1
    assert pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()


def test_kubernetes_ingress_outlasts_sessions_and_takes_uploads() -> None:
    (ingress,) = k8s("Ingress")
    annotations = ingress["metadata"]["annotations"]
    prefix = "nginx.ingress.kubernetes.io/"
    for timeout in ("proxy-read-timeout", "proxy-send-timeout"):
        # nginx must not end a session before the gateway's own limits do.
        assert float(annotations[prefix + timeout]) >= table.MAX_SESSION_SECONDS.default
    body = annotations[prefix + "proxy-body-size"]
    assert body.endswith("m")
    assert int(body[:-1]) << 20 >= table.TRANSCRIBE_MAX_BYTES.default
    services = {svc["metadata"]["name"] for svc in k8s("Service")}
    for rule in ingress["spec"]["rules"]:
        for path in rule["http"]["paths"]:
            assert path["backend"]["service"]["name"] in services
