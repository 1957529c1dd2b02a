"""Load for test_admin_rates.py, run as a separate process so that its pace does not depend on
the test's own threads (the browser driver, the GIL):

    rate_load.py pub <broker http port> <topic> <messages/s> <seconds>
        publishes through the broker's HTTP /pub over one keep-alive connection, message i at
        start + i / rate (a bounded number: rate x seconds), then exits; a failed /pub exits 1.
    rate_load.py read <broker tcp port> <topic> <channel>
        a pynsq Reader FINning every message until the process is stopped; prints "ready"
        once connected.
"""

import asyncio
import http.client
import sys
import time
import urllib.parse


def publish(port, topic, rate, seconds):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    path = "/pub?topic=" + urllib.parse.quote(topic, safe="")
    start = time.monotonic()
    for i in range(int(rate * seconds)):
        wait = start + i / rate - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        conn.request("POST", path, body=b"rate-%d" % i)
        r = conn.getresponse()
        body = r.read()
        if r.status != 200:
            print("/pub answered %d %r" % (r.status, body), file=sys.stderr)
            sys.exit(1)


def read(port, topic, channel):
    import nsq

    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    reader = nsq.Reader(topic=topic, channel=channel, message_handler=lambda m: True,
                        nsqd_tcp_addresses=["127.0.0.1:%d" % port], max_in_flight=100,
                        lookupd_poll_interval=60)

    def ready():
        if any(c.connected() for c in reader.conns.values()):
            print("ready", flush=True)
        else:
            loop.call_later(0.05, ready)
    loop.call_soon(ready)
    loop.run_forever()


if __name__ == "__main__":
    if sys.argv[1] == "pub":
        publish(int(sys.argv[2]), sys.argv[3], float(sys.argv[4]), float(sys.argv[5]))
    elif sys.argv[1] == "read":
        read(int(sys.argv[2]), sys.argv[3], sys.argv[4])
    else:
        sys.exit("usage: rate_load.py pub PORT TOPIC RATE SECONDS | read PORT TOPIC CHANNEL")
