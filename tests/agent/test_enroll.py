"""``mirbad-agent enroll`` against a real enroll listener on a loopback TLS port.

The command runs as the operator runs it (its own event loop, in a worker thread here) while the
listener serves in the test's loop; a recorder in front of the listener shows what reached the master.
"""

from __future__ import annotations

import argparse
import ipaddress
import secrets
import socket
import stat
from datetime import timedelta
from pathlib import Path

import anyio
import anyio.to_thread
import pytest
from cryptography import x509
from tests._support.asgi_server import free_port
from tests._support.enroll_master import enroll_master

from mirbad_agent import (
    AGENT_TLS_STEM,
    EXIT_FAILED,
    EXIT_REFUSED,
    FENCE_FILE_NAME,
    add_enroll_arguments,
    default_state_dir,
    run_enroll,
)
from mirbad_protocol.pki import (
    ENROLL_CA_PATH,
    ENROLL_LISTENER_NAME,
    ENROLL_PATH,
    CertificateAuthority,
    JoinToken,
    SanPolicy,
    TlsCredentials,
    certificate_identity,
    create_certificate_request,
    generate_private_key,
    verify_pinned_chain,
)

pytestmark = pytest.mark.anyio

COMMAND_TIMEOUT_S = 60.0
CA_FETCH = [("GET", ENROLL_CA_PATH)]


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="mirbad-agent enroll")
    add_enroll_arguments(parser)
    return parser.parse_args(list(argv))


async def enroll(master_url: str, token: str, state_dir: Path, *extra: str) -> int:
    namespace = parse("--master", master_url, "--token", token, "--state-dir", str(state_dir), *extra)
    with anyio.fail_after(COMMAND_TIMEOUT_S):
        return await anyio.to_thread.run_sync(run_enroll, namespace)


def identity_files(state_dir: Path) -> list[Path]:
    return sorted(state_dir.glob(f"{AGENT_TLS_STEM}*")) if state_dir.exists() else []


async def test_a_node_enrolls_and_keeps_its_identity(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = tmp_path / "state"
    async with enroll_master(tmp_path) as master:
        token = await master.tokens.issue_join_token("gpu-1")
        status = await enroll(
            master.url, token, state, "--name", "ignored", "--san", "gpu-1.lan", "--san", "10.0.0.7"
        )

    assert status == 0
    assert master.recorder.seen == [*CA_FETCH, ("POST", ENROLL_PATH)]
    key_file = state / "agent.key"
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert stat.S_IMODE(state.stat().st_mode) == 0o700
    loaded = TlsCredentials.load(state, AGENT_TLS_STEM)
    assert loaded.ca_certificates == (master.ca.certificate,)
    identity = certificate_identity(loaded.certificate)
    assert identity.common_name == "gpu-1"
    assert identity.dns_names == ("gpu-1.lan",)
    assert identity.ip_addresses == (ipaddress.ip_address("10.0.0.7"),)
    verify_pinned_chain([loaded.certificate], master.ca.certificate, master.ca.pin, server_name="10.0.0.7")
    out = capsys.readouterr().out
    assert "enrolled as node gpu-1" in out
    for name in ("agent.key", "agent.crt", "agent-ca.crt"):
        assert str(state / name) in out


async def test_a_reused_token_prints_the_masters_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    async with enroll_master(tmp_path) as master:
        token = await master.tokens.issue_join_token("gpu-1")
        assert await enroll(master.url, token, tmp_path / "first") == 0
        status = await enroll(master.url, token, tmp_path / "second")

    assert status == EXIT_REFUSED
    err = capsys.readouterr().err
    assert "(409)" in err
    assert "already used" in err
    assert len(err.strip().splitlines()) == 1
    assert identity_files(tmp_path / "second") == []


async def test_an_expired_token_prints_the_masters_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    async with enroll_master(tmp_path) as master:
        token = await master.tokens.issue_join_token("gpu-1", ttl=timedelta(minutes=1))
        await master.clock.advance(timedelta(minutes=2))
        status = await enroll(master.url, token, tmp_path / "state")

    assert status == EXIT_REFUSED
    assert "expired" in capsys.readouterr().err
    assert identity_files(tmp_path / "state") == []


async def test_a_forged_token_prints_the_masters_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    async with enroll_master(tmp_path) as master:
        forged = JoinToken(master.ca.pin, secrets.token_urlsafe(32)).encode()
        status = await enroll(master.url, forged, tmp_path / "state")

    assert status == EXIT_REFUSED
    assert "not recognised" in capsys.readouterr().err


async def test_a_wrong_pin_is_refused_before_the_secret_is_sent(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    async with enroll_master(tmp_path) as master:
        genuine = JoinToken.parse(await master.tokens.issue_join_token("gpu-1"))
        rogue_pin = CertificateAuthority.create("another fleet").pin
        status = await enroll(master.url, JoinToken(rogue_pin, genuine.secret).encode(), tmp_path / "state")
        seen = list(master.recorder.seen)

    assert status == EXIT_FAILED
    err = capsys.readouterr().err
    assert "the token was not sent" in err
    assert master.ca.pin in err
    assert seen == CA_FETCH  # no POST: the secret never left the node
    assert identity_files(tmp_path / "state") == []


async def test_the_master_is_known_by_its_listener_name_wherever_it_is_reached(tmp_path: Path) -> None:
    # The listener's certificate names master.lan, the node reaches it at 127.0.0.1: what identifies
    # the master is the reserved name under the pinned CA, not the URL's host.
    async with enroll_master(tmp_path, names=["master.lan"]) as master:
        token = await master.tokens.issue_join_token("gpu-1")
        status = await enroll(master.url, token, tmp_path / "state")  # https://127.0.0.1:PORT
    assert status == 0
    assert ENROLL_LISTENER_NAME in master.server.certificate.extensions.get_extension_for_class(
        x509.SubjectAlternativeName
    ).value.get_values_for_type(x509.DNSName)


async def test_an_enrolled_node_serving_the_enroll_api_never_gets_the_token(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # issue 31 item 14: a rogue node holds a valid certificate from the fleet CA, for the address the
    # joining node uses, and serves the enroll API (with the genuine, public CA certificate).
    ca = CertificateAuthority.create("Enroll test CA")
    key = generate_private_key()
    request = create_certificate_request(key, "rogue", ip_addresses=[ipaddress.ip_address("127.0.0.1")])
    rogue = TlsCredentials(ca.issue_from_csr(request, policy=SanPolicy()), key, (ca.certificate,))
    async with enroll_master(tmp_path, ca=ca, server=rogue) as impostor:
        token = await impostor.tokens.issue_join_token("gpu-1")
        status = await enroll(impostor.url, token, tmp_path / "state")
        seen = list(impostor.recorder.seen)

    assert status == EXIT_FAILED
    err = capsys.readouterr().err
    assert "not the master's enroll listener" in err
    assert "the token was not sent" in err
    assert seen == CA_FETCH  # no POST: the token never reached the impostor
    assert identity_files(tmp_path / "state") == []


@pytest.mark.parametrize(
    ("token", "reason"),
    [("not-a-token", "copy it whole"), ("mbj1." + "A" * 43 + ".short", "32 to 128")],
)
async def test_a_malformed_token_contacts_nobody(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], token: str, reason: str
) -> None:
    async with enroll_master(tmp_path) as master:
        status = await enroll(master.url, token, tmp_path / "state")
        seen = list(master.recorder.seen)

    assert status == EXIT_REFUSED
    assert reason in capsys.readouterr().err
    assert seen == []


@pytest.mark.parametrize("url", ["http://127.0.0.1:1", "https://127.0.0.1:1/?q=1", "not a url"])
async def test_a_master_url_must_be_https(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], url: str
) -> None:
    token = JoinToken(CertificateAuthority.create("x").pin, secrets.token_urlsafe(32)).encode()

    assert await enroll(url, token, tmp_path / "state") == EXIT_REFUSED
    assert "--master" in capsys.readouterr().err


async def test_an_unreachable_master_fails(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    token = JoinToken(CertificateAuthority.create("x").pin, secrets.token_urlsafe(32)).encode()

    status = await enroll(f"https://127.0.0.1:{free_port()}", token, tmp_path / "state")

    assert status == EXIT_FAILED
    assert "cannot reach the master" in capsys.readouterr().err


async def test_an_unusable_state_folder_is_refused_before_the_token_is_spent(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    async with enroll_master(tmp_path) as master:
        token = await master.tokens.issue_join_token("gpu-1")
        status = await enroll(master.url, token, blocker / "state")
        seen = list(master.recorder.seen)

    assert status == EXIT_FAILED
    assert "state folder" in capsys.readouterr().err
    assert seen == []


def test_the_arguments_default_like_the_agent_and_repeat_san() -> None:
    namespace = parse("--master", "https://m:8443", "--token", "t", "--san", "A.lan", "--san", "::1")

    assert namespace.name == socket.gethostname()
    assert namespace.state_dir == default_state_dir()
    assert namespace.san == ["a.lan", ipaddress.ip_address("::1")]
    assert parse("--master", "m", "--token", "t", "--state-dir", "/s").state_dir == Path("/s")


@pytest.mark.parametrize("missing", ["--master", "--token"])
def test_the_required_arguments_are_required(missing: str) -> None:
    argv = {"--master": "https://m", "--token": "t"}
    del argv[missing]

    with pytest.raises(SystemExit):
        parse(*[part for pair in argv.items() for part in pair])


async def test_enrolling_into_another_fleet_drops_the_old_masters_fence_and_the_same_fleet_keeps_it(
    tmp_path: Path,
) -> None:
    state = tmp_path / "state"
    fence = state / FENCE_FILE_NAME
    for fleet in ("first", "second"):
        (tmp_path / fleet).mkdir()
    async with enroll_master(tmp_path / "first") as first:
        assert await enroll(first.url, await first.tokens.issue_join_token("gpu-1"), state) == 0
        fence.write_text('{"instanceId": "m-first", "epoch": 7}')
        # Enrolled again by the same master (the same CA): the fence stays.
        again = await first.tokens.issue_join_token("gpu-1", reenroll=True)
        assert await enroll(first.url, again, state) == 0
        kept = fence.exists()
    async with enroll_master(tmp_path / "second") as second:
        assert await enroll(second.url, await second.tokens.issue_join_token("gpu-1"), state) == 0

    assert kept
    assert not fence.exists()
