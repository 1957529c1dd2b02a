-- wrk script: POST /pub?topic=bench with a 200-byte body (issue 3's HTTP load).
wrk.method = "POST"
wrk.path = "/pub?topic=bench"
wrk.body = string.rep("x", 200)
