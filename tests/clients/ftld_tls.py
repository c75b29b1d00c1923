#!/usr/bin/python3
"""Clients tier: TLS (issue 24) against the real ftld with real clients.

Certificates are made here with certtool and keys with psktool (gnutls-bin),
as nbdkit's tests make theirs. Every refusal (a server certificate the
client does not trust, a client certificate the server does not trust or
none, a wrong PSK, an unknown PSK user, a plaintext client against
--tls=require, a client that drops in the middle of the TLS handshake) must
leave one log line saying why, and the server must go on serving: a good
client is checked after each. A hand-rolled client (Python's ssl over a raw
socket after NBD_OPT_STARTTLS) checks the option rules of the NBD spec's
"TLS support" section that libnbd never breaks."""

import hashlib
import os
import re
import socket
import ssl
import stat
import struct
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ftld_testlib import main, need_tool  # noqa: E402

MiB = 1 << 20
NBDMAGIC = 0x4E42444D41474943
IHAVEOPT = 0x49484156454F5054
REPLY_MAGIC = 0x3E889045565A9
REQUEST_MAGIC = 0x25609513
SIMPLE_REPLY_MAGIC = 0x67446698
STRUCTURED_REPLY_MAGIC = 0x668E33EF
OPT_EXPORT_NAME, OPT_ABORT, OPT_LIST, OPT_STARTTLS, OPT_INFO, OPT_GO = 1, 2, 3, 5, 6, 7
OPT_STRUCTURED_REPLY = 8
REP_ACK, REP_SERVER = 1, 2
ERR_POLICY, ERR_INVALID, ERR_TLS_REQD = 0x80000002, 0x80000003, 0x80000005


# --- certificates and keys ---------------------------------------------------

def certtool(*args, template=None, cwd):
    cmd = ["certtool", *args]
    if template is not None:
        path = os.path.join(cwd, "template.info")
        with open(path, "w") as f:
            f.write(template)
        cmd += ["--template", path]
    subprocess.run(cmd, cwd=cwd, check=True, capture_output=True, timeout=120)


def make_ca(d, name):
    os.makedirs(d, exist_ok=True)
    certtool("--generate-privkey", "--outfile", "ca-key.pem", cwd=d)
    certtool("--generate-self-signed", "--load-privkey", "ca-key.pem", "--outfile", "ca-cert.pem",
             template=f"cn = {name}\nca\ncert_signing_key\nexpiration_days = 2\n", cwd=d)


def sign(ca_dir, out_dir, role, cn):
    """Writes {role}-key.pem and {role}-cert.pem (role: server or client) into
    out_dir, signed by the CA in ca_dir."""
    os.makedirs(out_dir, exist_ok=True)
    key, cert = os.path.join(out_dir, f"{role}-key.pem"), os.path.join(out_dir, f"{role}-cert.pem")
    usage = ("dns_name = localhost\nip_address = 127.0.0.1\ntls_www_server\n" if role == "server"
             else "tls_www_client\n")
    certtool("--generate-privkey", "--outfile", key, cwd=out_dir)
    certtool("--generate-certificate", "--load-ca-certificate", os.path.join(ca_dir, "ca-cert.pem"),
             "--load-ca-privkey", os.path.join(ca_dir, "ca-key.pem"), "--load-privkey", key,
             "--outfile", cert,
             template=f"organization = ftld test\ncn = {cn}\n{usage}encryption_key\nsigning_key\n"
                      "expiration_days = 2\n", cwd=out_dir)


def copy(src, dst):
    with open(src, "rb") as f, open(dst, "wb") as g:
        g.write(f.read())


class Pki:
    """server/: what ftld reads (ca-cert.pem, server-cert.pem, server-key.pem);
    client/: a good client (the CA, and a client certificate it signed);
    client-ca-only/: trusts the server but has no certificate of its own;
    stranger/: a client certificate from another CA (trusts the server);
    wrong-ca/: trusts only another CA, so it refuses ftld's certificate."""

    def __init__(self, env):
        need_tool("certtool")
        root = env.path("pki")
        ca, other = os.path.join(root, "ca"), os.path.join(root, "other-ca")
        make_ca(ca, "ftld test CA")
        make_ca(other, "some other CA")
        self.server = os.path.join(root, "server")
        sign(ca, self.server, "server", "localhost")
        copy(os.path.join(ca, "ca-cert.pem"), os.path.join(self.server, "ca-cert.pem"))
        self.client = os.path.join(root, "client")
        sign(ca, self.client, "client", "good client")
        copy(os.path.join(ca, "ca-cert.pem"), os.path.join(self.client, "ca-cert.pem"))
        self.client_ca_only = os.path.join(root, "client-ca-only")
        os.makedirs(self.client_ca_only)
        copy(os.path.join(ca, "ca-cert.pem"), os.path.join(self.client_ca_only, "ca-cert.pem"))
        self.stranger = os.path.join(root, "stranger")
        sign(other, self.stranger, "client", "stranger")
        copy(os.path.join(ca, "ca-cert.pem"), os.path.join(self.stranger, "ca-cert.pem"))
        self.wrong_ca = os.path.join(root, "wrong-ca")
        os.makedirs(self.wrong_ca)
        copy(os.path.join(other, "ca-cert.pem"), os.path.join(self.wrong_ca, "ca-cert.pem"))


def psk_file(env, name, user):
    need_tool("psktool")
    path = env.path(name)
    subprocess.run(["psktool", "-u", user, "-p", path], check=True, capture_output=True, timeout=60)
    return path


# --- helpers -------------------------------------------------------------------

def nbds(d, **params):
    """nbds://[user@]127.0.0.1:PORT/?tls-certificates=...|tls-psk-file=..."""
    user = params.pop("user", None)
    q = "&".join(f"{k.replace('_', '-')}={v}" for k, v in params.items())
    return f"nbds://{user + '@' if user else ''}127.0.0.1:{d.port}/" + (f"?{q}" if q else "")


def wait_log(d, text, timeout=15):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if text in d.log():
            return
        time.sleep(0.05)
    raise AssertionError(f"log lacks {text!r}:\n{d.log()[-3000:]}")


def log_count(d, text):
    return d.log().count(text)


def refused(env, cmd, d, log_text):
    """cmd fails, and the daemon logs one more line containing log_text."""
    before = log_count(d, log_text)
    r = env.run(cmd, check=False, timeout=60)
    assert r.returncode != 0, f"{cmd} should have failed:\n{r.stdout}{r.stderr}"
    deadline = time.time() + 15
    while log_count(d, log_text) <= before and time.time() < deadline:
        time.sleep(0.05)
    assert log_count(d, log_text) > before, f"log lacks {log_text!r}:\n{d.log()[-3000:]}"
    return r


def nbdinfo_ok(env, uri):
    r = env.run(["nbdinfo", uri], timeout=60)
    assert "with TLS" in r.stdout, r.stdout
    return r


def sha(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(MiB), b""):
            h.update(chunk)
    return h.hexdigest()


def round_trip(env, uri, size_mib=64):
    """nbdcopy random data to the export and back; compares them."""
    src, back = env.path("src.bin"), env.path("back.bin")
    with open(src, "wb") as f:
        f.write(os.urandom(size_mib * MiB))
    env.run(["nbdcopy", src, uri], timeout=300)
    env.run(["nbdcopy", "--flush", uri, back], timeout=300)
    with open(back, "r+b") as f:
        f.truncate(size_mib * MiB)
    assert sha(src) == sha(back), "data read back over TLS differs"


def recv_exact(s, n):
    out = b""
    while len(out) < n:
        chunk = s.recv(n - len(out))
        if not chunk:
            raise EOFError(f"closed after {len(out)} of {n} bytes")
        out += chunk
    return out


def closed_by_server(s, timeout=10):
    s.settimeout(timeout)
    try:
        while True:
            if not s.recv(65536):
                return True
    except (ConnectionResetError, ssl.SSLError):
        return True
    except socket.timeout:
        return False


class Raw:
    """A hand-rolled NBD client; starttls() wraps its socket in Python's ssl."""

    def __init__(self, port):
        self.s = socket.create_connection(("127.0.0.1", port), timeout=30)
        magic, opt, flags = struct.unpack(">QQH", recv_exact(self.s, 18))
        assert (magic, opt) == (NBDMAGIC, IHAVEOPT) and flags & 3 == 3
        self.s.sendall(struct.pack(">I", 3))  # fixed newstyle, no zeroes

    def option(self, opt, data=b""):
        self.s.sendall(struct.pack(">QII", IHAVEOPT, opt, len(data)) + data)

    def reply(self):
        magic, opt, rtype, length = struct.unpack(">QIII", recv_exact(self.s, 20))
        assert magic == REPLY_MAGIC, hex(magic)
        return rtype, recv_exact(self.s, length)

    def ask(self, opt, data=b""):
        self.option(opt, data)
        return self.reply()[0]

    def starttls(self, cadir, certdir=None):
        assert self.ask(OPT_STARTTLS) == REP_ACK
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.load_verify_locations(os.path.join(cadir, "ca-cert.pem"))
        if certdir:
            ctx.load_cert_chain(os.path.join(certdir, "client-cert.pem"),
                                os.path.join(certdir, "client-key.pem"))
        self.s = ctx.wrap_socket(self.s, server_hostname="localhost")

    def go(self, name=b""):
        self.option(OPT_GO, struct.pack(">I", len(name)) + name + struct.pack(">H", 0))
        while True:
            rtype, data = self.reply()
            if rtype == REP_ACK:
                return
            assert rtype < 0x80000000, hex(rtype)

    def request(self, cmd, offset, length, cookie=1, payload=b""):
        self.s.sendall(struct.pack(">IHHQQI", REQUEST_MAGIC, 0, cmd, cookie, offset, length) + payload)

    def close(self):
        self.s.close()


def start_tls_ftld(env, *tls_args):
    return env.start_ftld(size="1G", args=list(tls_args))


# --- tests ----------------------------------------------------------------------

def test_x509_nbdinfo_nbdcopy_and_the_control_socket(env):
    need_tool("nbdinfo", "nbdcopy")
    pki = Pki(env)
    d = start_tls_ftld(env, "--tls=require", "--tls-certificates", pki.server)
    assert "ready: nbds://" in d.log()
    uri = nbds(d, tls_certificates=pki.client_ca_only)
    r = nbdinfo_ok(env, uri)
    assert "export-size" in r.stdout
    wait_log(d, "TLS established: (TLS1.3)")
    round_trip(env, uri)
    # nbdcopy's 4 connections, each over TLS.
    assert log_count(d, "TLS established") >= 5
    # The control socket stays a local 0600 Unix socket.
    st = os.stat(d.control)
    assert stat.S_ISSOCK(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o600, oct(st.st_mode)
    assert d.ctl("status") is not None
    assert d.stop() == 0


def test_server_certificate_the_client_does_not_trust(env):
    need_tool("nbdinfo")
    pki = Pki(env)
    d = start_tls_ftld(env, "--tls=require", "--tls-certificates", pki.server)
    # libnbd hangs up without an alert: the server can only say so.
    refused(env, ["nbdinfo", nbds(d, tls_certificates=pki.wrong_ca)], d,
            "TLS refused: the client closed the connection during the TLS handshake")
    nbdinfo_ok(env, nbds(d, tls_certificates=pki.client))
    assert d.stop() == 0


def test_client_certificates_verified(env):
    need_tool("nbdinfo", "nbdcopy")
    pki = Pki(env)
    d = start_tls_ftld(env, "--tls=require", "--tls-certificates", pki.server, "--tls-verify-peer")
    assert "client certificates verified" in d.log()
    good = nbds(d, tls_certificates=pki.client)
    nbdinfo_ok(env, good)
    wait_log(d, "client certificate 'CN=good client")
    # No certificate at all, then one from another CA.
    refused(env, ["nbdinfo", nbds(d, tls_certificates=pki.client_ca_only)], d,
            "TLS refused: the client showed no certificate")
    refused(env, ["nbdinfo", nbds(d, tls_certificates=pki.stranger)], d,
            "TLS refused: client certificate rejected")
    round_trip(env, good, size_mib=16)
    assert d.stop() == 0


def test_psk(env):
    need_tool("nbdinfo", "nbdcopy")
    keys = psk_file(env, "keys.psk", "alice")
    wrong = psk_file(env, "wrong.psk", "alice")    # same user, another key
    stranger = psk_file(env, "bob.psk", "bob")     # a user ftld does not know
    d = start_tls_ftld(env, "--tls=require", "--tls-psk", keys)
    assert "PSK from" in d.log()
    good = nbds(d, user="alice", tls_psk_file=keys)
    nbdinfo_ok(env, good)
    wait_log(d, "PSK user 'alice'")
    refused(env, ["nbdinfo", nbds(d, user="alice", tls_psk_file=wrong)], d,
            "TLS refused: PSK rejected: an unknown user or a wrong key")
    refused(env, ["nbdinfo", nbds(d, user="bob", tls_psk_file=stranger)], d,
            "TLS refused: PSK rejected: an unknown user or a wrong key")
    round_trip(env, good)
    assert d.stop() == 0


def test_reads_around_the_inline_limits(env):
    """Reads of 4 KiB to 192 KiB over TLS, on both sides of the sizes that
    decide whether a read runs on the connection's strand (64 KiB in
    plaintext, 128 KiB on TLS) or on a worker, many in flight at once,
    return the bytes written; the same over a plaintext connection."""
    import nbd
    pki = Pki(env)
    d = start_tls_ftld(env, "--tls=on", "--tls-certificates", pki.server)
    data = os.urandom(8 * MiB)
    sizes = [4096, 60 << 10, 64 << 10, 68 << 10, 124 << 10, 128 << 10, 132 << 10, 192 << 10]
    for tls in (True, False):
        h = nbd.NBD()
        if tls:
            h.set_uri_allow_local_file(True)
            h.connect_uri(nbds(d, tls_certificates=pki.client))
            assert h.get_tls_negotiated()
        else:
            h.connect_uri(d.uri())
            assert not h.get_tls_negotiated()
        if tls:
            for off in range(0, len(data), MiB):
                h.pwrite(data[off:off + MiB], off)
            h.flush()
        reqs = []
        off = 0
        for i in range(64):
            n = sizes[i % len(sizes)]
            off = (off + 12345 * 4096) % (len(data) - n) // 4096 * 4096
            buf = nbd.Buffer(n)
            reqs.append((off, n, buf, h.aio_pread(buf, off)))
        deadline = time.time() + 60
        while h.aio_in_flight() > 0:
            assert time.time() < deadline, "reads did not complete within 60 s"
            h.poll(1000)
        for *_, c in reqs:
            assert h.aio_command_completed(c)
        for off, n, buf, _ in reqs:
            assert buf.to_bytearray() == data[off:off + n], (tls, off, n)
        h.shutdown()
    assert d.stop() == 0


def test_plaintext_clients_against_require(env):
    need_tool("nbdinfo")
    pki = Pki(env)
    d = start_tls_ftld(env, "--tls=require", "--tls-certificates", pki.server)
    refused(env, ["nbdinfo", f"nbd://127.0.0.1:{d.port}/"], d,
            "NBD_OPT_GO: TLS is required: send NBD_OPT_STARTTLS first")
    # By hand: every option but STARTTLS and ABORT gets ERR_TLS_REQD.
    r = Raw(d.port)
    for opt, data in [(OPT_LIST, b""), (OPT_STRUCTURED_REPLY, b""), (99, b"x"),
                      (OPT_INFO, struct.pack(">IH", 0, 0)), (OPT_GO, struct.pack(">IH", 0, 0)),
                      (OPT_INFO, os.urandom(100 * 1024))]:  # too long, and still TLS_REQD
        assert r.ask(opt, data) == ERR_TLS_REQD, opt
    assert r.ask(OPT_ABORT) == REP_ACK
    r.close()
    # NBD_OPT_EXPORT_NAME cannot be refused politely: the connection closes.
    r = Raw(d.port)
    r.option(OPT_EXPORT_NAME, b"")
    assert closed_by_server(r.s)
    r.close()
    wait_log(d, "NBD_OPT_EXPORT_NAME without TLS, which this server requires; closing")
    nbdinfo_ok(env, nbds(d, tls_certificates=pki.client))
    assert d.stop() == 0


def test_starttls_rules_by_hand(env):
    pki = Pki(env)
    d = start_tls_ftld(env, "--tls=require", "--tls-certificates", pki.server)
    r = Raw(d.port)
    assert r.ask(OPT_STARTTLS, b"junk") == ERR_INVALID  # no data allowed
    r.starttls(pki.client)
    assert r.ask(OPT_STARTTLS) == ERR_INVALID           # already running
    # Options work now: LIST names the exports.
    r.option(OPT_LIST)
    names = []
    while True:
        rtype, data = r.reply()
        if rtype == REP_ACK:
            break
        assert rtype == REP_SERVER
        names.append(data[4:4 + struct.unpack(">I", data[:4])[0]])
    assert names == [b"ftl0", b""], names
    r.go()
    payload = os.urandom(64 * 1024)
    r.request(1, 0, len(payload), cookie=7, payload=payload)  # WRITE
    magic, err, cookie = struct.unpack(">IIQ", recv_exact(r.s, 16))
    assert (magic, err, cookie) == (SIMPLE_REPLY_MAGIC, 0, 7)
    r.request(0, 0, len(payload), cookie=8)                      # READ
    magic, err, cookie = struct.unpack(">IIQ", recv_exact(r.s, 16))
    assert (magic, err, cookie) == (SIMPLE_REPLY_MAGIC, 0, 8)
    assert recv_exact(r.s, len(payload)) == payload
    r.request(2, 0, 0)  # DISC
    r.close()

    # Structured replies agreed before STARTTLS do not survive it (spec):
    # with --tls=on they can be asked for in plaintext, and after TLS a READ
    # is answered with a simple reply.
    d2 = start_tls_ftld(env, "--tls=on", "--tls-certificates", pki.server)
    r = Raw(d2.port)
    assert r.ask(OPT_STRUCTURED_REPLY) == REP_ACK
    r.starttls(pki.client)
    r.go()
    r.request(0, 0, 4096, cookie=9)
    magic, err, cookie = struct.unpack(">IIQ", recv_exact(r.s, 16))
    assert (magic, err, cookie) == (SIMPLE_REPLY_MAGIC, 0, 9), hex(magic)
    recv_exact(r.s, 4096)
    r.close()
    assert d2.stop() == 0
    assert d.stop() == 0


def test_tls_on_serves_both(env):
    need_tool("nbdinfo")
    pki = Pki(env)
    d = start_tls_ftld(env, "--tls=on", "--tls-certificates", pki.server)
    assert "ready: nbd://" in d.log()
    r = env.run(["nbdinfo", f"nbd://127.0.0.1:{d.port}/"], timeout=60)
    assert "without TLS" in r.stdout, r.stdout
    nbdinfo_ok(env, nbds(d, tls_certificates=pki.client))
    # Without --tls, STARTTLS is refused by policy.
    d2 = env.start_ftld(size="1G")
    raw = Raw(d2.port)
    assert raw.ask(OPT_STARTTLS) == ERR_POLICY
    raw.close()
    assert d2.stop() == 0
    assert d.stop() == 0


def test_client_drops_mid_handshake(env):
    need_tool("nbdinfo")
    pki = Pki(env)
    d = start_tls_ftld(env, "--tls=require", "--tls-certificates", pki.server)
    for partial in [b"", b"\x16\x03\x01\x02\x00" + os.urandom(40)]:  # nothing / half a ClientHello
        before = log_count(d, "the client closed the connection during the TLS handshake")
        r = Raw(d.port)
        assert r.ask(OPT_STARTTLS) == REP_ACK
        if partial:
            r.s.sendall(partial)
        r.close()
        deadline = time.time() + 15
        while (log_count(d, "the client closed the connection during the TLS handshake") <= before
               and time.time() < deadline):
            time.sleep(0.05)
        assert log_count(d, "the client closed the connection during the TLS handshake") > before, \
            d.log()[-2000:]
    # Garbage instead of a ClientHello.
    r = Raw(d.port)
    assert r.ask(OPT_STARTTLS) == REP_ACK
    r.s.sendall(b"GET / HTTP/1.0\r\n\r\n" * 10)
    assert closed_by_server(r.s)
    r.close()
    wait_log(d, "TLS refused: TLS handshake failed")
    nbdinfo_ok(env, nbds(d, tls_certificates=pki.client))
    assert d.stop() == 0


def test_qemu_over_tls(env):
    need_tool("qemu-img", "qemu-io")
    pki = Pki(env)
    d = start_tls_ftld(env, "--tls=require", "--tls-certificates", pki.server, "--tls-verify-peer")
    obj = f"tls-creds-x509,id=tls0,endpoint=client,dir={pki.client}"
    opts = f"driver=nbd,host=127.0.0.1,port={d.port},export=,tls-creds=tls0"
    r = env.run(["qemu-img", "info", "--object", obj, "--image-opts", opts], timeout=60)
    assert "virtual size: 1" in r.stdout or "virtual size:" in r.stdout, r.stdout
    wait_log(d, "client certificate 'CN=good client")
    r = env.run(["qemu-io", "--object", obj, "--image-opts", opts,
                 "-c", "write -P 0x5a 1M 2M", "-c", "flush", "-c", "read -P 0x5a 1M 2M",
                 "-c", "read -P 0 0 1M"], timeout=120)
    assert "Pattern verification failed" not in r.stdout + r.stderr, r.stdout + r.stderr
    assert "read 2097152/2097152" in r.stdout, r.stdout
    # Without the client certificate qemu is refused too.
    bad = f"tls-creds-x509,id=tls0,endpoint=client,dir={pki.client_ca_only}"
    refused(env, ["qemu-img", "info", "--object", bad, "--image-opts", opts], d, "TLS refused:")
    assert d.stop() == 0


def test_nbd_client_lists_over_tls(env):
    """nbd-client cannot attach here (no nbd module), but `-l` runs its TLS
    handshake (TLS 1.2, its own gnutls setup) and NBD_OPT_LIST."""
    need_tool("nbd-client")
    pki = Pki(env)
    d = start_tls_ftld(env, "--tls=require", "--tls-certificates", pki.server, "--tls-verify-peer")
    c = pki.client
    r = env.run(["nbd-client", "-l", "127.0.0.1", str(d.port),
                 "-cacertfile", os.path.join(c, "ca-cert.pem"),
                 "-certfile", os.path.join(c, "client-cert.pem"),
                 "-keyfile", os.path.join(c, "client-key.pem"), "-tlshostname", "localhost"],
                timeout=60)
    assert "ftl0: ftld volume ftl0" in r.stdout, r.stdout
    wait_log(d, "client certificate 'CN=good client")
    r = refused(env, ["nbd-client", "-l", "127.0.0.1", str(d.port)], d,
                "NBD_OPT_LIST: TLS is required")
    assert "TLS is required" in r.stdout + r.stderr
    assert d.stop() == 0


def test_non_loopback_bind_and_shutdown_with_tls_clients(env):
    """--bind 0.0.0.0 warns unless TLS is required; SIGTERM with a TLS client
    connected (and one in the middle of its handshake) still exits 0."""
    import nbd
    pki = Pki(env)

    def started(args):
        d = env.ftld_process(args=args, size="256M")
        d.start(expect_ready=False)
        deadline = time.time() + 60
        while "ready:" not in d.log() and time.time() < deadline:
            assert d.proc.poll() is None, d.log()
            time.sleep(0.05)
        d.port = int(re.search(r"NBD listening on 0\.0\.0\.0:(\d+)", d.log()).group(1))
        return d

    d = started(["--bind", "0.0.0.0", "--tls=on", "--tls-certificates", pki.server])
    assert "authentication" in d.log(), d.log()
    assert d.stop() == 0
    d = started(["--bind", "0.0.0.0", "--tls=require", "--tls-certificates", pki.server])
    assert "authentication" not in d.log(), d.log()
    h = nbd.NBD()
    h.set_uri_allow_local_file(True)
    h.connect_uri(nbds(d, tls_certificates=pki.client))
    assert h.get_tls_negotiated()
    h.pwrite(b"t" * 65536, 0)
    h.flush()
    stalled = Raw(d.port)
    assert stalled.ask(OPT_STARTTLS) == REP_ACK  # and then silence
    t0 = time.time()
    assert d.stop(timeout=60) == 0
    assert time.time() - t0 < 30, "shutdown waited for the handshake timeout"
    stalled.close()
    try:
        h.pread(4096, 0)
        raise AssertionError("the connection outlived the daemon")
    except nbd.Error:
        pass
    # The data written over TLS is in the pool.
    d2 = env.ftld_process(backing=d.backing, args=["--tls=require", "--tls-certificates", pki.server])
    d2.start()
    h = nbd.NBD()
    h.set_uri_allow_local_file(True)
    h.connect_uri(nbds(d2, tls_certificates=pki.client))
    assert h.pread(65536, 0) == b"t" * 65536
    h.shutdown()
    assert d2.stop() == 0


def test_bad_tls_command_lines(env):
    pki_dir = env.path("empty")
    os.makedirs(pki_dir)
    bad_psk = env.path("bad.psk")
    with open(bad_psk, "w") as f:
        f.write("alice:c2b9\nbob:zz\n")
    cases = [
        (["--tls=require"], "needs --tls-certificates DIR or --tls-psk FILE"),
        (["--tls=maybe"], "--tls: unknown mode 'maybe'"),
        (["--tls-psk", bad_psk], "need --tls=on or --tls=require"),
        (["--tls=on", "--tls-certificates", pki_dir], "server certificate"),
        (["--tls=on", "--tls-psk", bad_psk], "line 2: the key is not hex"),
        (["--tls=on", "--tls-psk", bad_psk, "--tls-verify-peer"], "--tls-verify-peer needs"),
        (["--tls=on", "--tls-certificates", pki_dir, "--tls-psk", bad_psk], "choose one"),
    ]
    for args, message in cases:
        backing = env.path("never.img")
        p = env.ftld_process(backing=backing, args=args, size="256M")
        p.start(expect_ready=False)
        rc = p.wait(60)
        assert rc != 0, args
        assert message in p.log(), (args, p.log())
        assert not os.path.exists(backing), f"{args}: the backing was created"


main(globals())
