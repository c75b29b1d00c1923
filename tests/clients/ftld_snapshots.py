#!/usr/bin/python3
"""Tier 3: snapshots (issue 4) through ftlctl and real NBD clients against the
real ftld: content and rollback, activation as an NBD export (nbdinfo --list,
ftlctl exports), deactivation under a connected client (ESHUTDOWN), delete
refused while active and --force, bad names, persistence of the catalogue,
lineage, activated exports and their data across a clean restart and
kill -9, and an ext4 snapshot taken under fsfreeze, mounted read-only from
its activated export."""

import hashlib
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ftld_fs import Stack, check_files, fsck, preflight, write_files  # noqa: E402
from ftld_testlib import main, need_tool  # noqa: E402

KiB, MiB = 1 << 10, 1 << 20


def connect(d, export=""):
    import nbd
    h = nbd.NBD()
    h.connect_uri(d.uri(export))
    return h


def pattern(tag, length):
    """`length` bytes of a recognisable pattern naming `tag`."""
    unit = (f"<{tag}>" * 64).encode()
    return (unit * (length // len(unit) + 1))[:length]


def write(d, data, offset, export=""):
    h = connect(d, export)
    h.pwrite(data, offset)
    h.flush()
    h.shutdown()


def read(d, length, offset, export=""):
    h = connect(d, export)
    out = h.pread(length, offset)
    h.shutdown()
    return out


def ctl_fail(d, *args):
    """Runs ftlctl expecting exit 1 (the daemon answered an error); returns stderr."""
    r = d.env.run([d.env.ftlctl, "--control", d.control, *args], check=False)
    assert r.returncode == 1, f"ftlctl {args}: expected exit 1, got {r.returncode}: " \
                              f"{r.stdout}{r.stderr}"
    assert r.stderr.startswith("ftlctl: "), r.stderr
    return r.stderr


def ctl_text(d, *args):
    """Runs ftlctl without --json; returns stdout."""
    return d.env.run([d.env.ftlctl, "--control", d.control, *args]).stdout


def snapshots(d, volume=None):
    args = ["snapshot", "list"] + (["--volume", volume] if volume else [])
    return {s["ref"]: s for s in d.ctl(*args)["snapshots"]}


def export_names(d):
    return [e["name"] for e in d.ctl("exports")["exports"]]


def nbdinfo_list(env, d):
    out = json.loads(env.run(["nbdinfo", "--list", "--json", d.uri()]).stdout)
    return {e["export-name"]: e for e in out["exports"]}


def test_content_activate_rollback(env):
    d = env.start_ftld(size="1G")
    a, b = pattern("A", MiB), pattern("B", MiB)
    write(d, a, 8 * MiB)
    r = d.ctl("snapshot", "create", "s1")
    s = r["snapshot"]
    assert (s["name"], s["volume"], s["ref"]) == ("s1", "ftl0", "ftl0@s1"), s
    assert s["seq"] > 0 and s["created_unix_ns"] > 0, s
    write(d, b, 8 * MiB)

    r = d.ctl("snapshot", "activate", "s1")
    e = r["export"]
    assert e["name"] == "ftl0-s1", e          # default name VOLUME-SNAPSHOT
    assert e["read_only"] is False and e["volume"] == "ftl0-s1", e
    assert read(d, MiB, 8 * MiB, "ftl0-s1") == a
    assert read(d, MiB, 8 * MiB) == b
    assert read(d, MiB, 8 * MiB, "ftl0") == b
    # Writes to the activated export change neither the snapshot nor the volume.
    c = pattern("C", 64 * KiB)
    write(d, c, 8 * MiB, "ftl0-s1")
    assert read(d, 64 * KiB, 8 * MiB, "ftl0-s1") == c
    assert read(d, MiB, 8 * MiB) == b
    assert snapshots(d)["ftl0@s1"]["active_export"] == "ftl0-s1"

    # Rollback is refused while a client transmits on the volume, through the
    # "" alias as well as the named export; --force goes ahead.
    for export in ["", "ftl0"]:
        h = connect(d, export)
        err = ctl_fail(d, "snapshot", "rollback", "s1")
        assert "connected" in err and "force" in err, err
        h.shutdown()
    assert read(d, MiB, 8 * MiB) == b
    h = connect(d)
    r = d.ctl("snapshot", "rollback", "s1", "--force")
    assert r["volume"] == "ftl0" and r["clients_connected"] == 1, r
    h.shutdown()
    assert read(d, MiB, 8 * MiB) == a
    # The activated export is untouched by the rollback.
    assert read(d, 64 * KiB, 8 * MiB, "ftl0-s1") == c
    # Without clients no --force is needed; VOL@NAME works too.
    write(d, b, 8 * MiB)
    out = ctl_text(d, "snapshot", "rollback", "ftl0@s1")
    assert "rolled back ftl0 to ftl0@s1" in out, out
    assert read(d, MiB, 8 * MiB) == a
    assert d.stop() == 0


def test_list_exports_and_read_only_activation(env):
    need_tool("nbdinfo")
    import nbd
    d = env.start_ftld(size="1G")
    write(d, pattern("A", MiB), 0)
    d.ctl("snapshot", "create", "first")
    write(d, pattern("B", 4 * MiB), 4 * MiB)
    d.ctl("snapshot", "create", "second")
    write(d, pattern("C", 2 * MiB), 4 * MiB)   # "second" now holds 2 MiB alone

    snaps = snapshots(d)
    assert list(snaps) == ["ftl0@first", "ftl0@second"], snaps
    assert snaps["ftl0@first"]["seq"] < snaps["ftl0@second"]["seq"], snaps
    assert snaps["ftl0@second"]["exclusive_bytes"] >= 2 * MiB, snaps
    assert all(s["active_export"] is None for s in snaps.values()), snaps

    r = d.ctl("snapshot", "activate", "first", "--export", "old", "--read-only")
    assert r["export"]["name"] == "old" and r["export"]["read_only"] is True, r
    listed = nbdinfo_list(env, d)
    assert set(listed) == {"ftl0", "", "old"}, listed
    assert listed["old"]["is_read_only"] is True, listed["old"]
    assert listed["old"]["export-size"] == listed["ftl0"]["export-size"], listed
    assert "ftl0@first" in listed["old"].get("description", ""), listed["old"]
    exports = {e["name"]: e for e in d.ctl("exports")["exports"]}
    assert exports["old"]["read_only"] is True and exports["old"]["volume"] == "old", exports
    assert snapshots(d)["ftl0@first"]["active_export"] == "old"

    # Human output: aligned table with units and the active export.
    text = ctl_text(d, "snapshot", "list")
    lines = text.splitlines()
    assert lines[0].split()[:2] == ["NAME", "VOLUME"], text
    assert "EXCLUSIVE" in lines[0] and "ACTIVE EXPORT" in lines[0], text
    row = [l for l in lines if l.startswith("first ")][0]
    assert row.rstrip().endswith("old") and "B" in row, text
    assert "old" in ctl_text(d, "exports")

    # Read-only: EPERM on writes, reads fine.
    h = connect(d, "old")
    assert h.is_read_only()
    h.set_strict_mode(0)
    try:
        h.pwrite(b"x" * 4096, 0)
        raise AssertionError("write to a read-only snapshot export succeeded")
    except nbd.Error as e:
        assert e.errno == "EPERM", e
    assert h.pread(MiB, 0) == pattern("A", MiB)
    h.shutdown()

    # A snapshot of the activated export: lineage forms a tree.
    d.ctl("snapshot", "deactivate", "old")
    d.ctl("snapshot", "activate", "first", "--export", "fork")
    write(d, pattern("F", MiB), 0, "fork")
    r = d.ctl("snapshot", "create", "f1", "--volume", "fork")
    assert r["snapshot"]["parent"] == "ftl0@first", r
    assert snapshots(d, "fork")["fork@f1"]["parent"] == "ftl0@first"
    assert set(snapshots(d)) == {"ftl0@first", "ftl0@second", "fork@f1"}
    # The fork's snapshot outlives the fork and can still be activated.
    d.ctl("snapshot", "deactivate", "fork")
    assert set(snapshots(d, "fork")) == {"fork@f1"}
    d.ctl("snapshot", "activate", "fork@f1", "--export", "again")
    assert read(d, MiB, 0, "again") == pattern("F", MiB)
    assert d.ctl("snapshot", "list", "--volume", "again")["snapshots"] == []
    assert d.stop() == 0


def test_deactivate_gives_eshutdown(env):
    need_tool("nbdinfo")
    import nbd
    d = env.start_ftld(size="1G")
    write(d, pattern("A", MiB), 0)
    d.ctl("snapshot", "create", "s")
    d.ctl("snapshot", "activate", "s", "--export", "snap")
    h = connect(d, "snap")
    assert h.pread(MiB, 0) == pattern("A", MiB)
    h.pwrite(pattern("W", 4096), 0)
    r = d.ctl("snapshot", "deactivate", "snap")
    assert r["deactivated"] == "snap" and r["volume"] == "snap", r
    for fn, args in [(h.pread, (4096, 0)), (h.pwrite, (b"y" * 4096, 0)), (h.flush, ())]:
        try:
            fn(*args)
            raise AssertionError(f"{fn.__name__} on a deactivated export succeeded")
        except nbd.Error as e:
            assert e.errno == "ESHUTDOWN", (fn.__name__, e)
    h.shutdown()
    assert "snap" not in nbdinfo_list(env, d)
    assert "snap" not in export_names(d)
    assert snapshots(d)["ftl0@s"]["active_export"] is None
    r = env.run(["nbdinfo", d.uri("snap")], check=False)
    assert r.returncode != 0
    # Deactivating it again, the primary or an unknown export is refused.
    assert "no export" in ctl_fail(d, "snapshot", "deactivate", "snap")
    assert "primary" in ctl_fail(d, "snapshot", "deactivate", "ftl0")
    assert "primary" in ctl_fail(d, "snapshot", "deactivate", "")
    # The snapshot itself still reads as before: activate again.
    d.ctl("snapshot", "activate", "s", "--export", "snap")
    assert read(d, MiB, 0, "snap") == pattern("A", MiB)
    assert d.stop() == 0


def test_delete_refused_while_active_and_force(env):
    d = env.start_ftld(size="1G")
    write(d, pattern("A", MiB), 0)
    d.ctl("snapshot", "create", "s")
    d.ctl("snapshot", "create", "t")
    d.ctl("snapshot", "activate", "s")
    err = ctl_fail(d, "snapshot", "delete", "s")
    assert "active" in err and "ftl0-s" in err and "force" in err, err
    assert "ftl0@s" in snapshots(d) and "ftl0-s" in export_names(d)
    h = connect(d, "ftl0-s")
    r = d.ctl("snapshot", "delete", "s", "--force")
    assert r["deleted"] == "ftl0@s" and r["deactivated"] == ["ftl0-s"], r
    import nbd
    try:
        h.pread(4096, 0)
        raise AssertionError("read on a force-deleted snapshot's export succeeded")
    except nbd.Error as e:
        assert e.errno == "ESHUTDOWN", e
    h.shutdown()
    assert list(snapshots(d)) == ["ftl0@t"]
    assert "ftl0-s" not in export_names(d)
    out = ctl_text(d, "snapshot", "delete", "t")
    assert "deleted snapshot ftl0@t" in out, out
    assert snapshots(d) == {}
    ctl_fail(d, "snapshot", "delete", "t")
    assert read(d, MiB, 0) == pattern("A", MiB)
    assert d.stop() == 0


def test_bad_names_and_requests(env):
    d = env.start_ftld(size="1G")
    for bad in ["", "has space", "x" * 65, "../etc", "a/b", "é", "a\nb", "tab\t"]:
        assert "bad snapshot name" in ctl_fail(d, "snapshot", "create", "--", bad)
    replies = d.control_raw(b'{"cmd":"snapshot","action":"create","name":"a@b"}\n')
    assert not replies[0]["ok"] and replies[0]["code"] == "INVALID_ARGUMENT", replies
    assert snapshots(d) == {}
    d.ctl("snapshot", "create", "ok.name-1_x")
    err = ctl_fail(d, "snapshot", "create", "ok.name-1_x")
    assert "exist" in err.lower(), err
    assert "nope" in ctl_fail(d, "snapshot", "create", "s", "--volume", "nope")
    ctl_fail(d, "snapshot", "activate", "missing")
    ctl_fail(d, "snapshot", "rollback", "missing")
    ctl_fail(d, "snapshot", "delete", "missing")
    ctl_fail(d, "snapshot", "activate", "ok.name-1_x", "--export", "bad name")
    # An export name that exists (the primary's) is refused, nothing changes.
    err = ctl_fail(d, "snapshot", "activate", "ok.name-1_x", "--export", "ftl0")
    assert "exists" in err, err
    assert export_names(d) == ["ftl0", ""], export_names(d)
    assert snapshots(d)["ftl0@ok.name-1_x"]["active_export"] is None
    # Usage errors are ftlctl's own (exit 2).
    for args in [["snapshot"], ["snapshot", "frob"], ["snapshot", "create"],
                 ["snapshot", "create", "a", "b"], ["snapshot", "list", "--bogus"],
                 ["snapshot", "deactivate"]]:
        r = env.run([env.ftlctl, "--control", d.control, *args], check=False)
        assert r.returncode == 2, (args, r.returncode, r.stderr)
    # Raw protocol: clear errors, connection stays usable.
    replies = d.control_raw(b'{"cmd":"snapshot"}\n'
                            b'{"cmd":"snapshot","action":"zap"}\n'
                            b'{"cmd":"snapshot","action":"create"}\n'
                            b'{"cmd":"snapshot","action":"create","name":7}\n'
                            b'{"cmd":"snapshot","action":"delete","name":"x","force":"yes"}\n'
                            b'{"cmd":"snapshot","action":"list","id":3}\n')
    assert [r["ok"] for r in replies] == [False] * 5 + [True], replies
    assert "action" in replies[0]["error"] and "create" in replies[0]["error"], replies[0]
    assert "zap" in replies[1]["error"], replies[1]
    assert "name" in replies[2]["error"] and replies[2]["code"] == "INVALID_ARGUMENT", replies[2]
    assert "string" in replies[3]["error"], replies[3]
    assert "force" in replies[4]["error"], replies[4]
    assert replies[5]["id"] == 3 and len(replies[5]["snapshots"]) == 1, replies[5]
    assert d.stop() == 0


def test_snapshot_point_in_time_under_writes(env):
    """Every write acknowledged before the create request is in the snapshot,
    none issued after its reply is: a writer stamps block 0 with 1, 2, 3...
    while snapshots are taken."""
    import random
    import threading
    import time
    d = env.start_ftld(size="1G")
    state = {"issued": 0, "acked": 0, "stop": False, "error": None}

    def writer():
        h = connect(d)
        try:
            i = 0
            while not state["stop"]:
                i += 1
                state["issued"] = i
                h.pwrite(f"{i:012d}".encode().ljust(4096, b"."), 0)
                state["acked"] = i
        except Exception as e:  # reported below
            state["error"] = e
        h.shutdown()

    t = threading.Thread(target=writer)
    t.start()
    bounds = []
    try:
        for k in range(10):
            time.sleep(random.uniform(0.01, 0.1))
            lo = state["acked"]
            d.ctl("snapshot", "create", f"p{k}")
            hi = state["issued"]
            bounds.append((lo, hi))
    finally:
        state["stop"] = True
        t.join(60)
    assert state["error"] is None, state["error"]
    for k, (lo, hi) in enumerate(bounds):
        d.ctl("snapshot", "activate", f"p{k}", "--export", f"p{k}", "--read-only")
        v = int(read(d, 4096, 0, f"p{k}")[:12])
        assert lo <= v <= hi, (k, lo, v, hi)
    assert bounds[-1][1] > 20, bounds   # the writer really ran meanwhile
    assert d.stop() == 0


def check_state(d, a, b, c):
    """The state built by test_persistence, checked after each restart."""
    snaps = snapshots(d)
    assert {"ftl0@s1", "old@s2"} <= set(snaps), snaps
    assert snaps["old@s2"]["parent"] == "ftl0@s1", snaps
    assert snaps["ftl0@s1"]["active_export"] == "old", snaps
    exports = {e["name"]: e for e in d.ctl("exports")["exports"]}
    assert "old" in exports and exports["old"]["read_only"] is False, exports
    assert read(d, MiB, 0) == b
    assert read(d, MiB, 0, "old") == a
    assert read(d, MiB, 2 * MiB, "old") == c
    assert read(d, MiB, 2 * MiB) == bytes(MiB)


def test_persistence_clean_restart_and_kill9(env):
    need_tool("nbdinfo")
    d = env.start_ftld(size="1G")
    a, b, c = pattern("A", MiB), pattern("B", MiB), pattern("C", MiB)
    write(d, a, 0)
    d.ctl("snapshot", "create", "s1")
    write(d, b, 0)
    d.ctl("snapshot", "activate", "s1", "--export", "old")
    write(d, c, 2 * MiB, "old")
    d.ctl("snapshot", "create", "s2", "--volume", "old")
    check_state(d, a, b, c)
    before = snapshots(d)

    assert d.stop() == 0
    d2 = env.ftld_process(backing=d.backing).start()
    assert "clean" in d2.ctl("status")["open_report"]
    check_state(d2, a, b, c)
    after = snapshots(d2)
    for ref in before:
        for k in ["name", "volume", "created_unix_ns", "seq", "parent"]:
            assert before[ref][k] == after[ref][k], (ref, k, before[ref], after[ref])
    assert "old" in nbdinfo_list(env, d2)

    # Changes after the restart, then kill -9: every acknowledged snapshot
    # operation is durable (no flush, no checkpoint).
    dd = pattern("D", MiB)
    write(d2, dd, 4 * MiB)
    d2.ctl("snapshot", "create", "s3")
    d2.ctl("snapshot", "activate", "s3", "--export", "third", "--read-only")
    d2.ctl("snapshot", "create", "gone")
    d2.ctl("snapshot", "delete", "gone")
    d2.kill9()
    d3 = env.ftld_process(backing=d.backing).start()
    assert "clean" not in d3.ctl("status")["open_report"]
    snaps = snapshots(d3)
    assert set(snaps) == {"ftl0@s1", "old@s2", "ftl0@s3"}, snaps
    assert snaps["ftl0@s3"]["active_export"] == "third", snaps
    listed = nbdinfo_list(env, d3)
    assert set(listed) == {"ftl0", "", "old", "third"}, listed
    assert listed["third"]["is_read_only"] is True, listed["third"]
    assert listed["old"]["is_read_only"] is False, listed["old"]
    assert read(d3, MiB, 4 * MiB, "third") == dd
    assert read(d3, MiB, 0, "third") == b
    check_state(d3, a, b, c)

    # Deactivation and rollback survive kill -9 too.
    d3.ctl("snapshot", "deactivate", "third")
    d3.ctl("snapshot", "rollback", "s1")
    d3.kill9()
    d4 = env.ftld_process(backing=d.backing).start()
    assert "third" not in export_names(d4)
    assert snapshots(d4)["ftl0@s3"]["active_export"] is None
    assert read(d4, MiB, 0) == a
    assert read(d4, MiB, 4 * MiB) == bytes(MiB)
    assert read(d4, MiB, 2 * MiB, "old") == c
    assert d4.stop() == 0


def test_snapshot_ops_kill9_loop(env):
    """Random snapshot create/delete/activate/rollback with writes, the daemon
    killed at random moments: after each restart the catalogue holds every
    acknowledged snapshot and none that was acknowledged deleted (only the
    one unacknowledged operation may go either way), activated exports are
    back, and every snapshot reads as the volume did when it was taken."""
    import random
    import threading
    import time
    iterations = int(os.environ.get("FTLD_SNAPSHOT_CRASHES", "15"))
    rng = random.Random(int(os.environ.get("FTLD_SNAPSHOT_SEED", str(int(time.time())))))
    d = env.start_ftld(size="1G")
    model = {}            # snapshot -> value of block 0 when it was taken
    activated = set()     # acknowledged activations (export a-NAME)
    counter = [0]

    def driver(d, seed, log):
        """Runs until the daemon dies; appends (op, name, value, acked)."""
        r = random.Random(seed)
        try:
            h = connect(d)
            while True:
                counter[0] += 1
                n = counter[0]
                h.pwrite(f"{n:012d}".encode().ljust(4096, b"#"), 0)
                names = sorted(model)
                x = r.random()
                if x < 0.5 or not names:
                    op, name = "create", f"s{n}"
                    args = ["snapshot", "create", name]
                elif x < 0.7:
                    op, name = "delete", r.choice(names)
                    args = ["snapshot", "delete", name, "--force"]
                elif x < 0.85:
                    op, name = "activate", r.choice(names)
                    args = ["snapshot", "activate", name, "--export", f"a-{name}"]
                else:
                    op, name = "rollback", r.choice(names)
                    args = ["snapshot", "rollback", name, "--force"]
                log.append([op, name, n, False])
                p = subprocess.run([env.ftlctl, "--control", d.control, *args],
                                   capture_output=True, text=True, timeout=60)
                if p.returncode == 2:
                    return            # the daemon is gone
                if p.returncode == 0:
                    log[-1][3] = True
                    if op == "create":
                        model[name] = n
                    elif op == "delete":
                        model.pop(name)
                        activated.discard(name)
                    elif op == "activate":
                        activated.add(name)
                elif op != "activate":   # activating an active one is refused
                    raise AssertionError(f"{args}: {p.stderr}")
        except Exception as e:  # nbd errors once the daemon is killed
            log.append(["error", str(e), 0, False])

    for it in range(iterations):
        log = []
        t = threading.Thread(target=driver, args=(d, rng.random(), log))
        t.start()
        time.sleep(rng.uniform(0.1, 1.0))
        d.kill9()
        t.join(60)
        assert not t.is_alive()
        d = env.ftld_process(backing=d.backing).start()
        ops = [o for o in log if o[0] != "error"]
        pending = ops[-1] if ops and not ops[-1][3] else None
        snaps = {x["name"]: x for x in d.ctl("snapshot", "list")["snapshots"]}
        # The unacknowledged last operation may or may not have happened.
        if pending and pending[0] == "create" and pending[1] in snaps:
            model[pending[1]] = pending[2]
        if pending and pending[0] == "delete" and pending[1] not in snaps:
            model.pop(pending[1])
            activated.discard(pending[1])
        if pending and pending[0] == "delete" and pending[1] in snaps:
            # delete --force is one note: if the snapshot is still there, its
            # activation is too (never deactivated but not deleted).
            assert (snaps[pending[1]].get("active_export") is not None) == \
                (pending[1] in activated), (it, pending, snaps[pending[1]])
        if pending and pending[0] == "activate" and snaps.get(pending[1], {}).get(
                "active_export"):
            activated.add(pending[1])
        assert set(snaps) == set(model), (it, sorted(set(snaps) ^ set(model)), pending)
        exports = set(export_names(d))
        for name in activated:
            assert snaps[name]["active_export"] == f"a-{name}", \
                (it, name, snaps[name], [o for o in log if o[1] == name], pending)
            assert f"a-{name}" in exports, (it, name, exports)
        for name, value in model.items():
            export = snaps[name]["active_export"]
            if export is None:
                export = f"a-{name}"
                d.ctl("snapshot", "activate", name, "--export", export, "--read-only")
                activated.add(name)
            got = read(d, 4096, 0, export)[:12]
            # An activated export is writable but nobody writes to it here.
            assert int(got) == value, (it, name, int(got), value)
    assert d.stop() == 0
    ftl_tool = os.path.join(os.path.dirname(env.ftlctl), "ftl-tool")
    if os.path.exists(ftl_tool):
        r = env.run([ftl_tool, "check", d.backing], check=False)
        assert r.returncode == 0, r.stdout + r.stderr


def test_ext4_frozen_snapshot_mounted_read_only(env):
    preflight(env, "fsfreeze")
    d = env.start_ftld(size="2G")
    live = Stack(env, d)
    live.up()
    env.run(["mkfs.ext4", "-q", "-F", live.loop], timeout=600)
    live.mount()
    old = write_files(live.mnt, n=30)
    # Filesystem-consistent snapshot: freeze, snapshot, thaw.
    env.run(["fsfreeze", "-f", live.mnt])
    try:
        d.ctl("snapshot", "create", "fs1")
    finally:
        env.run(["fsfreeze", "-u", live.mnt])
    # Change the files after the snapshot.
    new = {}
    for i in range(0, 30, 2):
        name = f"dir/file{i}"
        data = os.urandom(8192 + i)
        with open(os.path.join(live.mnt, name), "wb") as f:
            f.write(data)
        new[name] = hashlib.sha256(data).hexdigest()
    os.unlink(os.path.join(live.mnt, "dir/file1"))
    with open(os.path.join(live.mnt, "added"), "wb") as f:
        f.write(b"after the snapshot\n")
    env.run(["sync", "-f", live.mnt])

    d.ctl("snapshot", "activate", "fs1", "--export", "fs1", "--read-only")
    snap = Stack(env, d, export="fs1", read_only=True)
    snap.up()
    fsck(env, snap.loop)
    snap.mount("ro,noload")
    check_files(snap.mnt, old)
    assert not os.path.exists(os.path.join(snap.mnt, "added"))
    snap.umount()
    fsck(env, snap.loop)
    snap.down()

    # The live filesystem has the changes and is clean too.
    changed = dict(old)
    changed.update(new)
    del changed["dir/file1"]
    check_files(live.mnt, changed)
    assert os.path.exists(os.path.join(live.mnt, "added"))
    live.umount()
    fsck(env, live.loop)
    live.down()
    d.ctl("snapshot", "deactivate", "fs1")
    assert d.stop() == 0


def test_list_shows_every_active_export(env):
    d = env.start_ftld(size="256M")
    d.ctl("snapshot", "create", "s")
    d.ctl("snapshot", "activate", "s", "--export", "e1")
    d.ctl("snapshot", "activate", "s", "--export", "e2", "--read-only")
    s = snapshots(d)["ftl0@s"]
    # The first activation stays in the old fields; the lists hold all.
    assert s["active_export"] == "e1" and s["active_volume"] == "e1", s
    assert s["active_exports"] == ["e1", "e2"], s
    assert s["active_volumes"] == ["e1", "e2"], s
    d.ctl("snapshot", "create", "idle")
    i = snapshots(d)["ftl0@idle"]
    assert i["active_export"] is None and i["active_exports"] == [], i
    rows = {l.split()[0]: l for l in ctl_text(d, "snapshot", "list").splitlines()[1:]}
    assert rows["s"].split()[-1] == "e1,e2", rows
    assert rows["idle"].split()[-1] == "-", rows
    d.ctl("snapshot", "deactivate", "e1")
    s = snapshots(d)["ftl0@s"]
    assert s["active_export"] == "e2" and s["active_exports"] == ["e2"], s
    assert d.stop() == 0


def test_rollback_of_missing_snapshot_is_not_found(env):
    d = env.start_ftld(size="256M")
    d.ctl("snapshot", "create", "s")
    h = connect(d)  # a client that --force would override
    for name in ["nope", "ftl0@nope"]:
        err = ctl_fail(d, "snapshot", "rollback", name)
        assert "nope" in err and "connected" not in err and "force" not in err, err
    r = d.control_raw(b'{"cmd":"snapshot","action":"rollback","name":"nope"}\n')[0]
    assert r["ok"] is False and r["code"] == "NOT_FOUND", r
    r = d.control_raw(b'{"cmd":"snapshot","action":"rollback","name":"nope","force":true}\n')[0]
    assert r["code"] == "NOT_FOUND", r
    # An existing one still meets the clients check.
    r = d.control_raw(b'{"cmd":"snapshot","action":"rollback","name":"s"}\n')[0]
    assert r["code"] == "FAILED_PRECONDITION" and "connected" in r["error"], r
    h.shutdown()
    assert d.stop() == 0


def test_rollback_refuses_to_change_immutable_ranges(env):
    d = env.start_ftld(size="256M")
    a, b, c = pattern("A", MiB), pattern("B", MiB), pattern("C", MiB)
    write(d, a, 0)
    d.ctl("range", "attr", "0", "1M", "immutable")
    write(d, a, 8 * MiB)
    d.ctl("snapshot", "create", "s1")
    # An immutable range the rollback leaves as it is does not need force.
    write(d, b, 4 * MiB)
    d.ctl("snapshot", "rollback", "s1")
    assert read(d, MiB, 4 * MiB) == bytes(MiB)
    assert d.ctl("range", "attrs")["attrs"] == [
        {"offset": 0, "length": MiB, "immutable": True, "non_persistent": False}]
    # 8M..9M changed after the snapshot and became immutable: refused.
    write(d, c, 8 * MiB)
    d.ctl("range", "attr", "8M", "1M", "immutable")
    r = d.control_raw(b'{"cmd":"snapshot","action":"rollback","name":"s1"}\n')[0]
    assert r["ok"] is False and r["code"] == "FAILED_PRECONDITION", r
    assert "immutable" in r["error"] and "force" in r["error"], r
    err = ctl_fail(d, "snapshot", "rollback", "s1")
    assert "immutable" in err, err
    assert read(d, MiB, 8 * MiB) == c
    assert len(d.ctl("range", "attrs")["attrs"]) == 2
    # --force overrides it (and, with a client connected, that check too):
    # the volume gets the snapshot's content and attributes.
    h = connect(d)
    r = d.ctl("snapshot", "rollback", "s1", "--force")
    assert r["clients_connected"] == 1, r
    h.shutdown()
    assert read(d, MiB, 8 * MiB) == a
    assert d.ctl("range", "attrs")["attrs"] == [
        {"offset": 0, "length": MiB, "immutable": True, "non_persistent": False}]
    assert d.stop() == 0


main(globals())
