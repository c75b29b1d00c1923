#!/usr/bin/python3
"""Branch a running database (issue 25): tools/mariadb-branch.sh snapshots
the volume of a MariaDB that sysbench is writing to, activates the snapshot
as a writable export and starts a second MariaDB on it (ext4 replays its
journal, InnoDB recovers as after a power cut). The branch must come up
clean (error log, CHECK TABLE, row counts), the two must be independent (a
write on either side is invisible on the other), N transactions on the
branch must cost space that destroying the branch gives back, and the
source must be intact afterwards. Prints the time from the command to a
queryable branch and the space the branch cost.

Environment: FTLD_BRANCH_TRANSACTIONS (default 2000) transactions of
sysbench oltp_write_only on the branch before it is destroyed."""

import os
import re
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mariadb_lib import CORRUPTION, DatabaseStack, MariaDB, Sysbench, extra_args, preflight  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "clients"))
from ftld_testlib import main  # noqa: E402

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools",
                      "mariadb-branch.sh")


def check_destroy_leaves_other_loops(env, bdir, ctl, branch_env):
    """A destroyed branch is gone (no branch.env), and a destroy never
    detaches a loop device that another file holds, even one named in its
    branch.env (docs/decisions.md, "A loop device is detached only while
    it is still ours": a second destroy once cleared another test's
    device)."""
    env_path = os.path.join(bdir, "branch.env")
    assert not os.path.exists(env_path), "destroy left branch.env behind"
    other = env.path("other.img")
    with open(other, "wb") as f:
        f.truncate(64 << 20)
    loop = env.run(["losetup", "--find", "--show", other]).stdout.strip()
    try:
        # The old branch's loop lines, pointed at the device another file
        # now holds (no PIDs: a destroy would signal them).
        lines = [l for l in branch_env.splitlines() if l.startswith("LOOP_BACKING=")]
        assert lines, branch_env
        with open(env_path, "w") as f:
            f.write(f"LOOP={loop}\n" + "\n".join(lines) + "\n")
        env.run([SCRIPT, "destroy"] + ctl, check=False, timeout=300)
        try:
            with open(f"/sys/block/{os.path.basename(loop)}/loop/backing_file") as f:
                backing = f.read().strip()
        except FileNotFoundError:
            backing = None  # detached
        assert backing == other, f"destroy detached a loop device that was not its own ({backing})"
    finally:
        if os.path.exists(env_path):
            os.unlink(env_path)
        env.run(["losetup", "-d", loop], check=False)


def test_branch_a_running_database(env):
    preflight(env)
    backing = env.path("ftld.img")
    # The README's database settings: the log's writes bypass the page cache.
    s = DatabaseStack(env, lambda seed: env.ftld_process(backing=backing, size="2G",
                                                          args=["--direct-io", "writes"]).start())
    s.create(0)
    d, src = s.server, s.db
    src.sql("CREATE TABLE sbtest.side (id INT PRIMARY KEY, who VARCHAR(16)) ENGINE=InnoDB; "
            "INSERT INTO sbtest.side VALUES (1, 'base')")

    bdir = env.path("branch")
    ctl = ["--ftlctl", env.ftlctl, "--control", d.control, "--dir", bdir]

    def destroy():
        if os.path.exists(os.path.join(bdir, "branch.env")):
            return env.run([SCRIPT, "destroy"] + ctl, check=False)
    env.cleanups.append(destroy)

    # The source is busy when the branch is taken.
    load = s.sysbench()
    load.start(seconds=120)
    time.sleep(3)
    r = env.run([SCRIPT, "create", "--name", "b1", "--uri", f"nbd://127.0.0.1:{d.port}"] + ctl +
                ["--"] + src.settings(), timeout=300)
    print(r.stdout.strip(), flush=True)
    m = re.search(r"queryable at (\S+) after ([\d.]+) s", r.stdout)
    assert m, r.stdout
    branch = MariaDB(env, os.path.join(bdir, "mnt", "data"), name="branch")
    branch.sock, branch.err = m.group(1), os.path.join(bdir, "error.log")

    # The branch recovered to a consistent database.
    bad = [l for l in branch.log().splitlines() if CORRUPTION.search(l)]
    assert not bad, bad
    problems = DatabaseStack(env, None, tables=s.tables, table_size=s.table_size).check_tables(branch)
    assert not problems, problems
    # Taken under load without a freeze: InnoDB had to recover.
    assert "Starting crash recovery" in branch.log(), branch.log()[-2000:]

    # Independent: each side's writes stay on its side.
    load.kill()
    src.sql("UPDATE sbtest.side SET who = 'source' WHERE id = 1; CREATE TABLE sbtest.only_source (x INT)")
    branch.sql("UPDATE sbtest.side SET who = 'branch' WHERE id = 1; CREATE TABLE sbtest.only_branch (x INT)")
    assert src.sql("SELECT who FROM sbtest.side WHERE id = 1") == [["source"]]
    assert branch.sql("SELECT who FROM sbtest.side WHERE id = 1") == [["branch"]]
    tables = lambda db: {t[0] for t in db.sql("SHOW TABLES FROM sbtest")}  # noqa: E731
    assert "only_branch" not in tables(src) and "only_source" in tables(src)
    assert "only_source" not in tables(branch) and "only_branch" in tables(branch)

    # A second branch, of the source's file system frozen around the
    # snapshot (--freeze), beside the first: ext4 needs no journal replay.
    b2dir = env.path("branch2")
    ctl2 = ["--ftlctl", env.ftlctl, "--control", d.control, "--dir", b2dir]
    env.cleanups.append(lambda: os.path.exists(os.path.join(b2dir, "branch.env")) and
                        env.run([SCRIPT, "destroy"] + ctl2, check=False))
    r = env.run([SCRIPT, "create", "--name", "b2", "--uri", f"nbd://127.0.0.1:{d.port}",
                 "--freeze", s.stack.mnt] + ctl2 + ["--"] + src.settings(), timeout=300)
    print(r.stdout.strip(), flush=True)
    b2 = MariaDB(env, os.path.join(b2dir, "mnt", "data"), name="branch2")
    b2.sock, b2.err = os.path.join(b2dir, "mysqld.sock"), os.path.join(b2dir, "error.log")
    assert b2.sql("SELECT who FROM sbtest.side WHERE id = 1") == [["source"]]
    assert "only_source" in tables(b2) and "only_branch" not in tables(b2)
    problems = DatabaseStack(env, None, tables=s.tables, table_size=s.table_size).check_tables(b2)
    assert not problems, problems
    with open(os.path.join(b2dir, "branch.env")) as f:
        b2env = f.read()
    env.run([SCRIPT, "destroy"] + ctl2, timeout=300)
    assert branch.sql("SELECT who FROM sbtest.side WHERE id = 1") == [["branch"]]
    check_destroy_leaves_other_loops(env, b2dir, ctl2, b2env)

    # N transactions on each side, then what the branch cost.
    n = int(os.environ.get("FTLD_BRANCH_TRANSACTIONS", 2000))
    for db in (branch, src):
        env.run(Sysbench(db, s.tables, s.table_size).cmd(
            "oltp_write_only", "--time=0", f"--events={n}", "run"), timeout=600)
    snap = next(x for x in d.ctl("snapshot", "list")["snapshots"] if x["name"] == "b1")
    live = d.ctl("stats")["pool"]["live_bytes"]
    r = env.run([SCRIPT, "destroy"] + ctl, timeout=300)
    print(r.stdout.strip(), flush=True)
    m = re.search(r"snapshot exclusive bytes (\d+), live bytes freed (-?\d+)", r.stdout)
    assert m, r.stdout
    freed = int(m.group(2))
    print(f"after {n} transactions on each side: branch cost {freed / 2**20:.1f} MiB of live data "
          f"(snapshot exclusive {snap['exclusive_bytes'] / 2**20:.1f} MiB; pool live "
          f"{live / 2**20:.1f} MiB)", flush=True)
    assert freed > 0, "destroying a branch that was written to freed nothing"
    assert not any(x["name"] == "b1" for x in d.ctl("snapshot", "list")["snapshots"])
    assert "b1" not in {e["name"] for e in d.ctl("exports")["exports"]}
    with open("/proc/self/mounts") as f:
        assert bdir not in f.read(), "the branch left a mount behind"

    # The source is untouched by all of it.
    problems = s.check_tables(src)
    assert not problems, problems
    assert src.sql("SELECT who FROM sbtest.side WHERE id = 1") == [["source"]]
    s.shutdown()
    assert d.stop() == 0


main(globals(), extra_args)
