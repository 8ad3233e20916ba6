"""The systemd units in contrib/ and the user-facing text: units that start the commands
with options that exist, secrets kept out of the command line, and no reference to
anything outside the repository."""

import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import click
import pytest

from bridge.cli import main

ROOT = Path(__file__).resolve().parents[2]
NODE_UNITS = [ROOT / "contrib" / f"rdma-bridge-{side}.service" for side in ("primary", "replica")]
TEMPLATES = [ROOT / "contrib" / f"rdma-bridge-{side}@.service" for side in ("primary", "replica")]
ENV_EXAMPLE = ROOT / "contrib" / "channel.env.example"
CHECK_UNIT = ROOT / "contrib" / "rdma-bridge-checksum.service"


def _unit(path: Path) -> dict[str, str]:
    out = {}
    for line in path.read_text().splitlines():
        if "=" in line and not line.startswith(("#", "[")):
            key, value = line.split("=", 1)
            out[key.strip()] = value.strip()
    return out


def test_there_is_a_unit_for_each_side_and_for_the_scheduled_check():
    assert sorted(p.name for p in (ROOT / "contrib").glob("*.service")) == \
        ["rdma-bridge-checksum.service", "rdma-bridge-primary.service", "rdma-bridge-primary@.service",
         "rdma-bridge-replica.service", "rdma-bridge-replica@.service"]


def _command_line(path: Path) -> tuple[dict[str, str], list[str], click.Command, list[str]]:
    """The unit, its ExecStart's words, the command it starts (its options exist and the
    required ones are given), the options it passes."""
    unit = _unit(path)
    argv = shlex.split(unit["ExecStart"])
    assert argv[0].endswith("/rdma-bridge")
    command = main.commands[argv[1]]
    names = {opt for p in command.params if isinstance(p, click.Option) for opt in p.opts}
    options = [a for a in argv[2:] if a.startswith("--")]
    assert options and set(options) <= names, set(options) - names
    required = {p.opts[0] for p in command.params if isinstance(p, click.Option) and p.required and not p.envvar}
    assert required <= set(options)
    # every ${VAR} of the command line is named in the unit's comment, the URL comes from the environment
    text = path.read_text()
    for var in re.findall(r"\$\{?(\w+)\}?", unit["ExecStart"]):
        assert f"#   {var}=" in text
    assert "mysql://" not in unit["ExecStart"]
    assert unit["EnvironmentFile"].startswith("/etc/rdma-bridge/")
    return unit, argv, command, options


@pytest.mark.parametrize("path", NODE_UNITS, ids=lambda p: p.name)
def test_a_unit_starts_its_command_with_options_that_exist_and_no_secret_on_the_command_line(path):
    unit, _, _, options = _command_line(path)
    assert "--secret-file" in options
    assert unit["LimitMEMLOCK"] == "infinity" and unit["Restart"] == "on-failure"
    assert set(unit["RestartPreventExitStatus"].split()) == {"2", "78"}
    assert "DEPRECATED" in path.read_text().splitlines()[0]  # kept one release beside the @ units


def _template_argv(path: Path, channel: str) -> tuple[dict[str, str], dict[str, str], list[str]]:
    """The unit, the example environment file, and ExecStart's words as systemd makes
    them for instance ``channel``: %i replaced, ``$VAR`` split into words at spaces,
    ``${VAR}`` one word."""
    unit = _unit(path)
    env = _unit(ENV_EXAMPLE)
    argv = []
    for word in shlex.split(unit["ExecStart"].replace("%i", channel)):
        if m := re.fullmatch(r"\$(\w+)", word):
            argv += env[m.group(1)].split()
        else:
            argv.append(re.sub(r"\$\{(\w+)\}", lambda m: env[m.group(1)], word))
    return unit, env, argv


@pytest.mark.parametrize("path", TEMPLATES, ids=lambda p: p.name)
def test_a_template_unit_takes_every_setting_from_its_channels_file(path, monkeypatch):
    unit, env, argv = _template_argv(path, "orders")
    assert unit["EnvironmentFile"] == "/etc/rdma-bridge/%i.env" and "mysql://" not in unit["ExecStart"]
    assert argv[0].endswith("/rdma-bridge") and "--secret-file" in argv
    command = main.commands[argv[1]]
    for name, value in env.items():  # the URL and TLS settings come from the environment, as systemd gives it
        monkeypatch.setenv(name, value)
    ctx = command.make_context(argv[1], argv[2:])  # every option exists, its value parses, required ones given
    if command.name == "start-replica":
        assert ctx.params["channel"] == "orders" and ctx.params["workers"] == 4
    assert ctx.params["transport"] == "rdma" and ctx.params["realtime_priority"] == 10
    for var in re.findall(r"\$\{?(\w+)\}?", unit["ExecStart"]):
        assert var in env and f"#   {var}=" in path.read_text()


@pytest.mark.parametrize("path", TEMPLATES, ids=lambda p: p.name)
def test_a_template_unit_runs_unprivileged_hardened_and_fails_once_on_a_setting_that_cannot_work(path):
    unit = _unit(path)
    assert unit["User"] == unit["Group"] == "rdma-bridge"
    assert unit["CapabilityBoundingSet"] == unit["AmbientCapabilities"] == "CAP_SYS_NICE"
    assert unit["LimitMEMLOCK"] == "infinity" and unit["NoNewPrivileges"] == "yes"
    assert unit["ProtectSystem"] == "strict" and unit["ProtectHome"] == "yes" and unit["PrivateDevices"] == "yes"
    assert unit["BindPaths"] == "-/dev/infiniband" and "infiniband" in unit["DeviceAllow"]
    assert unit["Restart"] == "on-failure" and set(unit["RestartPreventExitStatus"].split()) == {"2", "78"}


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed")
@pytest.mark.parametrize("path", TEMPLATES + NODE_UNITS + [CHECK_UNIT], ids=lambda p: p.name)
def test_systemd_accepts_the_unit_without_a_warning(path, tmp_path):
    """systemd-analyze verify, on a copy whose ExecStart names this checkout's command
    (it checks that the binary exists) and, for a template, an instance of it."""
    text = path.read_text().replace("/opt/rdma-bridge/venv/bin/rdma-bridge", str(Path(sys.executable).parent /
                                                                                 "rdma-bridge"))
    name = path.name.replace("@.", "@orders.")
    (tmp_path / name).write_text(text)
    if path == CHECK_UNIT:
        shutil.copy(ROOT / "contrib" / "rdma-bridge-checksum.timer", tmp_path)
    done = subprocess.run(["systemd-analyze", "verify", "--man=no", f"./{name}"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stderr == "", done.stderr


def test_the_check_runs_once_per_timer_throttled_and_exports_its_outcome():
    unit, argv, command, options = _command_line(CHECK_UNIT)
    assert command.name == "checksum" and unit["Type"] == "oneshot"
    assert {"--channel", "--max-rows-per-second", "--textfile"} <= set(options)
    timer = _unit(ROOT / "contrib" / "rdma-bridge-checksum.timer")
    assert timer["OnCalendar"] and timer["RandomizedDelaySec"] and timer["Persistent"] == "true"


def _help_texts(group: click.Group, prefix: list[str]) -> dict[str, str]:
    out = {}
    for name, command in group.commands.items():
        with click.Context(command, info_name=name) as ctx:
            out[" ".join(prefix + [name])] = command.get_help(ctx)
        if isinstance(command, click.Group):
            out.update(_help_texts(command, prefix + [name]))
    return out


OUTSIDE = re.compile(r"\.\./shared|DESIGN\.md|the seed|seed's|seed article|§")


def test_nothing_a_user_reads_points_outside_the_repository():
    docs = {str(p.relative_to(ROOT)): p.read_text() for p in [ROOT / "README.md", *(ROOT / "docs").glob("*.md")]}
    sources = {str(p.relative_to(ROOT)): p.read_text() for p in (ROOT / "bridge").rglob("*.py")}
    helps = _help_texts(main, ["rdma-bridge"])
    assert len(helps) > 10 and "docs/architecture.md" in docs and "docs/operations.md" in docs
    found = {name: OUTSIDE.findall(text) for name, text in {**docs, **sources, **helps}.items()}
    assert not {name: hits for name, hits in found.items() if hits}


def test_the_readme_links_the_docs_and_the_docs_link_what_exists():
    readme = (ROOT / "README.md").read_text()
    assert "docs/architecture.md" in readme and "docs/operations.md" in readme
    for doc in (ROOT / "docs").glob("*.md"):
        for target in re.findall(r"\]\(([^)#:]+)\)", doc.read_text()):
            assert (doc.parent / target).exists(), f"{doc.name} links {target}"


@pytest.mark.parametrize("path", NODE_UNITS, ids=lambda p: p.name)
def test_a_unit_names_the_tls_settings_its_command_reads_from_the_environment(path):
    command = main.commands[shlex.split(_unit(path)["ExecStart"])[1]]
    envvars = {p.envvar for p in command.params if isinstance(p, click.Option) and p.envvar}
    text = path.read_text()
    for var in ("RDMA_BRIDGE_TLS_CERT", "RDMA_BRIDGE_TLS_KEY", "RDMA_BRIDGE_TLS_CA"):
        assert var in envvars and f"#   {var}=" in text
