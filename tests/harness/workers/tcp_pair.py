"""`srun -N2 -n2 python tcp_pair.py PORT`: rank 0 (on n1) listens on PORT; rank 1 (on n2) connects to
`n1` by name and says hello: the test cluster's nodes resolve and reach each other."""
import os
import socket
import sys
import time

port = int(sys.argv[1])
rank = int(os.environ["SLURM_PROCID"])
host = socket.gethostname()
if rank == 0:
    srv = socket.create_server(("0.0.0.0", port))
    srv.settimeout(30)
    conn, peer = srv.accept()
    print("rank0", host, "got", conn.recv(100).decode(), "from", peer[0], flush=True)
else:
    deadline = time.time() + 30
    while True:
        try:
            s = socket.create_connection(("n1", port), timeout=2)
            break
        except OSError:
            if time.time() > deadline:
                raise
            time.sleep(0.05)
    s.sendall(("hello-from-" + host).encode())
    s.close()
    print("rank1", host, "sent", flush=True)
