# Sends one push, then COUNT at once on one h2c connection, and prints (JSON) what python-h2,
# the HTTP/2 layer of httpx, aioapns and kalyke-apns, made of what came back, in order.
# Usage: h2_answer_order.py HOST PORT TOKEN JWT TOPIC COUNT (run by FaultTests)
import json, socket, sys
import h2.config, h2.connection, h2.events, h2.exceptions

host, port, token, jwt, topic, count = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5], int(sys.argv[6])
sock = socket.create_connection((host, port), timeout=10)
conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
conn.initiate_connection()
sock.sendall(conn.data_to_send())
body = b'{"aps":{"alert":"order"}}'
headers = [(":method", "POST"), (":scheme", "http"), (":authority", host), (":path", "/3/device/" + token),
           ("authorization", "bearer " + jwt), ("apns-topic", topic)]

def send(n):
    for _ in range(n):
        sid = conn.get_next_available_stream_id()
        conn.send_headers(sid, headers)
        conn.send_data(sid, body, end_stream=True)
    sock.sendall(conn.data_to_send())

seen, statuses, done = [], {}, 0
def read_until(stop):
    while not stop():
        data = sock.recv(65536)
        if not data:
            seen.append("eof")
            return
        try:
            events = conn.receive_data(data)
        except h2.exceptions.ProtocolError as error:
            seen.append("protocol-error: " + str(error)[:80])
            return
        for event in events:
            if isinstance(event, h2.events.ResponseReceived):
                statuses[event.stream_id] = dict(event.headers)[b":status"].decode()
            elif isinstance(event, h2.events.StreamEnded):
                seen.append("answer %s" % statuses.get(event.stream_id))
            elif isinstance(event, h2.events.StreamReset):
                seen.append("reset %d" % event.error_code)
            elif isinstance(event, h2.events.ConnectionTerminated):
                seen.append("goaway")
        out = conn.data_to_send()
        if out:
            try: sock.sendall(out)
            except OSError: pass

send(1)  # the first valid token raises the stream limit from 1
read_until(lambda: any(s.startswith("answer") for s in seen))
send(count)
read_until(lambda: seen[-1] == "eof" or seen[-1].startswith("protocol-error"))
print(json.dumps(seen))
