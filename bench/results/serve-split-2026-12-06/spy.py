import asyncio, subprocess, sys
sys.path.insert(0, "bench"); sys.path.insert(0, ".")
from pathlib import Path
import bench_serve as B
home = Path(sys.argv[1]); max_batch = int(sys.argv[2])
reqs = B.game_requests(800)
MODEL = sys.argv[3] if len(sys.argv) > 3 else "smollm2-135m"
proc, url = B.start_server(home, MODEL, max_batch, None)
try:
    stream = iter(reqs)
    asyncio.run(B.load(url, MODEL, stream, 4, 5))
    spy = subprocess.Popen([".venv/bin/py-spy", "record", "-p", str(proc.pid), "-d", "30", "-r", "50", "-f", "raw", "-o", "/tmp/prof/spy.txt", "--threads", "--nonblocking"])
    r = asyncio.run(B.load(url, MODEL, stream, 16, 35))
    print(r)
    spy.wait()
finally:
    proc.terminate(); proc.wait()
