"""pytest plugin: kafka-python's own integration tests against a running
syncline cluster.

Loaded with ``-p syncline_cluster`` (this directory on PYTHONPATH) by
crates/e2e/tests/e2e/kafka_python_suite.rs, which starts the cluster, runs pytest in
the unpacked kafka-python sdist (scripts/kafka-python-tests.sh fetch) and reads
the report this plugin writes. What runs and why: SELECTION.md beside it.

kafka-python's integration conftest (test/integration/conftest.py) starts a
real Kafka (and for versions before 4.0 a ZooKeeper) in its fixtures
``kafka_broker_factory`` and ``zookeeper``. This plugin replaces those two:
``kafka_broker_factory`` returns the syncline cluster (so the conftest's own
``kafka_broker``, ``topic``, ``producer``, ``kafka_producer_factory``,
``send_messages`` and ``consumer_group`` run unchanged on it, topics created by
the suite's own ``create_topics`` through kafka-python's admin client), and
``zookeeper`` refuses to start anything. One more is wrapped:
``kafka_consumer_factory``, whose consumers could otherwise lose their
subscription to a race inside kafka-python (the fixture's docstring below).

Environment (all set by the Rust test):

  SYNCLINE_KAFKA_BOOTSTRAP   the cluster's Kafka listeners, host:port,...
  SYNCLINE_BOOTSTRAP         its own listeners (for the syncline CLI)
  SYNCLINE_CLI               the syncline CLI: after a failed test, the
                             cluster and the topics the test made (leaders,
                             epochs, ISR, high watermarks) are added to its
                             report
  SYNCLINE_TOPIC_PARTITIONS  partitions of the topics the ``topic`` fixture
                             creates (the suite's default is 4)
  SYNCLINE_TOPIC_REPLICAS    and their replication factor
  SYNCLINE_KAFKA_PYTHON_REPORT  where the JSON report goes
  KAFKA_VERSION              read by the suite itself (test/testutil.py)
"""

import contextlib
import importlib.machinery
import importlib.util
import inspect
import json
import os
import subprocess
import sys
import time

import pytest

# What is deselected, with the reason (SELECTION.md says more). Node ids are
# relative to the sdist's root, where pytest runs.
DESELECTED = {
    "test/integration/test_producer_integration.py::test_transactional_producer_messages":
        "transactions are not served (InitProducerId with a transactional id is "
        "refused; no AddPartitionsToTxn, EndTxn or transaction coordinator)",
    "test/integration/test_producer_integration.py::test_transactional_producer_offsets":
        "transactions are not served (no AddOffsetsToTxn or TxnOffsetCommit)",
}

# Known gaps, each run as xfail(strict=True): it must fail, and a pass is an
# error (the gap is gone: remove it here and in SELECTION.md). None at present.
XFAIL = {}

# Bound on one syncline CLI call of the failure diagnostics.
CLI_TIMEOUT_S = 10


def _required(name):
    value = os.environ.get(name)
    if not value:
        raise pytest.UsageError(
            "syncline_cluster: %s is not set (crates/e2e/tests/e2e/kafka_python_suite.rs "
            "sets it; run that test)" % name)
    return value


def _install_test_package():
    """Makes ``test`` the sdist's test/ directory.

    The suite imports its helpers as ``test.testutil`` and
    ``test.integration.fixtures``, but the sdist ships neither test/__init__.py
    nor test/service.py (kafka-python's repository has both), so ``import test``
    would find the standard library's regression-test package, and
    ``test.integration.fixtures`` could not import ``test.service``. The package
    is made here from the directory, with the settings of the repository's
    test/__init__.py (failures inside future callbacks are raised, not logged:
    ``Future.error_on_callbacks``), and ``test.service`` (the classes that run
    or wrap a broker process) as a stand-in that refuses to start anything:
    the cluster is syncline's, started by the Rust test.
    """
    test_dir = os.path.join(os.getcwd(), "test")
    if not os.path.isfile(os.path.join(test_dir, "integration", "conftest.py")):
        raise pytest.UsageError(
            "syncline_cluster: no test/integration/conftest.py in %s: run pytest in "
            "the unpacked kafka-python sdist (scripts/kafka-python-tests.sh fetch)"
            % os.getcwd())
    spec = importlib.machinery.ModuleSpec("test", None, is_package=True)
    spec.submodule_search_locations = [test_dir]
    package = importlib.util.module_from_spec(spec)
    sys.modules["test"] = package

    service = importlib.util.module_from_spec(
        importlib.machinery.ModuleSpec("test.service", None))

    class _NoService:
        def __init__(self, *args, **kwargs):
            raise RuntimeError(
                "syncline_cluster: the suite tried to start or wrap a broker process "
                "(test.service.%s); this run uses the syncline cluster"
                % type(self).__name__)

    service.ExternalService = type("ExternalService", (_NoService,), {})
    service.SpawnedService = type("SpawnedService", (_NoService,), {})
    sys.modules["test.service"] = service
    package.service = service

    from kafka.future import Future
    Future.error_on_callbacks = True


_install_test_package()

from test.integration.fixtures import KafkaFixture  # noqa: E402


class SynclineCluster:
    """What the suite's fixtures and helpers read of a broker fixture
    (``partitions``, ``replicas``, ``transport``, ``bootstrap_server()``,
    ``_enrich_client_params()``), for the whole syncline cluster."""

    transport = "PLAINTEXT"
    sasl_mechanism = None
    sasl_enabled = False
    ssl_enabled = False
    external = True
    # The suite's own client parameters (bootstrap, security protocol).
    _enrich_client_params = KafkaFixture._enrich_client_params

    def __init__(self, bootstrap, partitions, replicas):
        self.bootstrap = bootstrap
        self.partitions = partitions
        self.replicas = replicas
        self.host, port = bootstrap.split(",")[0].rsplit(":", 1)
        self.port = int(port)

    def bootstrap_server(self):
        return self.bootstrap

    def close(self):
        pass

    def __repr__(self):
        return "SynclineCluster(%s)" % self.bootstrap


@pytest.fixture(scope="module", name="kafka_broker_factory")
def syncline_kafka_broker_factory():
    """The syncline cluster, for every broker the suite asks for: only the
    suite's defaults can be had (a plaintext listener, no SASL)."""
    cluster = SynclineCluster(
        _required("SYNCLINE_KAFKA_BOOTSTRAP"),
        int(_required("SYNCLINE_TOPIC_PARTITIONS")),
        int(_required("SYNCLINE_TOPIC_REPLICAS")),
    )

    def factory(**broker_params):
        if broker_params:
            pytest.fail("syncline_cluster: a broker with %r cannot be had (the cluster "
                        "is given, with plaintext Kafka listeners)" % (broker_params,))
        return cluster

    yield factory


@pytest.fixture(scope="module", name="zookeeper")
def syncline_zookeeper():
    pytest.fail("syncline_cluster: there is no ZooKeeper (syncline has a controller quorum)")


# The suite's own fixture functions that a replacement below wraps.
_suite_fixtures = {}


@pytest.fixture(name="kafka_consumer_factory")
def syncline_kafka_consumer_factory(kafka_broker, topic, request):
    """The suite's consumer factory, each consumer bootstrapped before it
    subscribes.

    The suite's factory subscribes at construction (``KafkaConsumer(*topics)``)
    and its tests subscribe or assign right after it; with ``api_version``
    given (the suite always gives it) the consumer bootstraps in the background
    (ConsumerCoordinator.__init__ asks for metadata), and a subscription made
    while that bootstrap's Metadata request is in flight is lost: the request
    was built without the topic, its response clears ``_need_update``
    (kafka/cluster.py ``update_metadata``; ``set_topics`` has "TODO: handle
    future when old metadata request is currently in-flight"), so the consumer
    is assigned nothing and waits ``metadata_max_age_ms`` (300 s) for its next
    refresh. A loaded machine widens that window (metadata_race.py beside this
    file makes it happen every time). So each consumer is made without topics,
    waits for its bootstrap (``KafkaConsumer.bootstrap``, within its own
    ``bootstrap_timeout_ms``), and then subscribes to the topics the test
    asked for, as ``KafkaConsumer(*topics)`` would have.
    """
    suite_fixture = _suite_fixtures["kafka_consumer_factory"](kafka_broker, topic, request)
    suite_factory = next(suite_fixture)

    @contextlib.contextmanager
    def factory(topics=(topic,), **override_params):
        with suite_factory(topics=(), **override_params) as consumer:
            timeout_ms = consumer.config["bootstrap_timeout_ms"]
            consumer.bootstrap(timeout_ms=timeout_ms)
            # The topics' partitions in the consumer's metadata before it
            # subscribes: a subscription right after the bootstrap waits
            # retry_backoff_ms for its metadata while the coordinator joins
            # at once, and a leader that joined without the partitions
            # assigns nothing (the rejoin kafka-python owes then can be lost,
            # see the ``topic`` fixture).
            deadline = time.monotonic() + timeout_ms / 1000
            for t in topics:
                while not consumer.partitions_for_topic(t):
                    if time.monotonic() > deadline:
                        pytest.fail("syncline_cluster: no metadata for topic %s within %d ms"
                                    % (t, timeout_ms))
                    time.sleep(0.05)
            if topics:
                consumer.subscribe(topics=list(topics))
            yield consumer

    yield factory
    # The suite's teardown: closes every consumer still open.
    next(suite_fixture, None)


# How long a new topic may take to reach every broker.
TOPIC_KNOWN_TIMEOUT_S = 15


def _led_on(addr, name, partitions):
    """Whether the broker at `addr` (syncline's listener) knows every
    partition of topic `name` and its leader."""
    cli = os.environ.get("SYNCLINE_CLI")
    for p in range(partitions):
        try:
            out = subprocess.run(
                [cli, "--bootstrap-server", addr, "topic", "describe", name,
                 "--partition", str(p), "--field", "leader"],
                capture_output=True, text=True, timeout=CLI_TIMEOUT_S)
        except (OSError, subprocess.SubprocessError):
            return False
        if out.returncode != 0 or not out.stdout.strip().isdigit() or \
                int(out.stdout.strip()) <= 0:
            return False
    return True


@pytest.fixture(name="topic")
def syncline_topic(kafka_broker, request):
    """The suite's topic, returned once every broker knows it and its leaders.

    The suite's ``create_topics`` waits for the metadata of the broker its admin
    client asked; the others learn the topic a moment later (the controller
    announces it to each). A group leader whose metadata came from one of them
    assigns nothing for the topic, and kafka-python 3.0.12 can lose the rejoin
    that should follow once its metadata has the topic (its coordinator's
    rejoin is cut short by the poll's timeout and not resumed), so the group
    never becomes stable: test_group failed so once in CI ("No partition
    metadata for topic").
    """
    name = _suite_fixtures["topic"](kafka_broker, request)
    brokers = [a for a in os.environ.get("SYNCLINE_BOOTSTRAP", "").split(",") if a]
    if os.environ.get("SYNCLINE_CLI") and brokers:
        deadline = time.monotonic() + TOPIC_KNOWN_TIMEOUT_S
        for addr in brokers:
            while not _led_on(addr, name, kafka_broker.partitions):
                if time.monotonic() > deadline:
                    pytest.fail("syncline_cluster: broker %s did not learn topic %s and "
                                "its leaders within %d s" % (addr, name, TOPIC_KNOWN_TIMEOUT_S))
                time.sleep(0.05)
    return name


REPLACEMENTS = {
    "kafka_broker_factory": syncline_kafka_broker_factory,
    "zookeeper": syncline_zookeeper,
    "kafka_consumer_factory": syncline_kafka_consumer_factory,
    "topic": syncline_topic,
}
# What the replacement of each wraps, by its parameters.
WRAPPED_SIGNATURES = {
    "kafka_consumer_factory": ["kafka_broker", "topic", "request"],
    "topic": ["kafka_broker", "request"],
}
_replaced_in = []


@pytest.hookimpl(tryfirst=True)
def pytest_plugin_registered(plugin, plugin_name, manager):
    """Puts the fixtures above into kafka-python's integration conftest before
    pytest reads its fixtures (a conftest's fixtures would win over a plugin's)."""
    if not plugin_name or not plugin_name.replace(os.sep, "/").endswith(
            "test/integration/conftest.py"):
        return
    for name, replacement in REPLACEMENTS.items():
        suite = getattr(plugin, name, None)
        if suite is None:
            raise pytest.UsageError(
                "syncline_cluster: %s defines no fixture %s any more: look at what "
                "it does now" % (plugin_name, name))
        if name in WRAPPED_SIGNATURES:
            function = getattr(suite, "__wrapped__", None)
            if function is None or list(inspect.signature(function).parameters) != \
                    WRAPPED_SIGNATURES[name]:
                raise pytest.UsageError(
                    "syncline_cluster: %s's fixture %s is not the one this plugin "
                    "wraps any more" % (plugin_name, name))
            _suite_fixtures[name] = function
        setattr(plugin, name, replacement)
    _replaced_in.append(plugin_name)


def pytest_collection_modifyitems(session, config, items):
    if not _replaced_in:
        raise pytest.UsageError(
            "syncline_cluster: kafka-python's test/integration/conftest.py was not "
            "loaded, so its broker fixtures were not replaced")
    ids = {item.nodeid for item in items}
    for nodeid in list(DESELECTED) + list(XFAIL):
        if nodeid not in ids and not any(i.startswith(nodeid + "[") for i in ids):
            raise pytest.UsageError(
                "syncline_cluster: %s is listed (DESELECTED or XFAIL) but was not "
                "collected" % nodeid)
    keep, drop = [], []
    for item in items:
        base = item.nodeid.split("[")[0]
        if base in DESELECTED or item.nodeid in DESELECTED:
            drop.append(item)
            continue
        reason = XFAIL.get(item.nodeid) or XFAIL.get(base)
        if reason:
            item.add_marker(pytest.mark.xfail(reason=reason, strict=True))
        keep.append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def pytest_report_header(config):
    lines = ["syncline cluster: %s" % os.environ.get("SYNCLINE_KAFKA_BOOTSTRAP")]
    lines += ["deselected %s: %s" % (n, r) for n, r in DESELECTED.items()]
    lines += ["xfail(strict) %s: %s" % (n, r) for n, r in XFAIL.items()]
    return lines


# ---- the report the Rust test reads -----------------------------------------

_results = {}
_deselected = []


def pytest_deselected(items):
    _deselected.extend(item.nodeid for item in items)


def _cli(args):
    cli = os.environ.get("SYNCLINE_CLI")
    bootstrap = os.environ.get("SYNCLINE_BOOTSTRAP")
    if not cli or not bootstrap:
        return None
    try:
        out = subprocess.run([cli, "--bootstrap-server", bootstrap] + args,
                             capture_output=True, text=True, timeout=CLI_TIMEOUT_S)
        return out.stdout + out.stderr
    except (OSError, subprocess.SubprocessError) as e:
        return "syncline %s: %s" % (" ".join(args), e)


def _topics():
    """The cluster's topics (none without the CLI)."""
    listed = _cli(["topic", "list"])
    return set(listed.split()) if listed else set()


# The topics there were when each test started.
_topics_before = {}


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item):
    if os.environ.get("SYNCLINE_CLI"):
        _topics_before[item.nodeid] = _topics()
    yield


def _cluster_state(item):
    """The cluster, and the topics the test made (new since it started) as
    `syncline topic describe` prints them."""
    if _cli(["topic", "list"]) is None:
        return None
    before = _topics_before.get(item.nodeid)
    topics = sorted(t for t in _topics() - (before or set()) if not t.startswith("__"))
    parts = ["$ syncline cluster describe", _cli(["cluster", "describe"]) or ""]
    if not topics:
        parts.append("(no topic made by this test)")
    for topic in topics:
        parts.append("$ syncline topic describe %s" % topic)
        parts.append(_cli(["topic", "describe", topic]) or "")
    return "\n".join(parts)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        state = _cluster_state(item)
        if state:
            report.sections.append(("syncline cluster state (%s)" % report.when, state))


def pytest_runtest_logreport(report):
    config = _config[0]
    category = config.hook.pytest_report_teststatus(report=report, config=config)[0]
    entry = _results.setdefault(report.nodeid, {
        "nodeid": report.nodeid, "outcomes": [], "seconds": 0.0, "longrepr": "",
        "started": time.time()})
    entry["seconds"] += report.duration
    if category:
        entry["outcomes"].append(category)
    if report.failed or category == "xfailed":
        text = report.longreprtext
        if report.when != "call":
            text = "[%s] %s" % (report.when, text)
        entry["longrepr"] += text
    for title, content in report.sections:
        if title.startswith("syncline cluster state"):
            entry["cluster_state"] = content


_config = []


def pytest_configure(config):
    _config.append(config)


def pytest_sessionfinish(session, exitstatus):
    path = os.environ.get("SYNCLINE_KAFKA_PYTHON_REPORT")
    if not path:
        return
    report = {
        "exitstatus": int(exitstatus),
        "tests": list(_results.values()),
        "deselected": _deselected,
        "replaced_fixtures_in": _replaced_in,
    }
    with open(path + ".tmp", "w") as f:
        json.dump(report, f, indent=1)
    os.replace(path + ".tmp", path)
