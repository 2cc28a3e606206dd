"""Fixtures for the s3stream integration tests: a moto S3 server subprocess, the AWS environment,
boto3 and s3stream clients, and a fresh bucket per test.

Nothing here imports s3stream at module level, so the infrastructure (server, proxies, boto3) works
before the extension is built; the `client` fixture imports it when a test asks for one.
"""

from __future__ import annotations

import dataclasses
import faulthandler
import json
import os
import shutil
import sys
import tempfile
import uuid

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # helpers, proxies, moto_server

import helpers  # noqa: E402
from moto_server import MotoServer  # noqa: E402

# Per-test wall-clock limit (seconds). When it passes, every thread's traceback is dumped and the run
# stops: a hung network call must fail the run, never hang CI. Override with @pytest.mark.timeout_s(N).
DEFAULT_TEST_TIMEOUT_S = 300


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--soak", action="store_true", help="run the soak tests (test_soak.py, ~20 min) too")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "timeout_s(seconds): wall-clock limit for one test")
    config.addinivalue_line("markers", "slow: moves a lot of data (100 MB objects, thousands of keys)")
    config.addinivalue_line("markers", "soak: long runs under faults; only with --soak (`make soak`)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Soak tests are opt-in: without --soak they are left out of the run (not shown as skipped)."""
    if config.getoption("--soak"):
        return
    kept = [item for item in items if item.get_closest_marker("soak") is None]
    if len(kept) != len(items):
        config.hook.pytest_deselected(items=[item for item in items if item not in kept])
        items[:] = kept


@pytest.fixture(autouse=True)
def _watchdog(request: pytest.FixtureRequest):
    marker = request.node.get_closest_marker("timeout_s")
    faulthandler.dump_traceback_later(marker.args[0] if marker else DEFAULT_TEST_TIMEOUT_S, exit=True)
    yield
    faulthandler.cancel_dump_traceback_later()


# --- environment ------------------------------------------------------------------------------------


@pytest.fixture(scope="session", autouse=True)
def aws_env():
    """Test credentials and region in the environment for the whole session; nothing from the
    developer's own AWS setup (profiles, config files, endpoints, tokens) leaks in."""
    mp = pytest.MonkeyPatch()
    for name in list(os.environ):
        if name.startswith("AWS_ENDPOINT_URL") or name in (
            "AWS_PROFILE",
            "AWS_DEFAULT_PROFILE",
            "AWS_SESSION_TOKEN",
            "AWS_SECURITY_TOKEN",
            "AWS_ROLE_ARN",
            "AWS_WEB_IDENTITY_TOKEN_FILE",
            "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
            "AWS_CONTAINER_CREDENTIALS_FULL_URI",
            "AWS_CA_BUNDLE",
        ):
            mp.delenv(name, raising=False)
    empty = tempfile.mkdtemp(prefix="s3stream-awsconfig-")
    mp.setenv("AWS_CONFIG_FILE", os.path.join(empty, "config"))  # files that do not exist
    mp.setenv("AWS_SHARED_CREDENTIALS_FILE", os.path.join(empty, "credentials"))
    mp.setenv("AWS_EC2_METADATA_DISABLED", "true")
    mp.setenv("AWS_ACCESS_KEY_ID", helpers.TEST_ACCESS_KEY_ID)
    mp.setenv("AWS_SECRET_ACCESS_KEY", helpers.TEST_SECRET_ACCESS_KEY)
    mp.setenv("AWS_REGION", helpers.TEST_REGION)
    mp.setenv("AWS_DEFAULT_REGION", helpers.TEST_REGION)
    yield
    mp.undo()
    shutil.rmtree(empty, ignore_errors=True)


@pytest.fixture(scope="session", autouse=True)
def index_cache_env():
    """ShardDataset keeps the indexes it builds in a local cache by default: the session's own
    directory (child processes, torchrun ranks included, inherit it), never the developer's
    ~/.cache. Tests that look into the cache pass index_cache_dir themselves."""
    directory = tempfile.mkdtemp(prefix="s3stream-index-cache-")
    mp = pytest.MonkeyPatch()
    mp.setenv("S3STREAM_CACHE_DIR", directory)
    yield directory
    mp.undo()
    shutil.rmtree(directory, ignore_errors=True)


# --- the server ---------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def moto_server(aws_env):
    """moto's S3 server as a subprocess on 127.0.0.1 (a free port), for the whole session."""
    server = MotoServer("moto")
    helpers.servers.append(server)
    server.start()
    yield server
    server.stop()
    helpers.servers.remove(server)
    server.remove_log()  # failures already carry the part of it that matters


@pytest.fixture(scope="session")
def s3_endpoint(moto_server) -> str:
    return moto_server.url


_log_offsets = pytest.StashKey[dict]()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    item.stash[_log_offsets] = {s.log_path: s.log_size() for s in helpers.servers}


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """On failure, attach what the moto server(s) logged while the test ran."""
    report = yield
    if report.failed:
        offsets = item.stash.get(_log_offsets, {})
        for server in list(helpers.servers):
            tail = server.log_tail(offsets.get(server.log_path, 0))
            if tail:
                report.sections.append((f"{server.name} server log ({server.log_path})", tail))
    return report


# --- clients and buckets ------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def boto3_client(s3_endpoint):
    """boto3 talking to moto directly: the reference the tests compare s3stream against."""
    return helpers.make_boto3_client(s3_endpoint)


@pytest.fixture
def client(s3_endpoint):
    """An s3stream.Client for moto (credentials from the environment set above)."""
    return helpers.make_client(s3_endpoint)


@pytest.fixture
def bucket(boto3_client):
    """A fresh, uniquely named, empty bucket; emptied and removed after the test."""
    name = f"s3s-{uuid.uuid4().hex[:20]}"
    boto3_client.create_bucket(Bucket=name)
    yield name
    try:
        helpers.empty_bucket(boto3_client, name)
        boto3_client.delete_bucket(Bucket=name)
    except Exception:
        pass  # the server may be gone or the test broke it; a leftover bucket harms nobody


# --- a second server that enforces authentication -------------------------------------------------------


@dataclasses.dataclass
class AuthServer:
    """moto with IAM authentication enforced, one IAM user allowed s3:*, and one object."""

    server: MotoServer
    access_key_id: str
    secret_access_key: str
    bucket: str
    key: str
    data: bytes
    boto3_client: object  # boto3 S3 client with the user's key

    @property
    def url(self) -> str:
        return self.server.url

    @property
    def uri(self) -> str:
        return f"s3://{self.bucket}/{self.key}"


# moto counts authenticated actions and enforces authentication from this many on. Exactly the IAM
# setup below fits in: create_user, put_user_policy, create_access_key. (The readiness probe uses
# /moto-api/, which is not an action.)
_AUTH_SETUP_ACTIONS = 3


@pytest.fixture(scope="session")
def auth_server(aws_env):
    import boto3
    from botocore.exceptions import ClientError

    server = MotoServer("moto-auth", extra_env={"INITIAL_NO_AUTH_ACTION_COUNT": str(_AUTH_SETUP_ACTIONS)})
    helpers.servers.append(server)
    server.start()
    try:
        iam = boto3.client(
            "iam",
            endpoint_url=server.url,
            region_name=helpers.TEST_REGION,
            aws_access_key_id=helpers.TEST_ACCESS_KEY_ID,
            aws_secret_access_key=helpers.TEST_SECRET_ACCESS_KEY,
        )
        iam.create_user(UserName="s3stream-test")
        iam.put_user_policy(
            UserName="s3stream-test",
            PolicyName="s3-all",
            PolicyDocument=json.dumps(
                {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]}
            ),
        )
        key = iam.create_access_key(UserName="s3stream-test")["AccessKey"]
        # From here on moto checks every signature: make sure it does, or the auth tests prove nothing.
        stranger = helpers.make_boto3_client(server.url)  # the session's test key, unknown to IAM
        try:
            stranger.list_buckets()
        except ClientError as e:
            assert e.response["ResponseMetadata"]["HTTPStatusCode"] == 403, e.response
        else:
            raise RuntimeError("moto-auth accepted an unknown access key: authentication is not enforced")
        good = helpers.make_boto3_client(
            server.url, aws_access_key_id=key["AccessKeyId"], aws_secret_access_key=key["SecretAccessKey"]
        )
        good.create_bucket(Bucket="auth-bucket")
        data = b"only for the authenticated\n" * 100
        good.put_object(Bucket="auth-bucket", Key="hello.txt", Body=data)
        yield AuthServer(server, key["AccessKeyId"], key["SecretAccessKey"], "auth-bucket", "hello.txt", data, good)
    finally:
        server.stop()
        helpers.servers.remove(server)
        server.remove_log()
