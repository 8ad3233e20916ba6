"""Server versions and flavors: which pairs are tested (doctor), how a flavor's image
is sourced (apt sources renamed to the flavor's Debian release), what is refused."""

import pytest

from bridge.errors import SandboxError
from bridge.lab import images
from bridge.ops import doctor


@pytest.mark.parametrize("version,line", [
    ("11.8.9-MariaDB-0+deb13u1 from Debian-log", "mariadb-11.8"),
    ("10.11.14-MariaDB-0+deb12u2-log", "mariadb-10.11"),
    ("8.0.36", "mysql-8.0"),
])
def test_a_version_string_names_its_line(version, line):
    assert doctor.server_line(version) == line


def test_tested_pairs_pass_and_others_warn_with_the_tested_list():
    assert doctor.pair_check("10.11.14-MariaDB-log", "11.8.9-MariaDB-0+deb13u1").status == "PASS"
    backwards = doctor.pair_check("11.8.9-MariaDB", "10.11.14-MariaDB")
    assert backwards.status == "WARN" and "mariadb-11.8 -> mariadb-11.8" in backwards.detail
    assert "newer" in backwards.fix


def _deb822_sources(tmp_path):
    """A host's sources.list.d as Debian 12 writes it: the main suites and security."""
    listing = tmp_path / "sources.list.d"
    listing.mkdir()
    (listing / "debian.sources").write_text(
        "Types: deb\nURIs: http://mirror.example/debian\nSuites: bookworm bookworm-updates\nComponents: main\n\n"
        "Types: deb\nURIs: http://mirror.example/debian-security\nSuites: bookworm-security\nComponents: main\n")
    return listing


def test_apt_sources_are_the_hosts_debian_ones_renamed_to_the_release(tmp_path):
    listing = _deb822_sources(tmp_path)
    (listing / "other.sources").write_text("Types: deb\nURIs: https://vendor.example/apt\nSuites: bookworm\n")
    one_line = tmp_path / "sources.list"
    one_line.write_text("# deb http://old.example/debian bookworm main\ndeb http://mirror.example/debian bookworm main\n")
    text = images.apt_sources("trixie", (listing, one_line), codename="bookworm")
    assert "Suites: trixie trixie-updates" in text and "Suites: trixie-security" in text
    assert "deb http://mirror.example/debian trixie main" in text
    assert "vendor.example" not in text and "old.example" not in text and "bookworm" not in text
    assert "\n\nTypes: deb\nURIs: http://mirror.example/debian-security" in text  # stanzas stay apart


def test_sid_sources_keep_only_the_suite_itself(tmp_path):
    listing = _deb822_sources(tmp_path)
    one_line = tmp_path / "sources.list"
    one_line.write_text("deb [arch=amd64] http://mirror.example/debian bookworm main\n"
                        "deb http://mirror.example/debian bookworm-updates main\n")
    text = images.apt_sources("sid", (listing, one_line), codename="bookworm")
    assert "Suites: sid\n" in text and "sid-" not in text and "debian-security" not in text
    assert "deb [arch=amd64] http://mirror.example/debian sid main" in text
    assert images.server_kind("mysql-9.7") == "mysql" and images.server_kind("local") == "mariadb"


def test_an_unknown_flavor_is_refused_naming_the_known_ones():
    with pytest.raises(SandboxError, match="mariadb-9.9.*unknown.*local.*mariadb-11.8"):
        images.check_flavor("mariadb-9.9")
