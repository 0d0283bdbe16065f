"""Writes copies of a real capture bundle into a folder, one after another, until it is killed.

Used by tests/test_bundle_kill.py, which SIGKILLs writers at random moments. The files are a real NanGuard
bundle's (arrays, model.keras, manifest fields from a real TensorFlow run) and they go through the product's own
`BundleWriter`, in the order NanGuard writes them: batch.npz, the model, weights.npz, commit.

Each writer is a fork of this process, which loaded the source bundle once (no TensorFlow here, so forking is
safe): 50 kills in a row then cost 50 forks, not 50 interpreter starts. Commands on stdin, one per line:

    write PHASEFILE   fork a writer that loops forever; answers "pid <pid>"
    once PHASEFILE    fork a writer that writes one bundle and exits; answers "pid <pid>"
    wait PID          reap that writer; answers "exit <code>" (-9: killed by SIGKILL)

A writer records each phase it enters ("<phase> <n>") in PHASEFILE with unbuffered writes, so the test can tell
where each kill landed.

    python bundle_writer_loop.py SOURCE_BUNDLE CAPTURE_DIR
"""

import os
import sys

from pyadapter.capture import structure
from pyadapter.capture.bundle_format import BATCH_FILE, MANIFEST, WEIGHTS_FILE, BundleWriter
from pyadapter.capture.reader import CaptureBundle


def write_loop(bundle, capture_dir, batch, weights, others, manifest, phase_file, once):
    fd = os.open(phase_file, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def phase(name, count):
        os.write(fd, f"{name} {count}\n".encode())

    count = 0
    while True:
        count += 1
        phase("start", count)
        with BundleWriter(capture_dir, f"{bundle.run}-{os.getpid()}-{count}") as writer:
            phase("batch", count)
            writer.write_arrays(BATCH_FILE, batch)
            for name, content in others.items():
                phase(name, count)
                with open(writer.file(name), "wb") as handle:
                    for at in range(0, len(content), 1 << 20):  # as model.save writes: piece by piece
                        handle.write(content[at : at + (1 << 20)])
            if weights:
                phase("weights", count)
                # streamed, one array at a time, as NanGuard writes the variables
                writer.write_arrays(WEIGHTS_FILE, iter(weights.items()), sum(a.nbytes for a in weights.values()))
            phase("commit", count)
            writer.commit(manifest)
        phase("done", count)
        if once:
            return


def main():
    source, capture_dir = sys.argv[1], sys.argv[2]
    bundle = CaptureBundle.load(source)
    batch = structure.read_npz(bundle.path / BATCH_FILE)
    weights = structure.read_npz(bundle.path / WEIGHTS_FILE) if bundle.weights_path else {}
    others = {
        name: (bundle.path / name).read_bytes()
        for name in bundle.manifest["files"]
        if name not in (BATCH_FILE, WEIGHTS_FILE, MANIFEST)
    }
    manifest = {key: value for key, value in bundle.manifest.items() if key != "files"}
    print("ready", flush=True)
    for line in sys.stdin:
        command, _, argument = line.strip().partition(" ")
        if command in ("write", "once"):
            pid = os.fork()
            if pid == 0:
                code = 0
                try:
                    write_loop(bundle, capture_dir, batch, weights, others, manifest, argument, command == "once")
                except BaseException:
                    code = 1
                os._exit(code)
            print(f"pid {pid}", flush=True)
        elif command == "wait":
            _, status = os.waitpid(int(argument), 0)
            print(f"exit {os.waitstatus_to_exitcode(status)}", flush=True)


if __name__ == "__main__":
    main()
