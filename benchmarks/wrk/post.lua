-- wrk script: a request to the path $WRK_PATH, by $WRK_METHOD (POST when
-- unset), with the JSON in the file $WRK_BODY (none when unset or empty).
--   WRK_PATH=/v1/models/titanic:classify WRK_BODY=body.json \
--     wrk -t1 -c32 -d10s -s benchmarks/wrk/post.lua http://127.0.0.1:8000
wrk.method = os.getenv("WRK_METHOD") or "POST"
wrk.path = os.getenv("WRK_PATH")
local body = os.getenv("WRK_BODY")
if body and body ~= "" then
    wrk.headers["Content-Type"] = "application/json"
    local file = assert(io.open(body, "rb"))
    wrk.body = file:read("*a")
    file:close()
end
