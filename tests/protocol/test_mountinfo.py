"""The reader of ``/proc/self/mountinfo`` that hostd and the master share: real lines, escapes, garbage."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from mirbad_protocol.support import MountEntry, escape_mountinfo, mount_at, mount_holding, parse_mountinfo


def _kind(entry: MountEntry | None) -> str | None:
    return None if entry is None else entry.fs_type


def test_mountinfo_of_a_real_kernel_line() -> None:
    text = (
        "21 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n"
        "88 21 0:52 / /srv/mirbad/backups rw,nosuid,nodev,noexec,relatime shared:40 - cifs "
        "//nas.local/backups rw,vers=3.1.1,cache=strict,username=backup,uid=10001\n"
        "90 21 0:53 / /mnt/with\\040space rw - nfs4 10.0.0.5:/export rw\n"
        "not a mountinfo line\n"
    )
    entries = parse_mountinfo(text)
    assert [e.mount_point for e in entries] == ["/", "/srv/mirbad/backups", "/mnt/with space"]
    backups = mount_at(entries, "/srv/mirbad/backups")
    assert backups is not None
    assert (backups.fs_type, backups.source, backups.mount_id) == ("cifs", "//nas.local/backups", 88)
    assert mount_at(entries, "/elsewhere") is None


_PATH_TEXT = st.text(st.characters(blacklist_categories=["Cs"]), min_size=1, max_size=30)


@given(point=_PATH_TEXT, source=_PATH_TEXT, optional=st.lists(st.sampled_from(["shared:1", "master:2"])))
def test_mountinfo_reads_back_any_escaped_mount_point(point: str, source: str, optional: list[str]) -> None:
    line = " ".join(
        [
            "30",
            "21",
            "0:1",
            "/",
            escape_mountinfo(f"/{point}"),
            "rw",
            *optional,
            "-",
            "cifs",
            escape_mountinfo(source),
            "rw",
        ]
    )
    (entry,) = parse_mountinfo(f"21 1 8:1 / / rw - ext4 /dev/sda1 rw\n{line}\n")[1:]
    assert entry.mount_point == f"/{point}"
    assert entry.source == source
    assert entry.fs_type == "cifs"


@given(text=st.text(max_size=300))
def test_mountinfo_never_fails_on_garbage(text: str) -> None:
    for entry in parse_mountinfo(text):
        assert isinstance(entry.mount_point, str)


def test_the_mount_holding_a_path_is_the_deepest_one_above_it() -> None:
    text = (
        "21 1 8:1 / / rw - ext4 /dev/sda1 rw\n"
        "40 21 0:40 / /backups rw - ext4 /dev/sdb1 rw\n"
        "41 40 0:41 / /backups rw - cifs //nas/backups rw\n"
        "42 21 0:42 / /backups2 rw - nfs4 nas:/other rw\n"
    )
    entries = parse_mountinfo(text)
    assert _kind(mount_holding(entries, "/backups")) == "cifs"
    assert _kind(mount_holding(entries, "/backups/mirbad")) == "cifs"
    assert _kind(mount_holding(entries, "/backups2/x")) == "nfs4"
    assert _kind(mount_holding(entries, "/srv")) == "ext4"
    assert mount_holding([], "/backups") is None


_SEGMENT = st.text(st.sampled_from("abc/ \\"), min_size=1, max_size=8)


@given(point=_SEGMENT, below=_SEGMENT)
def test_a_path_lands_on_its_own_mount_point_or_below_it(point: str, below: str) -> None:
    mount_point = "/" + point.strip("/") if point.strip("/") else "/data"
    line = f"30 21 0:1 / {escape_mountinfo(mount_point)} rw - nfs nas:/x rw"
    entries = parse_mountinfo(f"21 1 8:1 / / rw - ext4 /dev/sda1 rw\n{line}\n")
    inside = mount_holding(entries, f"{mount_point}/{below}")
    beside = mount_holding(entries, f"{mount_point}x/{below}")
    assert _kind(inside) == "nfs"
    assert _kind(beside) == "ext4"
