"""The credential chain where training runs, end to end: fake EC2 instance metadata (IMDSv2 and v1)
and container endpoints on loopback hand out credentials that really expire (credential_servers.py:
a proxy in front of moto refuses an expired key or a bad signature), a profile's credential_process,
and a Python function. Requests keep succeeding across expiries, in DataLoader workers too; broken
sources give errors that name them; a machine without IMDS costs no multi-second stall."""

from __future__ import annotations

import datetime
import json
import os
import socket
import sys
import time

import pytest
import torch.utils.data

import s3stream
from credential_servers import FakeContainerEndpoint, FakeImds, FakeSts, Issuer, IssuerProxy
from helpers import put_many

OBJECTS = {f"creds/{i:03d}.bin": f"object {i}".encode() * 10 for i in range(24)}


@pytest.fixture
def objects(boto3_client, bucket):
    put_many(boto3_client, bucket, OBJECTS)
    return [f"s3://{bucket}/{k}" for k in OBJECTS]


@pytest.fixture
def chain_env(monkeypatch, tmp_path):
    """No credentials in the environment or in profiles: the chain goes on to the machine's sources."""
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_EC2_METADATA_DISABLED"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "credentials"))
    return monkeypatch


def read_all(client, uris) -> None:
    for uri, data in zip(uris, client.get_many(uris)):
        assert bytes(data) == OBJECTS[uri.split("/", 3)[3]]


def test_instance_metadata_v2_signs_and_is_asked_once(s3_endpoint, objects, chain_env):
    issuer = Issuer()
    with IssuerProxy(s3_endpoint, issuer) as proxy, FakeImds(issuer) as imds:
        chain_env.setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", imds.url)
        client = s3stream.Client(endpoint_url=proxy.url)
        assert repr(client).endswith(f"credentials='EC2 instance metadata at {imds.url}')")
        for _ in range(3):
            read_all(client, objects)
        assert issuer.refused == [] and len(issuer.used) == 1
        # One session token, the role's name, its credentials: once, not per request.
        assert [(m, p) for m, p, _ in imds.requests] == [
            ("PUT", "/latest/api/token"), ("GET", "/latest/meta-data/iam/security-credentials/"),
            ("GET", f"/latest/meta-data/iam/security-credentials/{FakeImds.ROLE}")]


def test_instance_metadata_v1_only_where_allowed(s3_endpoint, objects, chain_env):
    issuer = Issuer()
    with IssuerProxy(s3_endpoint, issuer) as proxy, FakeImds(issuer, v2=False) as imds:
        chain_env.setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", imds.url)
        read_all(s3stream.Client(endpoint_url=proxy.url), objects)
        assert issuer.refused == [] and len(issuer.used) == 1
        chain_env.setenv("AWS_EC2_METADATA_V1_DISABLED", "true")
        with pytest.raises(s3stream.PermissionDeniedError, match="refused a session token .*HTTP 405.*IMDSv1 is disabled"):
            s3stream.Client(endpoint_url=proxy.url).get(objects[0])


@pytest.mark.parametrize("token_from", ["variable", "file"])
def test_container_endpoint_with_its_authorization_token(s3_endpoint, objects, chain_env, tmp_path, token_from):
    issuer = Issuer()
    with IssuerProxy(s3_endpoint, issuer) as proxy, FakeContainerEndpoint(issuer, token="tok-1") as ep:
        chain_env.setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", ep.url + "/creds")
        token_file = tmp_path / "token"
        if token_from == "variable":
            chain_env.setenv("AWS_CONTAINER_AUTHORIZATION_TOKEN", "tok-1")
        else:
            token_file.write_text("tok-1\n")
            chain_env.setenv("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", str(token_file))
        client = s3stream.Client(endpoint_url=proxy.url)
        read_all(client, objects)
        assert issuer.refused == [] and len(issuer.used) == 1
        # A wrong token: the endpoint's refusal, named.
        ep.token = "tok-2"
        with pytest.raises(s3stream.PermissionDeniedError,
                           match=r"container credentials endpoint .*/creds .*answered HTTP 403"):
            s3stream.Client(endpoint_url=proxy.url).get(objects[0])
        if token_from == "file":  # the file is read again at each fetch: a rotated token is used
            token_file.write_text("tok-2")
            read_all(s3stream.Client(endpoint_url=proxy.url), objects)


def test_requests_never_fail_across_expiries_also_in_dataloader_workers(s3_endpoint, objects, chain_env):
    """Credentials that live 20 s are refreshed ahead of their end, on a thread of their own, while
    requests keep signing with the valid ones: 25 s of reading across an expiry, in this process
    and in forked DataLoader workers (which fetch their own), loses no request."""
    issuer = Issuer(lifetime_s=20)
    with IssuerProxy(s3_endpoint, issuer) as proxy, FakeImds(issuer) as imds:
        chain_env.setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", imds.url)
        client = s3stream.Client(endpoint_url=proxy.url, max_attempts=1)  # a refused request would fail
        ds = s3stream.MapDataset(objects, client=client, transform=lambda s: bytes(s.data))
        loader = torch.utils.data.DataLoader(ds, batch_size=8, num_workers=2, multiprocessing_context="fork",
                                             persistent_workers=True, collate_fn=list)
        deadline, batches = time.monotonic() + 25, 0
        while time.monotonic() < deadline:
            read_all(client, objects[:4])
            for batch in loader:
                assert len(batch) == 8
                batches += 1
            time.sleep(0.2)
        assert issuer.refused == [], issuer.refused[:3]
        assert batches > 20
        assert len(issuer.used) >= 3, "the credentials were not refreshed"  # the parent's and the workers'


def test_a_machine_without_instance_metadata_costs_no_stall(s3_endpoint, objects, chain_env):
    """A laptop: nothing answers at the metadata address (a listener that never accepts here). The
    chain waits about a second once, then sends requests unsigned, as with no source at all (moto
    refuses unsigned reads of a private bucket, with the advice for a missing configuration)."""
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(0)
    filler = socket.create_connection(silent.getsockname())  # fills the backlog: connects hang
    try:
        chain_env.setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", f"http://127.0.0.1:{silent.getsockname()[1]}")
        chain_env.setenv("AWS_METADATA_SERVICE_TIMEOUT", "0.5")
        client = s3stream.Client(endpoint_url=s3_endpoint)
        took = []
        for _ in range(2):
            start = time.monotonic()
            with pytest.raises(s3stream.PermissionDeniedError, match="no AWS credentials were found: set"):
                client.get(objects[0])
            took.append(time.monotonic() - start)
        assert 0.5 < took[0] < 4 and took[1] < 0.5, took  # the metadata address is not asked again
    finally:
        filler.close()
        silent.close()


def test_a_broken_source_is_an_error_that_names_it(s3_endpoint, objects, chain_env):
    issuer = Issuer()
    with FakeImds(issuer, body="<html>captive portal</html>") as imds:
        chain_env.setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", imds.url)
        with pytest.raises(s3stream.InvalidArgumentError) as e:
            s3stream.Client(endpoint_url=s3_endpoint).get(objects[0])
        assert f"GET {objects[0]}: no credentials to sign it with: the credentials from EC2 instance metadata at " \
               f"{imds.url} (role '{FakeImds.ROLE}') are not a JSON object" in str(e.value)
    with FakeImds(issuer, body=json.dumps({"Code": "Success", "AccessKeyId": "AK", "SecretAccessKey": "SECRETXYZ",
                                           "Token": "t", "Expiration": "tomorrow"})) as imds:
        chain_env.setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", imds.url)
        with pytest.raises(s3stream.InvalidArgumentError, match="Expiration 'tomorrow' is not an RFC 3339 time") as e:
            s3stream.Client(endpoint_url=s3_endpoint).get(objects[0])
        assert "SECRETXYZ" not in str(e.value)


def test_credential_process_of_a_profile(s3_endpoint, objects, chain_env, tmp_path):
    issuer = Issuer()
    creds = issuer.issue()
    script = tmp_path / "creds.py"
    script.write_text("import json, sys\n"
                      f"print(json.dumps({{'Version': 1, **{issuer.document(creds, 'SessionToken')!r}}}))\n")
    (tmp_path / "config").write_text(f"[profile train]\ncredential_process = {sys.executable} {script}\n"
                                     "[profile broken]\ncredential_process = sh -c 'echo run aws sso login >&2; exit 2'\n")
    with IssuerProxy(s3_endpoint, issuer) as proxy:
        client = s3stream.Client(endpoint_url=proxy.url, profile="train")
        assert "credential_process of profile 'train'" in repr(client)
        read_all(client, objects)
        assert issuer.refused == [] and issuer.used == {creds.key}
        with pytest.raises(s3stream.PermissionDeniedError, match="credential_process of profile 'broken'.*exited "
                                                                 "with 2: run aws sso login"):
            s3stream.Client(endpoint_url=proxy.url, profile="broken").get(objects[0])


def test_web_identity_exchanges_the_token_file_at_sts(s3_endpoint, objects, chain_env, tmp_path):
    """EKS IRSA: the token file (read again at every fetch: the kubelet rotates it) and the role go
    to STS AssumeRoleWithWebIdentity; its temporary credentials sign the requests, and are fetched
    again before they expire."""
    issuer = Issuer(lifetime_s=302)  # due for refresh 2 s after each fetch
    token = tmp_path / "token"
    token.write_text("jwt-one\n")
    with IssuerProxy(s3_endpoint, issuer) as proxy, FakeSts(issuer) as sts:
        chain_env.setenv("AWS_WEB_IDENTITY_TOKEN_FILE", str(token))
        chain_env.setenv("AWS_ROLE_ARN", "arn:aws:iam::123456789012:role/train")
        chain_env.setenv("AWS_ROLE_SESSION_NAME", "job-7")
        chain_env.setenv("AWS_ENDPOINT_URL_STS", sts.url)
        client = s3stream.Client(endpoint_url=proxy.url)
        assert "web identity (AWS_WEB_IDENTITY_TOKEN_FILE: role arn:aws:iam::123456789012:role/train" in repr(client)
        read_all(client, objects)
        assert sts.calls == [{"Action": "AssumeRoleWithWebIdentity", "Version": "2011-06-15",
                              "RoleArn": "arn:aws:iam::123456789012:role/train", "RoleSessionName": "job-7",
                              "WebIdentityToken": "jwt-one"}]
        token.write_text("jwt-two")
        deadline = time.monotonic() + 15
        while len(sts.calls) < 2 and time.monotonic() < deadline:
            read_all(client, objects[:2])
            time.sleep(0.5)
        assert [c["WebIdentityToken"] for c in sts.calls[:2]] == ["jwt-one", "jwt-two"]
        assert issuer.refused == [] and len(issuer.used) >= 1
        sts.refuse = True
        with pytest.raises(s3stream.PermissionDeniedError, match="refused AssumeRoleWithWebIdentity: "
                                                                 "InvalidIdentityToken: Couldn't retrieve"):
            s3stream.Client(endpoint_url=proxy.url).get(objects[0])
        token.unlink()
        with pytest.raises(s3stream.PermissionDeniedError, match="cannot read the web identity token file"):
            s3stream.Client(endpoint_url=proxy.url).get(objects[0])


def test_web_identity_against_motos_sts(s3_endpoint, objects, chain_env, tmp_path):
    """The same exchange with moto's own STS: our request and its answer match a real implementation."""
    token = tmp_path / "token"
    token.write_text("eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJzeXN0ZW06c2VydmljZWFjY291bnQ6ZGVmYXVsdDp0cmFpbiJ9.c2ln")
    chain_env.setenv("AWS_WEB_IDENTITY_TOKEN_FILE", str(token))
    chain_env.setenv("AWS_ROLE_ARN", "arn:aws:iam::123456789012:role/train")
    chain_env.setenv("AWS_ENDPOINT_URL_STS", s3_endpoint)
    read_all(s3stream.Client(endpoint_url=s3_endpoint), objects)


def test_a_profiles_role_is_assumed_with_its_source_profiles_keys(s3_endpoint, objects, chain_env, tmp_path):
    """role_arn + source_profile, two roles deep: the base profile's keys sign AssumeRole for the
    middle role, whose credentials sign AssumeRole for the profile's role, whose credentials sign
    the requests (each link refreshed when due)."""
    issuer = Issuer()
    base = issuer.issue()
    (tmp_path / "credentials").write_text(f"[base]\naws_access_key_id = {base.key}\n"
                                          f"aws_secret_access_key = {base.secret}\naws_session_token = {base.token}\n")
    (tmp_path / "config").write_text("[profile train]\nrole_arn = arn:aws:iam::123456789012:role/train\n"
                                     "source_profile = hop\nexternal_id = ext-7\nrole_session_name = job-7\n"
                                     "[profile hop]\nrole_arn = arn:aws:iam::123456789012:role/hop\n"
                                     "source_profile = base\n")
    with IssuerProxy(s3_endpoint, issuer) as proxy, FakeSts(issuer) as sts:
        chain_env.setenv("AWS_ENDPOINT_URL_STS", sts.url)
        client = s3stream.Client(endpoint_url=proxy.url, profile="train")
        assert "role arn:aws:iam::123456789012:role/train of profile 'train'" in repr(client)
        read_all(client, objects)
        assert [c["RoleArn"] for c in sts.calls] == ["arn:aws:iam::123456789012:role/hop",
                                                      "arn:aws:iam::123456789012:role/train"]
        assert sts.calls[1]["ExternalId"] == "ext-7" and sts.calls[1]["RoleSessionName"] == "job-7"
        assert sts.signers[0] == base.key and sts.signers[1] not in (base.key,)  # the hop's own credentials
        assert issuer.refused == [] and len(issuer.used) == 1 and base.key not in issuer.used


def test_a_role_against_motos_sts(s3_endpoint, objects, chain_env, tmp_path):
    """AssumeRole at moto's own STS, signed with the environment's keys (credential_source): our
    request and its answer match a real implementation. A profile named in the code is not shadowed
    by those keys, as in botocore."""
    (tmp_path / "config").write_text("[profile train]\nrole_arn = arn:aws:iam::123456789012:role/train\n"
                                     "credential_source = Environment\n")
    chain_env.setenv("AWS_ENDPOINT_URL_STS", s3_endpoint)
    chain_env.setenv("AWS_ACCESS_KEY_ID", "AKIDENVIRONMENT")
    chain_env.setenv("AWS_SECRET_ACCESS_KEY", "environment-secret")
    client = s3stream.Client(endpoint_url=s3_endpoint, profile="train")
    assert "role arn:aws:iam::123456789012:role/train of profile 'train'" in repr(client)
    assert "assumed with environment" in repr(client)
    read_all(client, objects)


def test_earlier_sources_shadow_later_ones(s3_endpoint, objects, chain_env):
    issuer = Issuer()
    env_creds = issuer.issue()
    with IssuerProxy(s3_endpoint, issuer) as proxy, FakeImds(issuer) as imds:
        chain_env.setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", imds.url)
        chain_env.setenv("AWS_ACCESS_KEY_ID", env_creds.key)
        chain_env.setenv("AWS_SECRET_ACCESS_KEY", env_creds.secret)
        chain_env.setenv("AWS_SESSION_TOKEN", env_creds.token)
        read_all(s3stream.Client(endpoint_url=proxy.url), objects)
        assert imds.requests == [] and issuer.used == {env_creds.key}


# --- credentials= a Python function ------------------------------------------------------------------


class Rotating:
    """A credentials function of the user's: each call issues new ones that expire in `lifetime_s`."""

    def __init__(self, issuer: Issuer, lifetime_s: float, shape: str = "tuple") -> None:
        self.issuer, self.lifetime_s, self.shape, self.calls = issuer, lifetime_s, shape, 0

    def __call__(self):
        self.calls += 1
        c = self.issuer.issue(self.lifetime_s)
        expiration = datetime.datetime.fromtimestamp(c.expires, datetime.timezone.utc)
        if self.shape == "dict":
            return {"access_key_id": c.key, "secret_access_key": c.secret, "session_token": c.token,
                    "expiration": expiration}
        return c.key, c.secret, c.token, c.expires if self.shape == "epoch" else expiration


@pytest.mark.parametrize("shape", ["tuple", "dict", "epoch"])
def test_a_credentials_function_is_called_again_before_they_expire(s3_endpoint, objects, shape):
    issuer = Issuer()
    function = Rotating(issuer, lifetime_s=302, shape=shape)  # due for refresh 2 s after each call
    with IssuerProxy(s3_endpoint, issuer) as proxy:
        client = s3stream.Client(endpoint_url=proxy.url, credentials=function)
        assert "the credentials function Rotating()" in repr(client)
        read_all(client, objects)
        deadline = time.monotonic() + 15
        while function.calls < 2 and time.monotonic() < deadline:
            read_all(client, objects[:2])
            time.sleep(0.5)
        assert function.calls >= 2 and issuer.refused == []


def test_a_credentials_function_that_fails_or_returns_junk_is_named(s3_endpoint, objects):
    def broken():
        raise RuntimeError("vault sealed")

    with pytest.raises(s3stream.PermissionDeniedError, match=r"the credentials function .*broken\(\) raised "
                                                            r"RuntimeError: vault sealed"):
        s3stream.Client(endpoint_url=s3_endpoint, credentials=broken).get(objects[0])
    for junk, words in ((lambda: "AKID:SECRET", "returned str"), (lambda: ("AK", ""), "secret_access_key that is not"),
                        (lambda: ("AK", "S", None, datetime.datetime(2030, 1, 1)), "naive datetime")):
        with pytest.raises(s3stream.PermissionDeniedError, match=words):
            s3stream.Client(endpoint_url=s3_endpoint, credentials=junk).get(objects[0])
    with pytest.raises(s3stream.InvalidArgumentError, match="credentials= replaces access_key_id"):
        s3stream.Client(endpoint_url=s3_endpoint, credentials=broken, access_key_id="AK")
    with pytest.raises(s3stream.InvalidArgumentError, match="must be a function"):
        s3stream.Client(endpoint_url=s3_endpoint, credentials=("AK", "S"))
    # None: no credentials, so the request goes unsigned (moto refuses it for a private bucket).
    with pytest.raises(s3stream.PermissionDeniedError, match="HTTP 403.*no AWS credentials were found"):
        s3stream.Client(endpoint_url=s3_endpoint, credentials=lambda: None).get(objects[0])


def contents(batch) -> list:
    return [bytes(s.data) for s in batch]


def issue_for_spawn():
    """A module-level function: a spawned worker unpickles it by name."""
    key, secret = os.environ["S3S_TEST_SPAWN_KEY"].split(":")
    return key, secret, os.environ["S3S_TEST_SPAWN_TOKEN"], None


def test_a_credentials_function_travels_to_spawned_workers(s3_endpoint, objects, monkeypatch):
    issuer = Issuer()
    creds = issuer.issue()
    monkeypatch.setenv("S3S_TEST_SPAWN_KEY", f"{creds.key}:{creds.secret}")
    monkeypatch.setenv("S3S_TEST_SPAWN_TOKEN", creds.token)
    with IssuerProxy(s3_endpoint, issuer) as proxy:
        client = s3stream.Client(endpoint_url=proxy.url, credentials=issue_for_spawn)
        loader = torch.utils.data.DataLoader(s3stream.MapDataset(objects, client=client), batch_size=6,
                                             num_workers=2, multiprocessing_context="spawn", collate_fn=contents)
        got = [x for batch in loader for x in batch]
        assert sorted(got) == sorted(OBJECTS.values())
        assert issuer.refused == [] and issuer.used == {creds.key}
