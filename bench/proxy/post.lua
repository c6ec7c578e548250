-- wrk script: POST a chat completion of BODY_BYTES bytes (env), optionally streamed with CHUNKS
-- events (x-fake-chunks header understood by kvgate-fake-upstream).
local bytes = tonumber(os.getenv("BODY_BYTES") or "4096")
local stream = os.getenv("STREAM") == "1"
local chunks = os.getenv("CHUNKS") or "8"
local head = '{"model":"fake-model","messages":[{"role":"user","content":"'
local tail = '"}],"stream":' .. (stream and "true" or "false") .. '}'
local pad = bytes - #head - #tail
if pad < 0 then pad = 0 end
wrk.method = "POST"
wrk.body = head .. string.rep("a", pad) .. tail
wrk.headers["Content-Type"] = "application/json"
wrk.headers["x-fake-chunks"] = chunks
