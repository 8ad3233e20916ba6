import pytest

from bridge.config import MysqlUrl
from bridge.errors import ConfigError
from bridge.model import Gtid, GtidSet

UUID = "3e11fa47-71ca-11e1-9e33-c80aa9429562"


def test_mariadb_gtid_parses_and_prints():
    g = Gtid.parse("0-1-42")
    assert (g.domain, g.server, g.seq, str(g)) == ("0", 1, 42, "0-1-42")


def test_mysql_gtid_parses_and_prints():
    g = Gtid.parse(f"{UUID.upper()}:7")
    assert (g.domain, g.seq, g.is_mariadb, str(g)) == (UUID, 7, False, f"{UUID}:7")


def test_bad_gtid_is_refused_with_the_text():
    with pytest.raises(ConfigError, match="'x-1'"):
        Gtid.parse("x-1")


def test_mariadb_set_keeps_last_per_domain():
    s = GtidSet.parse("1-2-5,0-1-9").add_text("0-1-10").add_text("2-1-1")
    assert str(s) == "0-1-10,1-2-5,2-1-1"
    assert s.contains(Gtid.parse("0-1-3")) and not s.contains(Gtid.parse("0-1-11"))
    assert not s.contains(Gtid.parse("3-1-1"))


def test_mysql_set_merges_intervals():
    s = GtidSet.parse(f"{UUID}:1-3:5").add_text(f"{UUID}:4").add_text(f"{UUID}:9")
    assert str(s) == f"{UUID}:1-5:9"
    assert s.contains(Gtid.parse(f"{UUID}:5")) and not s.contains(Gtid.parse(f"{UUID}:6"))


def test_empty_set_is_falsy_and_prints_empty():
    assert not GtidSet.parse("") and str(GtidSet.parse(None)) == ""


def test_url_hides_password_everywhere():
    url = MysqlUrl.parse("mysql://app:s3cret%21@db.example:3307")
    assert url.password == "s3cret!" and url.port == 3307
    assert "s3cret" not in str(url) and "s3cret" not in repr(url)


def test_url_password_from_environment(monkeypatch):
    monkeypatch.setenv("PW_FOR_TEST", "fromenv")
    assert MysqlUrl.parse("mysql://app@h:1", "PW_FOR_TEST").password == "fromenv"


def test_bad_url_error_masks_password():
    with pytest.raises(ConfigError) as err:
        MysqlUrl.parse("http://app:hunter2@h:1")
    assert "hunter2" not in str(err.value)


def test_a_set_names_its_tags():
    tagged = "06e2eacb-ef39-11f1-a512-02fc00000001:1-57437:bridge_test:1-2:other:5"
    assert GtidSet.parse(tagged).tags == ("bridge_test", "other")
    assert GtidSet.parse("06e2eacb-ef39-11f1-a512-02fc00000001:1-3").tags == GtidSet.parse("0-1-5").tags == ()


def test_contains_all_in_both_gtid_forms():
    from bridge.model import GtidSet

    assert GtidSet.parse("0-1-10,1-1-5").contains_all(GtidSet.parse("0-1-9"))
    assert not GtidSet.parse("0-1-10").contains_all(GtidSet.parse("0-1-9,1-1-1"))
    u = "3e11fa47-71ca-11e1-9e33-c80aa9429562"
    assert GtidSet.parse(f"{u}:1-10:20-30").contains_all(GtidSet.parse(f"{u}:2-5:21"))
    assert not GtidSet.parse(f"{u}:1-10").contains_all(GtidSet.parse(f"{u}:9-11"))


def test_url_options_for_tls_and_option_files(tmp_path):
    import pytest

    from bridge.config import MysqlUrl
    from bridge.errors import ConfigError
    from bridge.ops.certs import make_ca

    ca, cnf = make_ca(tmp_path), tmp_path / "my.cnf"
    cnf.write_text("[client]\npassword=from-file\n")
    url = MysqlUrl.parse(f"mysql://u:pw@h:3307?ssl-ca={ca}&ssl-verify-cert=1&defaults-file={cnf}")
    args = url.connect_args()
    assert args["ssl_ca"] == str(ca) and args["ssl_verify_cert"] is True
    assert args["read_default_file"] == str(cnf) and args["read_default_group"] == "client"
    assert "pw" not in str(url) and f"ssl-ca={ca}" in str(url)
    with pytest.raises(ConfigError, match="unknown option 'sslca'"):
        MysqlUrl.parse("mysql://u:secret@h?sslca=x")
    with pytest.raises(ConfigError, match="ssl-key file '/nope' does not exist") as err:
        MysqlUrl.parse("mysql://u:secret@h?ssl-key=/nope")
    assert "secret" not in str(err.value)
    with pytest.raises(ConfigError, match=f"ssl-ca '{cnf}' is not a PEM CA certificate") as err:
        MysqlUrl.parse(f"mysql://u:secret@h?ssl-ca={cnf}")  # named at start, not by the first connection
    assert "secret" not in str(err.value)


def test_a_sql_mode_keeps_only_the_names_the_target_flavor_takes():
    from bridge.server.flavor import Flavor
    mariadb_default = "STRICT_TRANS_TABLES,ERROR_FOR_DIVISION_BY_ZERO,NO_AUTO_CREATE_USER,NO_ENGINE_SUBSTITUTION"
    mysql, mariadb = Flavor.from_version("9.7.4"), Flavor.from_version("10.11.19-MariaDB")
    assert mysql.sql_mode(mariadb_default) == "STRICT_TRANS_TABLES,ERROR_FOR_DIVISION_BY_ZERO,NO_ENGINE_SUBSTITUTION"
    assert mysql.sql_mode("ansi_quotes,oracle,,Time_Round_Fractional") == "ansi_quotes"
    assert mariadb.sql_mode(mariadb_default) == mariadb_default
    assert mariadb.sql_mode("TIME_TRUNCATE_FRACTIONAL,ONLY_FULL_GROUP_BY") == "ONLY_FULL_GROUP_BY"
    assert mysql.sql_mode("") == ""
