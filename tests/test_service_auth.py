"""Who may talk to ``nodeprov serve`` (a real process): its open mode answers this machine
alone (issue 44's DNS rebinding: a page on ``attacker.example`` that rebinds to 127.0.0.1 ran
``id`` as root through the open service), a token's creation and revocation hold from the
next request, guessing tokens is slowed per address, and beyond loopback it speaks TLS or
says a proxy does."""

from __future__ import annotations

import datetime
import ipaddress
import os
import ssl
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from nodeprov.errors import ConfigError
from nodeprov.service.config import ServiceConfig
from nodeprov.service.server import check_exposure
from nodeprov.store import Store
from tests.serving import serving

pytestmark = pytest.mark.anyio


async def test_the_open_service_answers_this_machine_alone(tmp_path: Path) -> None:
    async with serving(tmp_path) as served, served.client() as client:
        port = served.url.rsplit(":", 1)[1]
        for host in (f"127.0.0.1:{port}", f"localhost:{port}", "127.0.0.2", "localhost.", f"[::1]:{port}"):
            answer = await client.get("/v1/runs", headers={"Host": host})
            assert answer.status_code == 200, (host, answer.text)
        assert (
            await client.get("/v1/runs", headers={"Origin": f"http://localhost:{port}"})
        ).status_code == 200
        # A page whose name rebinds to 127.0.0.1: the browser sends its name, and its origin.
        for headers in (
            {"Host": f"attacker.example:{port}"},
            {"Host": "127.0.0.1.attacker.example"},
            {"Host": "localhost.attacker.example"},
            {"Host": ""},
            {"Origin": "http://attacker.example"},
            {"Origin": "null"},
        ):
            for method, path in (("GET", "/v1/runs"), ("POST", "/v1/nodes")):
                answer = await client.request(method, path, headers=headers, json={"provider": "local"})
                assert (answer.status_code, answer.json()["error"]) == (403, "not_local"), (headers, path)
        assert list((tmp_path / "nodes").iterdir()) == []  # nothing was provisioned for the page
        assert (await client.get("/healthz", headers={"Host": "attacker.example"})).status_code == 200


async def test_a_token_holds_from_the_next_request_and_its_revocation_too(tmp_path: Path) -> None:
    async with (
        serving(tmp_path) as served,
        served.client() as anonymous,
        await Store.open(served.store) as store,
    ):
        assert (await anonymous.get("/v1/runs")).status_code == 200
        record, secret = await store.tokens.create("ops", ["read"])
        assert (await anonymous.get("/v1/runs")).status_code == 401
        async with served.client(secret) as client:
            assert (await client.get("/v1/runs")).status_code == 200
            await store.tokens.revoke(record.id)
            assert (await client.get("/v1/runs")).status_code == 401
        # The last token revoked: open again, to this machine alone.
        assert (await anonymous.get("/v1/runs")).status_code == 200


async def test_an_address_that_keeps_failing_is_refused_for_the_window(tmp_path: Path) -> None:
    config = {"auth_failures": 3, "auth_failure_window": 3600}
    async with serving(tmp_path, config=config) as served, served.client() as anonymous:
        async with await Store.open(served.store) as store:
            _, secret = await store.tokens.create("ops", ["read"])
        for _ in range(5):  # no token at all is a mistake, not a guess: not counted
            assert (await anonymous.get("/v1/runs")).status_code == 401
        for header in ("Bearer npt_guess1", "Basic eDp5", "Bearer npt_guess2"):
            assert (await anonymous.get("/v1/runs", headers={"Authorization": header})).status_code == 401
        for header in ("Bearer npt_guess3", f"Bearer {secret}"):  # the right one too, now
            refused = await anonymous.get("/v1/runs", headers={"Authorization": header})
            assert (refused.status_code, refused.json()["error"]) == (429, "too_many_failures")
            assert 3500 < int(refused.headers["retry-after"]) <= 3600
            assert secret not in refused.text
        assert (await anonymous.get("/healthz")).status_code == 200  # probes still answer


def _certificate(directory: Path) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 and localhost, and its key."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.UTC)
    names = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert, key_file = directory / "cert.pem", directory / "key.pem"
    cert.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return cert, key_file


async def test_the_service_speaks_tls_with_the_certificate_given(tmp_path: Path) -> None:
    cert, key = _certificate(tmp_path)
    trusted = ssl.create_default_context(cafile=cert)
    async with serving(tmp_path, "--tls-cert", str(cert), "--tls-key", str(key), verify=trusted) as served:
        assert served.url.startswith("https://127.0.0.1:")
        async with served.client() as client:
            assert (await client.get("/v1/runs")).status_code == 200
        async with httpx.AsyncClient() as plain:
            with pytest.raises(httpx.TransportError):  # it speaks no plain HTTP
                await plain.get(served.url.replace("https://", "http://") + "/healthz")


async def test_beyond_loopback_it_needs_tls_or_a_proxy_and_a_token(tmp_path: Path) -> None:
    cert, key = _certificate(tmp_path)
    store = f"sqlite:///{tmp_path}/s.db"
    with pytest.raises(ConfigError, match=r"refusing to listen on 0\.0\.0\.0 in plain HTTP"):
        await check_exposure(ServiceConfig(host="0.0.0.0", store=store))
    for where in ({"tls_cert": str(cert), "tls_key": str(key)}, {"behind_proxy": True}):
        with pytest.raises(ConfigError, match="without tokens"):
            await check_exposure(ServiceConfig(host="0.0.0.0", store=store, **where))
    async with await Store.open(store) as opened:
        await opened.tokens.create("ops", ["admin"])
    await check_exposure(ServiceConfig(host="0.0.0.0", store=store, tls_cert=str(cert), tls_key=str(key)))


def _serve(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "nodeprov", "serve", "--port", "0", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, "NODEPROV_SERVE_CONFIG": "{}"},
    )


def test_a_bad_certificate_or_plain_http_beyond_loopback_is_one_error_line(tmp_path: Path) -> None:
    cert, key = _certificate(tmp_path)
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("-----BEGIN CERTIFICATE-----\nnot one\n-----END CERTIFICATE-----\n")
    store = ("--store", f"sqlite:///{tmp_path}/s.db")
    for args, said in (
        (("--host", "0.0.0.0", *store), "error: refusing to listen on 0.0.0.0 in plain HTTP"),
        (
            ("--tls-cert", str(garbage), "--tls-key", str(key), *store),
            "error: cannot use the TLS certificate",
        ),
        (
            ("--tls-cert", str(cert), "--tls-key", str(garbage), *store),
            "error: cannot use the TLS certificate",
        ),
        (("--tls-cert", str(cert), *store), "error: "),
    ):
        done = _serve(*args)
        assert done.returncode == 2, (args, done.stderr)
        assert done.stderr.strip().startswith(said), (args, done.stderr)
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr
        assert "listening" not in done.stdout


@pytest.mark.parametrize("trusted", [True, False])
async def test_behind_a_trusted_proxy_failures_count_against_the_forwarded_client(
    tmp_path: Path, trusted: bool
) -> None:
    config = {"auth_failures": 2, "auth_failure_window": 3600} | (
        {"trusted_proxies": ["127.0.0.0/8"]} if trusted else {}
    )
    async with serving(tmp_path, config=config) as served, served.client() as client:
        async with await Store.open(served.store) as store:
            await store.tokens.create("ops", ["read"])

        async def answer(client_address: str) -> int:
            headers = {"Authorization": "Bearer npt_guess", "X-Forwarded-For": client_address}
            return (await client.get("/v1/runs", headers=headers)).status_code

        assert [await answer("203.0.113.7") for _ in range(3)] == [401, 401, 429]
        # Another client behind the proxy is another address; without trusting the proxy,
        # the header is the caller's word and changes nothing.
        assert await answer("203.0.113.8") == (401 if trusted else 429)
