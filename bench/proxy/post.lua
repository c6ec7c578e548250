-- wrk script: POST a chat completion of BODY_BYTES bytes (env), optionally streamed (STREAM=1)
-- with CHUNKS events of CHUNK_BYTES each (x-fake-* headers understood by kvgate-fake-upstream;
-- the non-streamed reply is CHUNKS x CHUNK_BYTES of content). PROMPT=agentic builds the body
-- as a coding agent's turn: a system prompt, then user / assistant tool call / tool result
-- messages whose contents are source listings with newlines, quotes and tabs (JSON escapes).
local bytes = tonumber(os.getenv("BODY_BYTES") or "4096")
local stream = os.getenv("STREAM") == "1"
local chunks = os.getenv("CHUNKS") or "8"
local chunk_bytes = os.getenv("CHUNK_BYTES") or "0"
local agentic = os.getenv("PROMPT") == "agentic"

local function plain_body()
  local head = '{"model":"fake-model","messages":[{"role":"user","content":"'
  local tail = '"}],"stream":' .. (stream and "true" or "false") .. '}'
  local pad = bytes - #head - #tail
  if pad < 0 then pad = 0 end
  return head .. string.rep("a", pad) .. tail
end

local function agentic_body()
  local listing = 'int main(int argc, char** argv) {\\n\\tif (argc < 2) {\\n\\t\\tstd::cerr << ' ..
    '\\"usage: tool FILE\\" << std::endl;\\n\\t\\treturn 2;\\n\\t}\\n\\treturn Run(argv[1]);\\n}\\n'
  local parts = {'{"model":"fake-model","stream":', stream and "true" or "false",
    ',"messages":[{"role":"system","content":"You are a coding agent. ',
    string.rep("Follow the repository conventions. ", 200), '"}'}
  local size, turn = 0, 0
  for _, p in ipairs(parts) do size = size + #p end
  while size < bytes - 600 do
    local tool = string.rep(listing, 40)
    local msgs = {
      ',{"role":"user","content":"Fix the failing test in src/file' .. turn .. '.cc"}',
      ',{"role":"assistant","content":null,"tool_calls":[{"id":"call_' .. turn ..
        '","type":"function","function":{"name":"read_file","arguments":"{\\"path\\": ' ..
        '\\"src/file' .. turn .. '.cc\\"}"}}]}',
      ',{"role":"tool","tool_call_id":"call_' .. turn .. '","content":"' .. tool .. '"}'}
    for _, m in ipairs(msgs) do
      parts[#parts + 1] = m
      size = size + #m
    end
    turn = turn + 1
  end
  parts[#parts + 1] = ']}'
  return table.concat(parts)
end

wrk.method = "POST"
wrk.body = agentic and agentic_body() or plain_body()
wrk.headers["Content-Type"] = "application/json"
wrk.headers["x-fake-chunks"] = chunks
wrk.headers["x-fake-chunk-bytes"] = chunk_bytes
-- The same prompt every time: an engine would report it all cached (a token per 4 bytes).
wrk.headers["x-fake-cached-tokens"] = tostring(math.floor(#wrk.body / 4))
