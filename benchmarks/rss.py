"""Run a command and print its peak RSS (MB) as the last line of stderr, as JSON."""

import json
import os
import subprocess
import sys

child = subprocess.Popen(sys.argv[1:])
_, status, usage = os.wait4(child.pid, 0)
print(json.dumps({"peak_rss_mb": usage.ru_maxrss / 1024}), file=sys.stderr)
sys.exit(os.waitstatus_to_exitcode(status))
