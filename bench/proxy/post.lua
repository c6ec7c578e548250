-- wrk script: POST a chat completion of BODY_BYTES bytes (env), optionally streamed (STREAM=1)
-- with CHUNKS events of CHUNK_BYTES each, DELAY_MS apart when set (x-fake-* headers understood
-- by kvgate-fake-upstream; the non-streamed reply is CHUNKS x CHUNK_BYTES of content).
-- PROMPT=agentic builds the body as a coding agent's turn: a system prompt, then user /
-- assistant tool call / tool result messages whose contents are source listings with newlines,
-- quotes and tabs (JSON escapes); with TOOLS=after, 16 function tools follow the messages.
-- API=messages builds the same turn as Claude Code sends it to /v1/messages: three system
-- blocks (a per-session billing header), ~48 KB of tool definitions, metadata.user_id, thinking,
-- user / assistant tool_use / user tool_result content blocks, cache_control on the last block.
local bytes = tonumber(os.getenv("BODY_BYTES") or "4096")
local stream = os.getenv("STREAM") == "1"
local chunks = os.getenv("CHUNKS") or "8"
local chunk_bytes = os.getenv("CHUNK_BYTES") or "0"
local agentic = os.getenv("PROMPT") == "agentic"
local messages = os.getenv("API") == "messages"
local tools_after = os.getenv("TOOLS") == "after"

local function plain_body()
  local head = '{"model":"fake-model","messages":[{"role":"user","content":"'
  local tail = '"}],"stream":' .. (stream and "true" or "false") .. '}'
  local pad = bytes - #head - #tail
  if pad < 0 then pad = 0 end
  return head .. string.rep("a", pad) .. tail
end

-- 16 function tools (~48 KB) in OpenAI's shape, for TOOLS=after: the OpenAI SDKs write
-- `tools` after `messages`, so the gateway meets them after the conversation.
local function openai_tools()
  local schema = '{"type":"object","properties":{"command":{"type":"string","description":"' ..
    string.rep("The command to run in the repository's shell. ", 20) .. '"},"timeout":' ..
    '{"type":"number"}},"required":["command"]}'
  local tools = {}
  for i = 1, 16 do
    tools[#tools + 1] = '{"type":"function","function":{"name":"tool' .. i ..
      '","description":"' .. string.rep("Use this tool to work on the repository. ", 40) ..
      '","parameters":' .. schema .. '}}'
  end
  return '[' .. table.concat(tools, ",") .. ']'
end

local function agentic_body()
  local listing = 'int main(int argc, char** argv) {\\n\\tif (argc < 2) {\\n\\t\\tstd::cerr << ' ..
    '\\"usage: tool FILE\\" << std::endl;\\n\\t\\treturn 2;\\n\\t}\\n\\treturn Run(argv[1]);\\n}\\n'
  local parts = {'{"model":"fake-model","stream":', stream and "true" or "false",
    ',"messages":[{"role":"system","content":"You are a coding agent. ',
    string.rep("Follow the repository conventions. ", 200), '"}'}
  local size, turn = 0, 0
  for _, p in ipairs(parts) do size = size + #p end
  if tools_after then size = size + #openai_tools() end
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
  parts[#parts + 1] = ']'
  if tools_after then parts[#parts + 1] = ',"tools":' .. openai_tools() end
  parts[#parts + 1] = '}'
  return table.concat(parts)
end

local function messages_body()
  local listing = 'int main(int argc, char** argv) {\\n\\tif (argc < 2) {\\n\\t\\tstd::cerr << ' ..
    '\\"usage: tool FILE\\" << std::endl;\\n\\t\\treturn 2;\\n\\t}\\n\\treturn Run(argv[1]);\\n}\\n'
  local schema = '{"type":"object","properties":{"command":{"type":"string","description":"' ..
    string.rep("The command to run in the repository's shell. ", 20) .. '"},"timeout":' ..
    '{"type":"number"}},"required":["command"]}'
  local tools = {}
  for i = 1, 16 do
    tools[#tools + 1] = '{"name":"Tool' .. i .. '","description":"' ..
      string.rep("Use this tool to work on the repository. ", 40) .. '","input_schema":' .. schema .. '}'
  end
  local parts = {'{"model":"fake-model","max_tokens":32000,"stream":', stream and "true" or "false",
    ',"system":[{"type":"text","text":"x-anthropic-billing-header: cc_version=2.1.27; ',
    'cc_entrypoint=cli; cch=0a1b2c;"},{"type":"text","text":"You are Claude Code."},',
    '{"type":"text","text":"', string.rep("Follow the repository conventions. ", 800),
    '","cache_control":{"type":"ephemeral"}}],"tools":[', table.concat(tools, ","), '],',
    '"metadata":{"user_id":"{\\"device_id\\":\\"0f0e\\",\\"account_uuid\\":\\"\\",',
    '\\"session_id\\":\\"6d3c3e54-1b8a-4b55-9d3e-7b2f5d1c9a01\\"}"},',
    '"thinking":{"type":"enabled","budget_tokens":31999},"messages":['}
  local size, turn = 0, 0
  for _, p in ipairs(parts) do size = size + #p end
  local sep = ""
  while size < bytes - 600 do
    local tool = string.rep(listing, 40)
    local msgs = {
      sep .. '{"role":"user","content":[{"type":"text","text":"Fix the failing test in src/file' ..
        turn .. '.cc"}]}',
      ',{"role":"assistant","content":[{"type":"thinking","thinking":"Read it first.",' ..
        '"signature":"EqQBCkgIBxABGAIiQL"},{"type":"tool_use","id":"toolu_' .. turn ..
        '","name":"Tool1","input":{"command":"cat src/file' .. turn .. '.cc"}}]}',
      ',{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_' .. turn ..
        '","content":"' .. tool .. '"}]}'}
    for _, m in ipairs(msgs) do
      parts[#parts + 1] = m
      size = size + #m
    end
    sep = ","
    turn = turn + 1
  end
  parts[#parts + 1] = ',{"role":"user","content":[{"type":"text","text":"go on",' ..
    '"cache_control":{"type":"ephemeral"}}]}]}'
  return table.concat(parts)
end

wrk.method = "POST"
if messages then
  wrk.body = messages_body()
else
  wrk.body = agentic and agentic_body() or plain_body()
end
wrk.headers["Content-Type"] = "application/json"
wrk.headers["x-fake-chunks"] = chunks
wrk.headers["x-fake-chunk-bytes"] = chunk_bytes
if os.getenv("DELAY_MS") then wrk.headers["x-fake-delay-ms"] = os.getenv("DELAY_MS") end
-- The same prompt every time: an engine would report it all cached (a token per 4 bytes).
wrk.headers["x-fake-cached-tokens"] = tostring(math.floor(#wrk.body / 4))
