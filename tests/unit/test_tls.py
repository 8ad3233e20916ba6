"""The bridge's TLS files are checked before anything starts (key private and
matching, chain, expiry), and the options go together; real certificates made
by openssl, real handshakes in memory."""

import os

import pytest
from click.testing import CliRunner

from bridge.cli import main
from bridge.config import TlsFiles
from bridge.errors import ConfigError
from bridge.ops.certs import make_ca, make_cert, make_set
from bridge.ops.doctor import tls_checks
from bridge.transport.tls import check_files, client_context, server_context


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    """Two CAs; certificates of the first: good, expired, expiring soon; one of the second."""
    base = tmp_path_factory.mktemp("certs")
    good = make_set(base / "one", ["localhost", "127.0.0.1"])
    other = make_set(base / "two", ["localhost"])
    expired = make_cert(base / "one", "expired", ["localhost"], good.ca, days=-1)
    soon = make_cert(base / "one", "soon", ["localhost"], good.ca, days=10)
    return {"good": good, "other": other, "expired": expired, "soon": soon}


def files(cert, key=None, ca=None) -> TlsFiles:
    return TlsFiles(str(cert.cert), str(key or cert.key), str(ca or cert.ca))


def test_a_good_set_passes_with_no_warning(certs):
    assert check_files(files(certs["good"])) == []
    assert [c.status for c in tls_checks(files(certs["good"]))] == ["PASS"]
    # the contexts a session uses: TLS 1.2 at least, the peer always verified
    for ctx in (client_context(files(certs["good"])), server_context(files(certs["good"]))):
        assert ctx.minimum_version.name == "TLSv1_2" and ctx.verify_mode.name == "CERT_REQUIRED"


def test_a_world_readable_key_is_refused_with_the_fix(certs, tmp_path):
    key = tmp_path / "key.pem"
    key.write_bytes(certs["good"].key.read_bytes())
    key.chmod(0o644)
    with pytest.raises(ConfigError, match=f"readable by every user .*0644.*chmod 600 {key}"):
        check_files(files(certs["good"], key=key))
    key.chmod(0o640)  # its group may read it (an ssl-cert group), the world not
    assert check_files(files(certs["good"], key=key)) == []


def test_a_key_of_another_certificate_is_refused(certs):
    with pytest.raises(ConfigError, match="--tls-key .* does not match it"):
        check_files(files(certs["good"], key=certs["other"].key))


def test_a_certificate_of_another_ca_is_refused(certs):
    with pytest.raises(ConfigError, match="does not verify against --tls-ca .*(self-signed|unable to get)"):
        check_files(files(certs["good"], ca=certs["other"].ca))
    assert tls_checks(files(certs["good"], ca=certs["other"].ca))[0].status == "FAIL"


def test_an_expired_certificate_is_refused_and_one_expiring_soon_warned(certs):
    with pytest.raises(ConfigError, match="certificate has expired"):
        check_files(files(certs["expired"]))
    warnings = check_files(files(certs["soon"]))
    assert len(warnings) == 1 and "expires in 10 days" in warnings[0]
    assert [c.status for c in tls_checks(files(certs["soon"]))] == ["WARN"]


def test_a_missing_file_is_named(certs, tmp_path):
    with pytest.raises(ConfigError, match=f"--tls-ca {tmp_path}/nope.pem: No such file"):
        check_files(files(certs["good"], ca=tmp_path / "nope.pem"))


def test_the_options_go_together_and_doctor_checks_them(certs):
    runner = CliRunner()
    out = runner.invoke(main, ["start-replica", "--target", "mysql://u@127.0.0.1:1", "--listen", "127.0.0.1:0",
                               "--tls-cert", str(certs["good"].cert)])
    assert out.exit_code == 2 and "--tls-cert, --tls-key and --tls-ca go together" in out.output
    good = files(certs["good"])
    out = runner.invoke(main, ["doctor", "--transport", "tcp", "--tls-cert", good.cert, "--tls-key", good.key,
                               "--tls-ca", certs["other"].ca.as_posix()])
    assert out.exit_code == 1 and "FAIL" in out.output and "does not verify against --tls-ca" in out.output


def test_tls_certs_makes_one_ca_for_two_hosts(tmp_path):
    runner = CliRunner()
    for name in ("replica.example", "primary.example"):
        out = runner.invoke(main, ["tls-certs", "--out", str(tmp_path), "--name", name, "--name", "10.0.0.2"])
        assert out.exit_code == 0, out.output
        assert f"--tls-cert {tmp_path}/{name}.pem" in out.output
    for name in ("replica.example", "primary.example", "ca"):
        assert os.stat(tmp_path / f"{name}-key.pem").st_mode & 0o077 == 0
        if name != "ca":
            assert check_files(TlsFiles(str(tmp_path / f"{name}.pem"), str(tmp_path / f"{name}-key.pem"),
                                        str(tmp_path / "ca.pem"))) == []
    make_ca(tmp_path / "elsewhere")  # a CA of its own does not verify the others
    with pytest.raises(ConfigError):
        check_files(TlsFiles(str(tmp_path / "replica.example.pem"), str(tmp_path / "replica.example-key.pem"),
                             str(tmp_path / "elsewhere" / "ca.pem")))
