-- wrk POST script: one Titanic passenger per V2 infer request.
--   wrk -t1 -c32 -d15s --latency -s benchmarks/wrk/titanic_infer.lua http://127.0.0.1:8000
-- wrk counts non-2xx answers itself ("Non-2xx or 3xx responses").
wrk.method = "POST"
wrk.path = "/v2/models/titanic/infer"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"inputs":[{"name":"features","shape":[1,12],"datatype":"FP32",' ..
           '"data":[1,0,1,0.2875,0.3333333333333333,0,0.322667,0,1,0,0,0]}]}'
