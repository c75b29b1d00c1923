#!/usr/bin/python3
"""Samples `ftld --metrics` into a time series (issue 24), for bench/ scripts
that plot what the daemon does over time (bench/cleaning_timeline.sh).

  bench/metrics_timeline.py URL OUT.tsv [--interval SEC] [--until-pid PID]
                            [--duration SEC] [--mark-file FILE]

Every SEC (default 1) it GETs URL (http://127.0.0.1:PORT/metrics), parses it
with python3-prometheus-client, and writes one row per interval:

  t_s  write_mib_s  write_iops  mean_write_us  p99_write_us  wa  free_segments
  full_segments  cleaned_per_s  relocated_mib_s  mark

(NBD writes summed over exports; latency from the interval's histogram
deltas, p99 as the upper bound of the bucket holding it; wa = media bytes /
user bytes written in the interval; mark = the last line appended to
--mark-file since the previous row, e.g. "snapshot"). Stops when PID exits
or after --duration. Uses Debian's /usr/bin/python3 (prometheus_client).
"""

import argparse
import os
import sys
import time
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

MiB = 1 << 20


def scrape(url):
    text = urllib.request.urlopen(url, timeout=10).read().decode()
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out


def total(m, name, **labels):
    return sum(v for ls, v in m.get(name, []) if all(ls.get(k) == x for k, x in labels.items()))


def write_buckets(m):
    b = {}
    for ls, v in m.get("ftld_nbd_request_duration_seconds_bucket", []):
        if ls.get("op") == "write":
            le = float(ls["le"])
            b[le] = b.get(le, 0) + v
    return b


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("url")
    ap.add_argument("out")
    ap.add_argument("--interval", type=float, default=1.0)
    ap.add_argument("--until-pid", type=int, default=0)
    ap.add_argument("--duration", type=float, default=0)
    ap.add_argument("--mark-file", default="")
    a = ap.parse_args()
    f = open(a.out, "w")
    f.write("t_s\twrite_mib_s\twrite_iops\tmean_write_us\tp99_write_us\twa\tfree_segments\t"
            "full_segments\tcleaned_per_s\trelocated_mib_s\tmark\n")
    t0 = time.time()
    prev, prev_t = scrape(a.url), time.time()
    marks_seen = 0
    while True:
        time.sleep(a.interval)
        if a.until_pid and not os.path.exists(f"/proc/{a.until_pid}"):
            break
        if a.duration and time.time() - t0 > a.duration:
            break
        try:
            cur, now = scrape(a.url), time.time()
        except OSError:
            break
        dt = now - prev_t
        d = lambda name, **l: total(cur, name, **l) - total(prev, name, **l)  # noqa: E731
        wbytes = d("ftld_nbd_written_bytes_total")
        wreq = d("ftld_nbd_requests_total", op="write")
        wsum = d("ftld_nbd_request_duration_seconds_sum", op="write")
        user, media = d("ftld_pool_user_written_bytes_total"), d("ftld_pool_media_written_bytes_total")
        cb, pb = write_buckets(cur), write_buckets(prev)
        delta = sorted((le, cb[le] - pb.get(le, 0)) for le in cb)
        p99 = 0.0
        if wreq > 0:
            for le, c in delta:
                if c >= 0.99 * wreq:
                    p99 = le
                    break
        mark = ""
        if a.mark_file and os.path.exists(a.mark_file):
            lines = open(a.mark_file).read().splitlines()
            if len(lines) > marks_seen:
                mark = lines[-1].replace("\t", " ")
                marks_seen = len(lines)
        f.write("\t".join(str(x) for x in [
            round(now - t0, 2), round(wbytes / MiB / dt, 2), round(wreq / dt),
            round(wsum / wreq * 1e6, 1) if wreq else 0,
            round(p99 * 1e6, 1) if p99 != float("inf") else 1e7,
            round(media / user, 3) if user else 0,
            int(total(cur, "ftld_pool_segments", state="free")),
            int(total(cur, "ftld_pool_segments", state="full")),
            round(d("ftld_cleaner_segments_cleaned_total") / dt, 2),
            round(d("ftld_cleaner_relocated_bytes_total") / MiB / dt, 2),
            mark or "-"]) + "\n")
        f.flush()
        prev, prev_t = cur, now
    f.close()


if __name__ == "__main__":
    sys.exit(main())
