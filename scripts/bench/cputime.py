"""Runs a command and writes the CPU time it used (user + system seconds, it and
every child it waited for, from getrusage) to a file, for scripts/bench.sh's
CPU-seconds per GB (and its process id to OUT_FILE.pid). Its output passes
through; its exit status is returned.

  cputime.py OUT_FILE COMMAND [ARG...]
"""

import resource
import subprocess
import sys

if len(sys.argv) < 3:
    sys.stderr.write("usage: cputime.py OUT_FILE COMMAND [ARG...]\n")
    sys.exit(2)
child = subprocess.Popen(sys.argv[2:])
# The command's process id, for a profile's per-process report.
with open(sys.argv[1] + ".pid", "w") as out:
    out.write(f"{child.pid}\n")
status = child.wait()
usage = resource.getrusage(resource.RUSAGE_CHILDREN)
with open(sys.argv[1], "w") as out:
    out.write(f"{usage.ru_utime + usage.ru_stime:.3f}\n")
sys.exit(status)
