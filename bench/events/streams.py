"""Holds N buyer event streams (GET /api/events) open against one instance and reports the
server's resident memory before and with them (docs/buyer-events.md; BENCHMARKS.md).

Usage: python3 streams.py PORT N ACTIVITY_ID SERVER_PID [HOLD_S]
Buyers 100001.. with tokens signed by the development secret; prints one JSON line once every
stream has said `: open`, then holds them HOLD_S seconds."""
import base64, hashlib, hmac, json, os, selectors, socket, sys, time

HOST, PORT = "127.0.0.1", int(sys.argv[1])
N, ACTIVITY, PID = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
SECRET = b"seckill-development-secret-change-me"

def b64(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=")

def token(user):
    head = b64(json.dumps({"typ": "JWT", "alg": "HS256"}).encode())
    body = b64(json.dumps({"sub": str(user), "exp": int(time.time()) + 3600}).encode())
    signed = head + b"." + body
    return (signed + b"." + b64(hmac.new(SECRET, signed, hashlib.sha256).digest())).decode()

def rss_kb():
    with open(f"/proc/{PID}/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmRSS"))

before = rss_kb()
sel = selectors.DefaultSelector()
opened, started = 0, time.time()
socks = []
for user in range(1, N + 1):
    s = socket.create_connection((HOST, PORT))
    s.sendall(f"GET /api/events?activity_id={ACTIVITY} HTTP/1.1\r\nHost: {HOST}\r\n"
              f"Authorization: Bearer {token(100000 + user)}\r\n\r\n".encode())
    socks.append(s)
    s.setblocking(False)
    sel.register(s, selectors.EVENT_READ, bytearray())
pending = N
deadline = time.time() + 120
while pending and time.time() < deadline:
    for key, _ in sel.select(timeout=1):
        data = key.fileobj.recv(65536)
        key.data.extend(data)
        if b": open" in key.data and b"200 OK" in key.data:
            sel.unregister(key.fileobj)
            pending -= 1
        elif not data or b"HTTP/1.1 5" in key.data or b"HTTP/1.1 4" in key.data:
            sys.exit(f"stream refused: {bytes(key.data[:200])!r}")
took = time.time() - started
time.sleep(3)
held = rss_kb()
print(json.dumps({"streams": N - pending, "open_s": round(took, 1), "rss_before_kb": before,
                  "rss_with_kb": held, "per_stream_bytes": round((held - before) * 1024 / max(N - pending, 1))}))
sys.stdout.flush()
if len(sys.argv) > 5:
    time.sleep(float(sys.argv[5]))
