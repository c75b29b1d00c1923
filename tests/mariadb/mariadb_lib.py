"""The whole stack for the MariaDB tests (issue 25): an NBD server (ftld, or
the tearing_nbd_server of the negative control), nbdfuse + a loop device
with 4 KiB logical sectors and direct I/O, ext4, and a MariaDB server run as
a child with its own datadir and socket (never the system service), driven
by sysbench. Everything started is stopped by the test's Env cleanups, also
on failure; processes are stopped by their pid only.

The power cut (cut()): kill -9 of the NBD server whose backing sits behind a
simulated volatile disk cache (src/media/volatile_cache_media.h), so its
backing file keeps what a power cut of such a disk would. The cut is aimed:
after a warm-up it watches the server's write system calls (/proc/PID/io,
syscw: the cache writes through one 512-byte sector per call) and cuts at a
random depth inside a large write-through, the moment a page write can tear
(cut() says why the depth matters). Same rule for ftld and for the negative
control.

The checks after a cut (DatabaseStack.recover_and_verify()): ext4 replays its journal and fsck -fn is
clean; MariaDB starts (crash recovery); its error log has no corruption
message; CHECK TABLE says OK for every table; every sbtest table has its
row count (sysbench oltp_write_only deletes and re-inserts a row in one
transaction, so the count never changes); the last commit a client saw
answered is there (Acker); with MariaDB stopped, innochecksum passes every
InnoDB file (but ibdata1's doublewrite pages, see innochecksum())."""

import glob
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "clients"))
from ftld_fs import Stack  # noqa: E402
from ftld_testlib import Skip, need_tool  # noqa: E402

# 4 KiB logical sectors: ext4 and InnoDB then never write less than a block
# (README, "Databases on ftld").
LOOP_ARGS = ["--direct-io=on", "--sector-size", "4096"]

# What InnoDB says when recovery meets a torn or otherwise damaged page.
CORRUPTION = re.compile(
    r"corrupted page|Unable to apply log|is corrupted|page corruption|Database page corruption|"
    r"checksum mismatch|Page \[page id.*\] log sequence number .* is in the future|"
    r"\[ERROR\] InnoDB", re.I)

# InnoDB's page size (the default) and where ibdata1 keeps the doublewrite
# buffer: two extents of 64 pages that the TRX_SYS page points to.
PAGE = 16384
DOUBLEWRITE_PAGES = (64, 191)


def page_no(page):
    return int.from_bytes(page[4:8], "big")  # FIL_PAGE_OFFSET


def page_lsn(page):
    return int.from_bytes(page[16:24], "big")  # FIL_PAGE_LSN


def space_id(page):
    return int.from_bytes(page[34:38], "big")  # FIL_PAGE_SPACE_ID


def repaired_by_doublewrite(line, log):
    """A torn page that InnoDB noticed and restored from its doublewrite
    buffer: a "[Note] ... Checksum mismatch in datafile" while the same log
    says "Recovered page ... from the doublewrite buffer". That is the
    buffer doing its job (with doublewrite on), not damage left behind."""
    return ("[Note]" in line and "Checksum mismatch in datafile" in line
            and re.search(r"Recovered page .* from the doublewrite buffer", log) is not None)


MYSQL_TOOLS = ("mariadbd", "mariadb-install-db", "mariadb", "sysbench", "innochecksum")


def preflight(env):
    need_tool("nbdfuse", "losetup", "mkfs.ext4", "fsck.ext4", "mount", "umount", "fusermount3",
              *MYSQL_TOOLS)
    if os.geteuid() != 0:
        raise Skip("needs root for losetup and mount")
    if not os.path.exists("/dev/fuse"):
        raise Skip("no /dev/fuse")


def mariadbd_path():
    for p in ("/usr/sbin/mariadbd", "/usr/sbin/mysqld"):
        if os.access(p, os.X_OK):
            return p
    return shutil.which("mariadbd")


class TearingServer:
    """tests/mariadb/tearing_nbd_server: a plain file behind the same
    volatile cache, nothing atomic above it. Same interface as Ftld for
    Stack (port, uri) and for cut() (proc)."""

    def __init__(self, env, backing, seed, size_mib=1024):
        self.env, self.backing, self.seed, self.size_mib = env, backing, seed, size_mib
        self.log_path = env.path("tearing.log")
        self.proc = None
        self.port = None

    def start(self, timeout=30):
        logf = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [self.env.args.tearing_server, "--seed", str(self.seed), "--size", str(self.size_mib),
             self.backing], stdout=subprocess.PIPE, stderr=logf)
        logf.close()
        self.env.procs.append(self.proc)
        deadline = time.time() + timeout
        for line in self.proc.stdout:
            m = re.search(rb"NBD listening on 127\.0\.0\.1:(\d+)", line)
            if m:
                self.port = int(m.group(1))
            if line.strip() == b"ready":
                return self
            if time.time() > deadline:
                break
        raise AssertionError(f"tearing_nbd_server did not start: {open(self.log_path).read()}")

    def uri(self, export=""):
        return f"nbd://127.0.0.1:{self.port}/{export}"

    def kill9(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)

    def stop(self, timeout=120):
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout)


class MariaDB:
    """One mariadbd child: its own datadir, socket, error log, no network."""

    def __init__(self, env, datadir, name="db", doublewrite=False, extra=()):
        self.env, self.datadir, self.name = env, datadir, name
        self.sock = env.path(f"{name}.sock")
        self.err = env.path(f"{name}.err")
        self.cnf = env.path(f"{name}.cnf")
        self.doublewrite = doublewrite
        self.extra = list(extra)
        self.proc = None
        self.err_start = 0
        env.cleanups.append(self.kill9)

    def options(self):
        return [f"--datadir={self.datadir}", f"--socket={self.sock}",
                f"--pid-file={self.env.path(self.name + '.pid')}", f"--log-error={self.err}",
                f"--tmpdir={self.env.tmp}", "--skip-networking", "--user=root"] + self.settings()

    def settings(self):
        """The server settings, without the paths (a branch takes the same)."""
        return [f"--innodb-doublewrite={1 if self.doublewrite else 0}",
                "--innodb-flush-method=O_DIRECT", "--innodb-flush-log-at-trx-commit=1",
                "--innodb-buffer-pool-size=128M", "--skip-log-bin"] + self.extra

    def install(self):
        os.makedirs(self.datadir, exist_ok=True)
        self.env.run(["mariadb-install-db", "--no-defaults", f"--datadir={self.datadir}",
                      "--user=root", "--auth-root-authentication-method=normal",
                      "--skip-test-db"] + [o for o in self.options() if o.startswith("--innodb")],
                     timeout=300)

    def start(self, timeout=180):
        """Starts mariadbd and waits until it answers; raises StartFailed with
        the error log if it exits or does not answer in time."""
        self.err_start = os.path.getsize(self.err) if os.path.exists(self.err) else 0
        self.proc = subprocess.Popen([mariadbd_path(), "--no-defaults"] + self.options(),
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.env.procs.append(self.proc)
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise StartFailed(f"mariadbd exited with {self.proc.returncode}", self.log())
            r = subprocess.run(self.client_cmd() + ["-e", "select 1"], capture_output=True,
                               timeout=30)
            if r.returncode == 0:
                return self
            time.sleep(0.1)
        self.kill9()
        raise StartFailed(f"mariadbd did not answer within {timeout}s", self.log())

    def client_cmd(self):
        return ["mariadb", "--no-defaults", "-uroot", f"--socket={self.sock}", "-N", "-B"]

    def sql(self, query, timeout=300):
        r = subprocess.run(self.client_cmd() + ["-e", query], capture_output=True, text=True,
                           timeout=timeout)
        if r.returncode != 0:
            raise AssertionError(f"{query!r} failed: {r.stderr.strip()}")
        return [line.split("\t") for line in r.stdout.splitlines()]

    def log(self):
        """The error log since the last start."""
        if not os.path.exists(self.err):
            return ""
        with open(self.err, "rb") as f:
            f.seek(self.err_start)
            return f.read().decode(errors="replace")

    def running(self):
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout=300):
        if not self.running():
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill9()
            raise AssertionError(f"mariadbd did not stop within {timeout}s:\n{self.log()[-3000:]}")

    def kill9(self):
        if self.running():
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(60)


class StartFailed(Exception):
    def __init__(self, what, log):
        super().__init__(what)
        self.what, self.log = what, log


class Sysbench:
    """sysbench oltp_* against a MariaDB's socket."""

    def __init__(self, db, tables, table_size, threads=4):
        self.db, self.tables, self.table_size, self.threads = db, tables, table_size, threads
        self.proc = None

    def cmd(self, test, *more):
        return ["sysbench", "--db-driver=mysql", f"--mysql-socket={self.db.sock}",
                "--mysql-user=root", "--mysql-db=sbtest", f"--tables={self.tables}",
                f"--table-size={self.table_size}", f"--threads={self.threads}", test, *more]

    def prepare(self):
        self.db.sql("CREATE DATABASE IF NOT EXISTS sbtest")
        self.db.env.run(self.cmd("oltp_write_only", "prepare"), timeout=600)

    def start(self, test="oltp_write_only", seconds=600):
        """Runs in the background (errors ignored: the cut kills the server)."""
        self.out = open(self.db.env.path("sysbench.out"), "ab")
        self.proc = subprocess.Popen(
            self.cmd(test, f"--time={seconds}", "--report-interval=0", "--mysql-ignore-errors=all",
                     "run"), stdout=self.out, stderr=self.out)
        self.db.env.procs.append(self.proc)

    def kill(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(60)
        if self.proc:
            self.out.close()
        self.proc = None


class Acker:
    """Commits n = 1, 2, 3, ... into sbtest.ack through one client
    connection (autocommit, so each UPDATE is flushed to the redo log before
    it answers) and remembers the last n whose commit was answered: after a
    cut the database must hold that n or the one in flight (last + 1)."""

    def __init__(self, db, start):
        self.db, self.n, self.acked = db, start, start
        self.proc = subprocess.Popen(db.client_cmd() + ["--unbuffered"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                                     bufsize=1)
        db.env.procs.append(self.proc)
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        try:
            while True:
                n = self.n + 1
                self.proc.stdin.write(f"UPDATE sbtest.ack SET n = {n} WHERE id = 1; SELECT {n};\n")
                self.proc.stdin.flush()
                line = self.proc.stdout.readline()
                if line.strip() != str(n):
                    return
                self.n = self.acked = n
        except (BrokenPipeError, OSError, ValueError):
            return

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(30)
        self.thread.join(30)
        return self.acked


def syscw(pid):
    with open(f"/proc/{pid}/io") as f:
        for line in f:
            if line.startswith("syscw:"):
                return int(line.split()[1])
    return 0


def cut(server, rng, warmup=(2.0, 4.0), aim_window=8.0, gap=0.00025, into=(96, 1024)):
    """The power cut: kill -9 of `server` (ftld or the tearing server).
    After a random warm-up it watches the server's write system calls; a
    write-through is a run of them with no pause longer than `gap` seconds.
    It cuts once a write-through has written K sectors, K drawn from `into`
    (so the cut lands inside the page cleaner's write-throughs of hundreds
    of sectors, at a random depth: a cut early in one leaves almost every
    page old, since the sectors go out in random order and an update
    changes few of a page's 32; commits alone write-throughs of mostly
    under 64 sectors). If no write-through gets that deep within aim_window
    seconds it cuts anyway. Returns "aimed" or "random"."""
    time.sleep(rng.uniform(*warmup))
    depth = rng.randint(*into)
    pid = server.proc.pid
    fd = os.open(f"/proc/{pid}/io", os.O_RDONLY)
    how = "random"
    try:
        def read():
            data = os.pread(fd, 4096, 0)
            i = data.index(b"syscw:")
            return int(data[i + 6:data.index(b"\n", i)])
        start = last_change = time.perf_counter()
        burst_start = last = read()
        while True:
            n, now = read(), time.perf_counter()
            if n != last:
                if now - last_change > gap:
                    burst_start = last  # a new write-through began after a pause
                last, last_change = n, now
                if n - burst_start >= depth:
                    how = "aimed"
                    break
            if now - start > aim_window:
                break
    finally:
        os.close(fd)
        server.proc.send_signal(signal.SIGKILL)
    server.proc.wait(30)
    return how


class DatabaseStack:
    """A server + nbdfuse/loop/ext4 + MariaDB + sysbench, with the cut and
    the checks. `make_server(seed)` returns a started server on the same
    backing each time (the restart after a cut)."""

    def __init__(self, env, make_server, doublewrite=False, tables=4, table_size=10000,
                 threads=4, mariadb_extra=()):
        self.env, self.make_server = env, make_server
        self.doublewrite = doublewrite
        self.tables, self.table_size, self.threads = tables, table_size, threads
        self.mariadb_extra = list(mariadb_extra)
        self.server = None
        self.stack = None
        self.db = None
        self.seeds = []
        self.acked = 0  # the last commit to sbtest.ack that was answered

    def attach(self, seed):
        self.seeds.append(seed)
        self.server = self.make_server(seed)
        self.stack = Stack(self.env, self.server, loop_args=LOOP_ARGS)
        self.stack.up()

    def datadir(self):
        return os.path.join(self.stack.mnt, "data")

    def mariadb(self):
        self.db = MariaDB(self.env, self.datadir(), doublewrite=self.doublewrite,
                          extra=self.mariadb_extra)
        return self.db

    def sysbench(self):
        return Sysbench(self.db, self.tables, self.table_size, self.threads)

    def create(self, seed):
        """Formats ext4, installs MariaDB, prepares the sysbench tables."""
        self.attach(seed)
        self.env.run(["mkfs.ext4", "-q", "-F", "-E", "lazy_itable_init=0,lazy_journal_init=0",
                      self.stack.loop], timeout=600)
        self.stack.mount()
        self.mariadb().install()
        self.db.start()
        self.sysbench().prepare()
        self.db.sql("CREATE TABLE sbtest.ack (id INT PRIMARY KEY, n BIGINT NOT NULL) ENGINE=InnoDB; "
                    "INSERT INTO sbtest.ack VALUES (1, 0)")
        # mariadb-install-db and CREATE TABLE do not sync everything they
        # write (the Aria system tables, .frm files): a cut before the
        # file system writes them back loses them, on any device. The
        # database under test is the one whose creation was made durable.
        self.env.run(["sync", "-f", self.stack.mnt])

    def shutdown(self):
        """Clean stop of everything but the server (which the caller stops)."""
        if self.db:
            self.db.stop()
        self.stack.down()

    def cut_during_sysbench(self, rng, **aim):
        """Runs oltp_write_only, cuts the power, tears the dead stack down:
        mariadbd is killed (its host lost power too), the mount lazily
        detached, the loop device and nbdfuse removed. Returns how the cut
        was placed."""
        sb = self.sysbench()
        sb.start()
        acker = Acker(self.db, self.acked)
        try:
            how = cut(self.server, rng, **aim)
        finally:
            self.db.kill9()
            sb.kill()
            self.acked = acker.stop()
        self.detach_dead()
        return how

    def detach_dead(self):
        """Unmounts ext4 from the dead device (it fails its last writes with
        EIO) and detaches the rest. Lazily only if a plain umount fails."""
        st = self.stack
        if st.mounted:
            r = self.env.run(["umount", st.mnt], check=False, timeout=120)
            if r.returncode != 0 and os.path.ismount(st.mnt):
                self.env.run(["umount", "-l", st.mnt], check=False)
            st.mounted = False
        st.down()

    def recover_and_verify(self, seed):
        """Restarts the server, reattaches, and runs every check. Returns the
        list of problems found (empty: the database survived intact). Leaves
        the stack attached and mounted with MariaDB stopped, or, when ext4
        cannot be mounted, detached."""
        problems = []
        self.attach(seed)
        # The kernel replays ext4's journal at mount; after that the file
        # system must be clean.
        self.stack.mount()
        self.stack.umount()
        r = self.env.run(["fsck.ext4", "-fn", self.stack.loop], check=False)
        if r.returncode != 0:
            problems.append(f"fsck.ext4 -fn: exit {r.returncode}: {r.stdout[-1500:]}")
            r = self.env.run(["fsck.ext4", "-fy", self.stack.loop], check=False)
            if r.returncode not in (0, 1):
                problems.append(f"fsck.ext4 -fy: exit {r.returncode}")
                return problems
        self.stack.mount()
        if self.doublewrite:
            # What InnoDB's recovery starts from, for
            # first_pages_from_doublewrite().
            shutil.rmtree(self.env.path("before-recovery"), ignore_errors=True)
            shutil.copytree(self.datadir(), self.env.path("before-recovery"), symlinks=True)
        return problems + self.verify_database()

    def first_pages_from_doublewrite(self):
        """With doublewrite on, after recover_and_verify() found problems:
        puts the datadir back as the cut left it, writes over each torn
        page 0 the copy that ibdata1's doublewrite buffer holds
        (torn_first_pages()), and verifies again. Returns (the files
        repaired, the problems found then), or None if no page 0 is torn
        or one has no valid copy in the doublewrite buffer (then the
        device lost what the buffer was flushed with, or something else
        broke: the damage stands)."""
        d = self.datadir()
        shutil.rmtree(d)
        shutil.copytree(self.env.path("before-recovery"), d, symlinks=True)
        torn = self.torn_first_pages()
        if not torn or any(page is None for page in torn.values()):
            return None
        self.write_first_pages(torn)
        return sorted(os.path.relpath(f, d) for f in torn), self.verify_database()

    def verify_database(self):
        """Starts MariaDB on the mounted stack (crash recovery), checks its
        error log and tables, stops it and runs innochecksum. Returns the
        problems found."""
        problems = []
        db = self.mariadb()
        try:
            db.start()
        except StartFailed as e:
            lines = [l for l in e.log.splitlines() if "ERROR" in l or "rror" in l][:8]
            problems.append(f"MariaDB did not start ({e.what}): " + " | ".join(lines))
            return problems
        log = db.log()
        bad = [l for l in log.splitlines() if CORRUPTION.search(l) and not repaired_by_doublewrite(l, log)]
        if bad:
            problems.append("error log: " + " | ".join(bad[:8]))
        problems += self.check_tables(db)
        db.stop()
        problems += self.innochecksum()
        return problems

    def torn_first_pages(self):
        """After a cut with doublewrite on (MariaDB stopped): the .ibd files
        whose page 0 fails innochecksum, each mapped to the newest copy of
        its page 0 in ibdata1's doublewrite pages that passes innochecksum
        and is not older than the torn page's LSN field, or None if the
        doublewrite buffer holds no such copy."""
        d = self.datadir()
        torn = {}
        for f in sorted(glob.glob(f"{d}/**/*.ibd", recursive=True)):
            if self.env.run(["innochecksum", "-p", "0", f], check=False).returncode != 0:
                with open(f, "rb") as fh:
                    torn[f] = fh.read(PAGE)
        if not torn:
            return {}
        copies = []
        with open(os.path.join(d, "ibdata1"), "rb") as fh:
            for n in range(DOUBLEWRITE_PAGES[0], DOUBLEWRITE_PAGES[1] + 1):
                fh.seek(n * PAGE)
                page = fh.read(PAGE)
                if len(page) == PAGE and page_no(page) == 0 and space_id(page) != 0:
                    copies.append(page)
        found = {}
        scratch = self.env.path("page0.ibd")
        for f, page in torn.items():
            best = None
            for c in copies:
                if space_id(c) != space_id(page) or page_lsn(c) < page_lsn(page):
                    continue
                with open(scratch, "wb") as fh:
                    fh.write(c)
                if self.env.run(["innochecksum", scratch], check=False).returncode == 0:
                    if best is None or page_lsn(c) > page_lsn(best):
                        best = c
            found[f] = best
        return found

    def write_first_pages(self, pages):
        """Writes each file's page 0 (what InnoDB's recovery would restore
        from its doublewrite buffer)."""
        for f, page in pages.items():
            with open(f, "r+b") as fh:
                fh.write(page)
                os.fsync(fh.fileno())

    def keep(self, dest):
        """Copies the datadir and MariaDB's error log to `dest` (for a look
        at a cut that failed; FTLD_MARIADB_KEEP). Needs the stack mounted
        and MariaDB stopped, as recover_and_verify() leaves it."""
        if not (self.stack and self.stack.mounted):
            return
        shutil.copytree(self.datadir(), os.path.join(dest, "data"), dirs_exist_ok=True)
        if self.db and os.path.exists(self.db.err):
            shutil.copyfile(self.db.err, os.path.join(dest, "mariadb.err"))

    def check_tables(self, db):
        problems = []
        try:
            tables = db.sql("SELECT table_schema, table_name FROM information_schema.tables "
                            "WHERE table_type = 'BASE TABLE' AND table_schema NOT IN "
                            "('information_schema', 'performance_schema', 'sys')")
            for schema, table in tables:
                for row in db.sql(f"CHECK TABLE `{schema}`.`{table}`"):
                    _, _, kind, text = row[:4]
                    if kind.lower() == "error" or (kind.lower() == "status" and text != "OK"):
                        problems.append(f"CHECK TABLE {schema}.{table}: {kind} {text}")
            n = int(db.sql("SELECT n FROM sbtest.ack WHERE id = 1")[0][0])
            if n not in (self.acked, self.acked + 1):
                problems.append(f"sbtest.ack holds {n}, but commit {self.acked} was acknowledged "
                                f"(and at most {self.acked + 1} was in flight)")
            self.acked = n
            for i in range(1, self.tables + 1):
                n = int(db.sql(f"SELECT COUNT(*) FROM sbtest.sbtest{i}")[0][0])
                if n != self.table_size:
                    problems.append(f"sbtest{i}: {n} rows, expected {self.table_size}")
        except (AssertionError, subprocess.TimeoutExpired) as e:
            problems.append(f"queries failed: {e}")
        return problems

    def innochecksum(self):
        """innochecksum on every InnoDB file (MariaDB stopped). Pages 64-191
        of ibdata1 are the doublewrite buffer (two extents of 64 pages that
        the TRX_SYS page points to): scratch copies, which a cut may leave
        torn with doublewrite on; InnoDB ignores them once the pages they
        copied are intact, and so does this check."""
        problems = []
        d = self.datadir()
        runs = [[f] for f in sorted(glob.glob(f"{d}/**/*.ibd", recursive=True))]
        if not runs:
            return [f"no .ibd files under {d}"]
        runs += [[f] for f in sorted(glob.glob(f"{d}/undo[0-9]*"))]
        for f in sorted(glob.glob(f"{d}/ibdata*")):
            if f.endswith("ibdata1"):
                runs += [[f"--end-page={DOUBLEWRITE_PAGES[0] - 1}", f],
                         [f"--start-page={DOUBLEWRITE_PAGES[1] + 1}", f]]
            else:
                runs += [[f]]
        for args in runs:
            r = self.env.run(["innochecksum"] + args, check=False)
            if r.returncode != 0:
                problems.append(f"innochecksum {' '.join(args[:-1])} {os.path.relpath(args[-1], d)}: "
                                f"exit {r.returncode} {(r.stdout + r.stderr).strip()[-300:]}")
        return problems


def extra_args(ap):
    ap.add_argument("--tearing-server", default=None,
                    help="tests/mariadb/tearing_nbd_server (the negative control)")
