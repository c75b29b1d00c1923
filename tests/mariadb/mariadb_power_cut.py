#!/usr/bin/python3
"""MariaDB with InnoDB's doublewrite buffer off, power-cut (issue 25).

The whole stack: ftld --simulate-volatile-cache on a backing file, its export
through nbdfuse and a loop device (4 KiB sectors, direct I/O), ext4, MariaDB
(innodb_doublewrite=0, O_DIRECT, flush at every commit), sysbench
oltp_write_only running; the cut is kill -9 of ftld, which loses its
simulated disk cache and may tear the write-through in progress
(mariadb_lib.py says how the cut is aimed). Then ftld restarts on the same
backing and every check of mariadb_lib.DatabaseStack.recover_and_verify
must pass, cycle after cycle on the same database.

The negative control runs the same cycles on tearing_nbd_server: a plain
file behind the same cache, nothing atomic above it. With the doublewrite
buffer off the checks must catch damage in at least one of its cuts (it
restores the database from a copy after each caught cut); with it on, the
same device must pass (so what the control catches is torn pages, not a
server that loses flushed writes). One exception, seen in 2 of ~30 CI cuts:
MariaDB 10.11's recovery may leave a torn page 0 of an .ibd file unrepaired
although its doublewrite buffer holds an intact copy of it ("The first page
of file ... is corrupted"). Such a cut counts as survived only if the
database as the cut left it, with each torn page 0 replaced by the copy the
doublewrite buffer kept (no older than the torn page's LSN field), then
passes every check: the device kept every flushed write, MariaDB did not
use one (DatabaseStack.first_pages_from_doublewrite()).

Environment (tests/README.md, "Long runs"):
  FTLD_MARIADB_CUTS          cuts of ftld (default 5)
  FTLD_MARIADB_CONTROL_CUTS  cuts of the negative control, doublewrite off (default 10)
  FTLD_MARIADB_CONTROL_ENOUGH  stop the control once this many cuts were caught (default 2; 0: all)
  FTLD_MARIADB_DW_CUTS       cuts of the tearing device with doublewrite on (default 2)
  FTLD_MARIADB_KEEP          a directory: each cut that finds damage copies its datadir there
  FTLD_MARIADB_SEED          the seed of the cut placement and the caches (default: random, printed)
  FTLD_MARIADB_TABLES, FTLD_MARIADB_TABLE_SIZE  sysbench tables (default 4 x 10000)
"""

import os
import random
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mariadb_lib import DatabaseStack, TearingServer, extra_args, preflight  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "clients"))
from ftld_testlib import Skip, main  # noqa: E402


def env_int(name, default):
    return int(os.environ.get(name, default))


def make_rng(name):
    seed = env_int("FTLD_MARIADB_SEED", random.SystemRandom().randrange(1 << 31))
    print(f"{name}: FTLD_MARIADB_SEED={seed}", flush=True)
    return random.Random(seed)


def keep(stack, problems, name):
    """With FTLD_MARIADB_KEEP set, copies the datadir of a cut that found
    damage there, for a look at what tore."""
    root = os.environ.get("FTLD_MARIADB_KEEP")
    if problems and root:
        dest = os.path.join(root, name.replace(" ", "-").replace(",", ""))
        stack.keep(dest)
        print(f"kept in {dest}", flush=True)


def sizes():
    return dict(tables=env_int("FTLD_MARIADB_TABLES", 4),
                table_size=env_int("FTLD_MARIADB_TABLE_SIZE", 10000))


# MariaDB settings that make page writes frequent in a short run (the checks
# are only as strong as the page writes a cut can land on): a small redo log
# and a page cleaner that flushes as soon as any page is dirty.
BUSY_PAGE_CLEANER = ["--innodb-log-file-size=32M", "--innodb-max-dirty-pages-pct-lwm=0.001",
                     "--innodb-io-capacity=2000"]


def test_power_cut_ftld_doublewrite_off(env):
    preflight(env)
    rng = make_rng("ftld")
    backing = env.path("ftld.img")

    def make_server(seed):
        return env.ftld_process(backing=backing, size="2G",
                                args=[f"--simulate-volatile-cache={seed}"]).start()

    s = DatabaseStack(env, make_server, doublewrite=False, mariadb_extra=BUSY_PAGE_CLEANER,
                      **sizes())
    s.create(rng.randrange(1 << 62))
    cuts = env_int("FTLD_MARIADB_CUTS", 5)
    results = []
    for i in range(cuts):
        t0 = time.time()
        if not s.db.running():
            s.db.start()
        how = s.cut_during_sysbench(rng)
        problems = s.recover_and_verify(rng.randrange(1 << 62))
        keep(s, problems, f"ftld cut {i + 1}")
        report = s.server.ctl("status")["open_report"]
        results.append((how, problems))
        print(f"ftld cut {i + 1}/{cuts} ({how}, {time.time() - t0:.1f}s): "
              f"{'clean' if not problems else problems}; acknowledged commits: {s.acked}; "
              f"ftld: {report}", flush=True)
        assert not problems, f"cut {i + 1}: {problems}"
    s.shutdown()
    assert s.server.stop() == 0
    print(f"ftld: {cuts} of {cuts} cuts recovered intact "
          f"({sum(h == 'aimed' for h, _ in results)} aimed at a write-through)")


def control_cycles(env, doublewrite, cuts, rng, label, enough=0):
    """Cuts of the tearing device, up to `cuts`, stopping once `enough` were
    caught (0: never); returns (caught, cuts made, aimed)."""
    backing = env.path("plain.img")
    golden = env.path("plain.golden")

    def make_server(seed):
        return TearingServer(env, backing, seed).start()

    s = DatabaseStack(env, make_server, doublewrite=doublewrite, mariadb_extra=BUSY_PAGE_CLEANER,
                      **sizes())
    s.create(rng.randrange(1 << 62))
    s.shutdown()
    assert s.server.stop() == 0
    shutil.copyfile(backing, golden)
    caught = aimed = first_pages = 0
    restore = False
    done = 0
    for i in range(cuts):
        if enough and caught >= enough:
            break
        done += 1
        t0 = time.time()
        if s.db and s.db.running():
            s.db.stop()
        if restore or i == 0:
            if s.stack and s.stack.loop:
                s.stack.down()
                s.server.stop()
            subprocess.run(["cp", "--sparse=always", golden, backing], check=True)
            s.acked = 0
            s.attach(rng.randrange(1 << 62))
            s.stack.mount()
        s.mariadb().start()
        how = s.cut_during_sysbench(rng)
        aimed += how == "aimed"
        problems = s.recover_and_verify(rng.randrange(1 << 62))
        keep(s, problems, f"{label} cut {i + 1}")
        restore = bool(problems)
        verdict = "caught: " + "; ".join(problems) if problems else "intact"
        if problems and doublewrite:
            retry = s.first_pages_from_doublewrite()
            if retry and not retry[1]:
                # MariaDB left a page 0 torn that its doublewrite buffer
                # held intact: what the device kept was enough.
                first_pages += 1
                verdict = (f"page 0 of {', '.join(retry[0])} left torn by MariaDB's recovery; "
                           f"with it taken from the doublewrite buffer every check passes "
                           f"(first: {'; '.join(problems)})")
            else:
                caught += 1
                verdict += (f" (no page 0 to take from the doublewrite buffer)" if retry is None
                            else f" (with page 0 from the doublewrite buffer: {'; '.join(retry[1])})")
        else:
            caught += restore
        print(f"{label} cut {i + 1}/{cuts} ({how}, {time.time() - t0:.1f}s): {verdict}", flush=True)
    if s.db and s.db.running():
        s.db.stop()
    if s.stack and s.stack.loop:
        s.stack.down()
    s.server.stop()
    print(f"{label}: damage caught in {caught} of {done} cuts ({aimed} aimed at a write-through)"
          + (f"; {first_pages} more left a page 0 torn that the doublewrite buffer held"
             if first_pages else ""))
    return caught, done, aimed


def test_negative_control_tearing_device_doublewrite_off(env):
    preflight(env)
    if not env.args.tearing_server:
        raise Skip("no --tearing-server")
    rng = make_rng("control")
    caught, cuts, _ = control_cycles(env, False, env_int("FTLD_MARIADB_CONTROL_CUTS", 10), rng,
                                     "tearing device, doublewrite off",
                                     enough=env_int("FTLD_MARIADB_CONTROL_ENOUGH", 2))
    assert caught >= 1, (f"the negative control caught nothing in {cuts} cuts: the test cannot "
                         "tell a device that tears from one that does not")


def test_tearing_device_doublewrite_on(env):
    preflight(env)
    if not env.args.tearing_server:
        raise Skip("no --tearing-server")
    cuts = env_int("FTLD_MARIADB_DW_CUTS", 2)
    if cuts == 0:
        raise Skip("FTLD_MARIADB_DW_CUTS=0")
    rng = make_rng("doublewrite on")
    caught, cuts, _ = control_cycles(env, True, cuts, rng, "tearing device, doublewrite on")
    assert caught == 0, f"doublewrite on over the tearing device: damage in {caught} of {cuts} cuts"


main(globals(), extra_args)
