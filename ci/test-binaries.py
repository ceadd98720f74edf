#!/usr/bin/env python3
"""Builds the test binaries of a `cargo test` selection, then runs them side by side.

    ci/test-binaries.py [--jobs N] [--servers-of-their-own] CARGO_TEST_ARGUMENT...

`cargo test` runs its binaries one after another, and most of ours spend their time waiting for
locks to expire, so on two cores a serial run is mostly idle. This script builds what
`cargo test CARGO_TEST_ARGUMENT... --no-run` builds, then runs the binaries N at a time (3 by
default), each as cargo would (from its package's folder, with its package's CARGO_* variables),
longest first by the times of the last run on this machine.

The kit's defect suite of blind-written providers (ALONE) runs first, by itself: it runs six
kits at once, and beside it and two deep conformance runs a kit against a real server saw every
probe answered too late to prove anything (MongoDB's `clock_skew`, measured here).

A binary that restarts, pauses or fails over a shared server (the fault suites and the failover
tests: TAKES) would break every other binary using that server meanwhile, so those run after
the others, one at a time; unless `--servers-of-their-own` says that each binary starts the
servers it uses (the kit's container launcher), when they run with the rest.

Each binary's output is printed whole when it ends, under a `==== <target> (<s> s): ok|FAILED`
line, so outputs never interleave. Every binary runs even when one fails; the exit status is 1
if any failed, and the end lists them as cargo does (`error: N targets failed:` and one
`-p <package> --test <name>` line each).
"""

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor

# Test targets, as (package, target), that run by themselves: they load the whole machine.
ALONE = {("shedlock-conformance", "blind")}
# Test targets that take a server of their package from everyone else: the plain one that
# ci/start-backends.sh starts, or a cluster of ci/start-clusters.sh.
TAKES = {"faults", "fault_defects", "failover", "cluster_failover", "sentinel_failover"}
# The dynamic loader's path for the binaries (build() sets it).
LIBRARY_PATH = ""
# Where the last run's time per binary is kept (in the target dir), for longest-first ordering.
TIMES_FILE = "test-binary-times.json"


class Binary:
    def __init__(self, artifact, manifest_dir, package):
        target = artifact["target"]
        self.executable = artifact["executable"]
        self.package = package
        self.manifest_dir = manifest_dir
        self.kind = target["kind"][0]
        self.name = target["name"]
        self.alone = self.kind == "test" and (package, self.name) in ALONE
        self.takes = self.kind == "test" and self.name in TAKES

    def label(self):
        """The target as `cargo test` selects it."""
        flag = {"lib": "--lib", "bin": "--bin", "test": "--test", "bench": "--bench",
                "example": "--example"}.get(self.kind, "--" + self.kind)
        return f"-p {self.package} {flag}" + ("" if self.kind == "lib" else f" {self.name}")


def build(cargo_arguments):
    """Builds the selection and returns its test binaries, in cargo's order."""
    global LIBRARY_PATH
    command = ["cargo", "test", *cargo_arguments, "--no-run",
               "--message-format=json-render-diagnostics"]
    print("== " + " ".join(command), flush=True)
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    binaries, seen = [], set()
    # The folders cargo adds to the dynamic loader's path when it runs a test: the native
    # libraries build scripts link, the deps folder, and the toolchain's own libraries (a
    # proc-macro crate's tests link libstd dynamically).
    library_path = []
    for line in process.stdout:
        try:
            message = json.loads(line)
        except json.JSONDecodeError:
            sys.stdout.write(line)
            continue
        if message.get("reason") == "build-script-executed":
            library_path += [path.split("=", 1)[-1] for path in message["linked_paths"]]
        if message.get("reason") != "compiler-artifact":
            continue
        if not message["profile"]["test"] or not message.get("executable"):
            continue
        if message["executable"] in seen:
            continue
        seen.add(message["executable"])
        manifest_dir = os.path.dirname(message["manifest_path"])
        package = package_name(message["package_id"], manifest_dir)
        binaries.append(Binary(message, manifest_dir, package))
    if process.wait() != 0:
        sys.exit(f"error: the build failed (cargo exited with {process.returncode})")
    library_path += sorted({os.path.dirname(binary.executable) for binary in binaries})
    library_path.append(subprocess.run(["rustc", "--print", "target-libdir"], check=True,
                                       capture_output=True, text=True).stdout.strip())
    if os.environ.get("LD_LIBRARY_PATH"):
        library_path.append(os.environ["LD_LIBRARY_PATH"])
    LIBRARY_PATH = os.pathsep.join(dict.fromkeys(library_path))
    return binaries


def package_name(package_id, manifest_dir):
    """The package's name: cargo's package id spells it after `#` (`path+file:///x#name@1.0`),
    or `#1.0` alone when the folder has the package's name."""
    fragment = package_id.rsplit("#", 1)[-1]
    name = fragment.split("@", 1)[0]
    if "@" not in fragment or not name:
        return os.path.basename(manifest_dir)
    return name


def run(binary, pass_through):
    """Runs one binary as `cargo test` would; returns (passed, seconds, output)."""
    environment = dict(os.environ)
    environment.update(CARGO_MANIFEST_DIR=binary.manifest_dir, CARGO_PKG_NAME=binary.package,
                       LD_LIBRARY_PATH=LIBRARY_PATH)
    started = time.monotonic()
    with tempfile.TemporaryFile(mode="w+b") as output:
        completed = subprocess.run([binary.executable, *pass_through], cwd=binary.manifest_dir,
                                   env=environment, stdin=subprocess.DEVNULL, stdout=output,
                                   stderr=subprocess.STDOUT)
        output.seek(0)
        text = output.read().decode("utf-8", "replace")
    return completed.returncode == 0, time.monotonic() - started, text


def main():
    # This script's own options come first; everything from the first other word is cargo's.
    arguments, jobs, servers_of_their_own = sys.argv[1:], 3, False
    while arguments and arguments[0] in ("--jobs", "--servers-of-their-own", "-h", "--help"):
        option = arguments.pop(0)
        if option in ("-h", "--help"):
            print(__doc__)
            return
        if option == "--servers-of-their-own":
            servers_of_their_own = True
        elif not arguments or not arguments[0].isdigit() or int(arguments[0]) < 1:
            sys.exit("error: --jobs takes a whole number of at least 1")
        else:
            jobs = int(arguments.pop(0))
    pass_through = []
    if "--" in arguments:
        split = arguments.index("--")
        arguments, pass_through = arguments[:split], arguments[split + 1:]

    binaries = build(arguments)
    target_dir = os.environ.get("CARGO_TARGET_DIR") or os.path.join(os.getcwd(), "target")
    times_path = os.path.join(target_dir, TIMES_FILE)
    try:
        with open(times_path) as file:
            kept = json.load(file)
    except (OSError, ValueError):
        kept = {}
    # Kept per selection: the same binary takes longer against a container than a warm server.
    selection = " ".join(sys.argv[1:])
    last_times = kept.get(selection, {})
    # Unknown binaries first (a new one may be long), then the longest of the last run.
    def longest_first(binary):
        return -last_times.get(binary.label(), float("inf"))

    alone = [b for b in binaries if b.alone]
    taking = sorted((b for b in binaries if b.takes and not servers_of_their_own),
                    key=longest_first)
    shared = sorted((b for b in binaries if b not in alone and b not in taking),
                    key=longest_first)
    print(f"== {len(alone)} by itself: {', '.join(b.label() for b in alone) or '-'}; then "
          f"{len(shared)} test binaries, {jobs} at a time; then {len(taking)} that take a "
          f"server: {', '.join(b.label() for b in taking) or '-'}", flush=True)

    lock = threading.Lock()
    failed, times = [], {}
    started = time.monotonic()

    def report(binary):
        try:
            passed, seconds, text = run(binary, pass_through)
        except OSError as error:
            passed, seconds, text = False, 0.0, f"could not be run: {error}\n"
        with lock:
            times[binary.label()] = round(seconds, 1)
            if not passed:
                failed.append(binary)
            print(f"==== {binary.label()} ({seconds:.0f} s): {'ok' if passed else 'FAILED'}")
            sys.stdout.write(text)
            sys.stdout.flush()

    for binary in alone:
        report(binary)
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        list(pool.map(report, shared))

    # Those that take a server, one at a time: side by side, ZooKeeper's failover run saw a
    # lock end 164 ms later than its check allows (measured here).
    for binary in taking:
        report(binary)

    kept[selection] = {**last_times, **times}
    try:
        with open(times_path, "w") as file:
            json.dump(kept, file, indent=1, sort_keys=True)
    except OSError as error:
        print(f"(the times were not kept: {error})")
    print(f"== {len(binaries)} test binaries ran in {time.monotonic() - started:.0f} s; "
          "the longest:")
    for label, seconds in sorted(times.items(), key=lambda item: -item[1])[:12]:
        print(f"   {seconds:7.1f} s  {label}")
    if failed:
        print(f"error: {len(failed)} target{'s' if len(failed) > 1 else ''} failed:")
        for binary in failed:
            print(f"    `{binary.label()}`")
        sys.exit(1)


if __name__ == "__main__":
    main()
