-- JobStore update: check the stored record, change the given fields, bump the version, in
-- one round trip. Redis keeps whatever a script wrote before it failed, so every check
-- runs before the first write: the record must be one this version reads (what
-- store/record_hash.py: parse_hash accepts after redis-py's UTF-8 decoding), else nothing
-- is written and the reply names the field parse_hash would name.
-- Two modes:
--  * checked here (ARGV[1] = ""): the common case. The script judges the whole record by
--    parse_hash's rules, in parse_hash's order, so the field it names is the one Python
--    would. Where Python's verdict cannot be known in Lua it replies {"check"} unwritten,
--    and the caller reads, parses and comes back in the second mode. Those cases:
--    - JSON nested deeper than 64 (the store's own bound): json.loads fails past the
--      interpreter's recursion limit, which depends on sys.getrecursionlimit() and on how
--      deep the caller's stack already is;
--    - a JSON integer of more than 640 characters, or a version longer than that: int()
--      refuses more digits than sys.get_int_max_str_digits(), a setting of the process
--      (never below 640);
--    - created_at, updated_at or version holding whitespace, "_" or non-ASCII bytes:
--      int() and float() read surrounding (Unicode) spaces, digit grouping and Unicode
--      digits (Arabic-Indic, fullwidth, ...), tables a script should not copy;
--    - payload or result longer than 8 KiB: judged here it could be, but not quickly (see
--      MAX_JUDGED_JSON), and a document that long costs a transfer of its own anyway.
--  * checked by the caller (ARGV[1] = the version it read): it has read and parsed the
--    record; the script writes only if the record is still that one (same version and
--    created_at, their exact text), so what it writes lands on a record known to be valid.
-- The remaining TTL is kept (HSET does not touch it) unless ARGV[8] asks for one.
-- KEYS[1]   the record hash
-- ARGV[1]   "" (checked here), or the stored version the caller read (its exact text)
-- ARGV[2]   with ARGV[1]: the stored created_at the caller read (its exact text)
-- ARGV[3]   with ARGV[1]: the new version (decimal digits, computed by the caller)
-- ARGV[4]   new status, "" = unchanged
-- ARGV[5]   payload JSON, "" = unchanged
-- ARGV[6]   result JSON, "" = unchanged
-- ARGV[7]   error: "" = unchanged, else "=" followed by the error text
-- ARGV[8]   TTL in seconds (at most 9 digits), "" = keep the remaining TTL
-- ARGV[9]   without ARGV[1]: every status this version knows, as ",pending,running,...,"
-- ARGV[10]  without ARGV[1]: the statuses ARGV[4] may be reached from, same form
-- ARGV[11]  without ARGV[1]: expected version (decimal digits), "" = any
-- Returns, after writing:
--   checked by the caller: {"ok", updated_at}
--   checked here: {"ok", updated_at, version, status, payload, result, error, created_at,
--   owner_oid}, the record as written, each of the four fields the caller sent (and any
--   field the record lacks) as nil: the caller has them, and needs no second read.
-- Or, writing nothing: {"missing"}; {"malformed", field} (the stored record fails
-- parse_hash: "record" for a key of another type or a field that is not UTF-8);
-- {"check"}; {"moved"} (checked by the caller: the record is no longer the one it read);
-- {"version", stored version digits}; {"illegal", stored status}; {"invalid", argument}.
-- @include store_time
local find, byte, sub, match, gsub = string.find, string.byte, string.sub, string.match,
  string.gsub

local kind = redis.call('TYPE', KEYS[1])['ok']
if kind == 'none' then
  return {'missing'}
end
if kind ~= 'hash' then
  return {'malformed', 'record'}
end

-- Python's strict UTF-8 decoder (redis-py decodes every name and value)? Each sequence
-- it reads (no overlong form, no surrogate, nothing past U+10FFFF) is replaced by an
-- ASCII byte, and no byte past ASCII may be left. (Replaced, not removed: removing one
-- could join the bytes around it into a sequence.)
local UTF8 = {'[\194-\223][\128-\191]', '\224[\160-\191][\128-\191]',
  '[\225-\236\238\239][\128-\191][\128-\191]', '\237[\128-\159][\128-\191]',
  '\240[\144-\191][\128-\191][\128-\191]', '[\241-\243][\128-\191][\128-\191][\128-\191]',
  '\244[\128-\143][\128-\191][\128-\191]'}
local function utf8_ok(s)
  if not find(s, '[\128-\255]') then
    return true
  end
  for _, sequence in ipairs(UTF8) do
    s = gsub(s, sequence, '.')
  end
  return not find(s, '[\128-\255]')
end

local OK, BAD, CHECK = 1, 2, 3
-- What int() and float() read beyond the ASCII forms below (see the header); ASCII text
-- without any of it is judged here. %s is C's isspace: the ASCII spaces they strip.
local PY_EXTRA = '[%s_\128-\255]'
-- The largest count of digits int() reads under any sys.set_int_max_str_digits().
local INT_DIGITS = 640
local MAX_DEPTH = 64
-- Longer JSON is left to Python too, so that an update never holds Redis for long: the
-- judgement costs about 0.07 ms per KiB of dense JSON (objects of short fields: its Lua
-- pattern passes, not cjson, cost most), where the client's json.loads is much faster,
-- and a document this long is a transfer of its own.
local MAX_JUDGED_JSON = 8192

-- float(text) finite? In ASCII without PY_EXTRA, float() reads only
-- [+-](digits[.digits] | .digits)[e[+-]digits], and inf/nan, which are not finite.
-- tonumber (strtod) and float() both round correctly, so they overflow alike.
local function float_verdict(text)
  local _, e = find(text, '^[+-]?%d+%.?%d*')
  if not e then
    _, e = find(text, '^[+-]?%.%d+')
  end
  if e then
    local _, x = find(text, '^[eE][+-]?%d+', e + 1)
    if (x or e) == #text then
      local n = tonumber(text)
      return (n > -math.huge and n < math.huge) and OK or BAD, n
    end
  end
  return find(text, PY_EXTRA) and CHECK or BAD
end

-- created_at: a float as above, and a place in the time index: create's "<sec>.<usec>"
-- exactly, else round(created_at * 1e6), which must be finite too. Lua numbers are the
-- same doubles, so the product overflows here exactly when it does in Python.
local function created_verdict(text)
  local verdict, n = float_verdict(text)
  if verdict == OK and not find(text, '^%d+%.%d%d%d%d%d%d$')
      and not (math.abs(n * 1000000) < math.huge) then
    return BAD
  end
  return verdict
end

-- int(text) >= 1 and finite as a float (parse_hash's rule)? Returns the verdict and, for
-- OK, the digits without sign or leading zeros. In ASCII without PY_EXTRA, int() reads
-- only [+-]digits.
local function version_verdict(text)
  if find(text, '^[+-]?%d+$') then
    if #text > INT_DIGITS then
      return CHECK
    end
    local sign, digits = match(text, '^([+-]?)0*(%d*)$')
    if digits == '' or sign == '-' or tonumber(digits) == math.huge then
      return BAD
    end
    return OK, digits
  end
  return find(text, PY_EXTRA) and CHECK or BAD
end

local JSON_WORDS = {['true'] = true, ['false'] = true, null = true, NaN = true,
  Infinity = true, ['-Infinity'] = true}  -- json.loads reads NaN and Infinity too
-- The verdict on the scalars of the document being judged (set by scalar()).
local scalars = OK

-- A scalar other than a string, checked as json.loads scans it (a word above, or
-- -?(0|[1-9]digits)(.digits)?([eE][+-]?digits)?), becomes 0.
local function scalar(token)
  if JSON_WORDS[token] then
    return '0'
  end
  local _, i = find(token, '^%-?%d+')
  local first = byte(token) == 45 and 2 or 1  -- past a minus
  if not i or (i > first and byte(token, first) == 48) then
    scalars = BAD  -- no digit first, or a leading zero
  elseif i < #token then
    local _, f = find(token, '^%.%d+', i + 1)
    local _, x = find(token, '^[eE][+-]?%d+', (f or i) + 1)
    if (x or f) ~= #token then
      scalars = BAD
    end
  elseif i > INT_DIGITS and scalars == OK then
    scalars = CHECK
  end
  return '0'
end

-- json.loads(s) a dict or None (parse_hash's payload and result)? Redis' cjson reads the
-- structure; what json.loads reads differently is settled first: each string is checked
-- (escapes, no control character) and becomes "", each other scalar is checked and
-- becomes 0, so cjson's own leniency (raw control characters, numbers such as 01, 1.,
-- +1, 0x10, inf) never decides.
local function json_verdict(s)
  if #s > MAX_JUDGED_JSON then
    return CHECK
  end
  local _, e = find(s, '^[ \t\n\r]*')
  if byte(s, e + 1) ~= 123 then  -- {
    -- null, or any other value (or none): not an object.
    return find(s, '^[ \t\n\r]*null[ \t\n\r]*$') and OK or BAD
  end
  -- Escapes, left to right as json.loads pairs them: \" \\ \/ \b \f \n \r \t, then
  -- \uXXXX (a lone surrogate too, as json.loads reads it); a backslash left is none.
  if find(s, '\\', 1, true) then
    s = gsub(gsub(s, '\\[\\"/bfnrt]', 'x'), '\\u%x%x%x%x', 'x')
    if find(s, '\\', 1, true) then
      return BAD
    end
  end
  -- Strings without a control character, each made "": every quote must be in one.
  local quotes = #gsub(s, '[^"]+', '')
  local strings
  s, strings = gsub(s, '"[^"%z\1-\31]*"', '""')
  if quotes ~= 2 * strings then
    return BAD
  end
  scalars = OK
  s = gsub(s, '[^ \t\n\r,:%[%]{}"]+', scalar)
  if scalars == BAD then
    return BAD
  end
  local parsed, problem = pcall(cjson.decode, s)
  if not parsed then
    -- Past cjson's depth bound json.loads may read it (its bound is the process'),
    -- else it fails where cjson does.
    return find(problem, 'too many nested', 1, true) and CHECK or BAD
  end
  -- Nested deeper than MAX_DEPTH: json.loads may fail (RecursionError) where cjson reads
  -- it. Each pass takes the innermost bracket pairs away.
  local brackets = gsub(s, '[^%[%]{}]+', '')
  for _ = 1, MAX_DEPTH do
    if brackets == '' then
      break
    end
    brackets = gsub(brackets, '[%[{][%]}]', '')
  end
  return brackets == '' and scalars or CHECK
end

-- name in list (",a,b,")? A name holding a comma is none of them.
local function listed(list, name)
  return not find(name, ',', 1, true) and find(list, ',' .. name .. ',', 1, true) ~= nil
end

-- The reply for a field judged BAD or CHECK.
local function refusal(name, verdict)
  if verdict == CHECK then
    return {'check'}
  end
  return {'malformed', name}
end

-- parse_hash's verdict on the record: nil (valid, with its version digits second), or
-- the reply to send without writing.
local function judge(flat, rec)
  -- Every name and value at once: a line break ends any sequence a field leaves open.
  if not utf8_ok(table.concat(flat, '\n')) then
    return {'malformed', 'record'}
  end
  for _, name in ipairs({'created_at', 'payload', 'status', 'updated_at', 'version'}) do
    if not rec[name] then
      return {'malformed', name}  -- the first missing one, in sorted order
    end
  end
  if not listed(ARGV[9], rec.status) then
    return {'malformed', 'status'}
  end
  -- (result is the one of them a record may lack)
  for _, check in ipairs({{'created_at', created_verdict}, {'payload', json_verdict},
      {'result', json_verdict}, {'updated_at', float_verdict}}) do
    local value = rec[check[1]]
    local verdict = value and check[2](value) or OK
    if verdict ~= OK then
      return refusal(check[1], verdict)
    end
  end
  local verdict, digits = version_verdict(rec.version)
  if verdict ~= OK then
    return refusal('version', verdict)
  end
  return nil, digits
end

-- digits + 1, in decimal digits: Lua numbers are doubles, and would write a large one
-- as "1e+21".
local function plus_one(digits)
  local head, nines = match(digits, '^(.-)(9*)$')
  local tail = string.rep('0', #nines)
  if head == '' then
    return '1' .. tail
  end
  return sub(head, 1, -2) .. string.char(byte(head, -1) + 1) .. tail
end

local version, rec
if ARGV[1] ~= '' then
  local current = redis.call('HMGET', KEYS[1], 'version', 'created_at')
  if current[1] ~= ARGV[1] or current[2] ~= ARGV[2] then
    return {'moved'}
  end
  if not find(ARGV[3], '^[1-9]%d*$') then
    return {'invalid', 'version'}
  end
  version = ARGV[3]
else
  if ARGV[4] ~= '' and not listed(ARGV[9], ARGV[4]) then
    return {'invalid', 'status'}
  end
  if ARGV[11] ~= '' and not find(ARGV[11], '^[1-9]%d*$') then
    return {'invalid', 'expected_version'}
  end
  local flat = redis.call('HGETALL', KEYS[1])
  rec = {}
  for i = 1, #flat, 2 do
    rec[flat[i]] = flat[i + 1]
  end
  local refused, digits = judge(flat, rec)
  if refused then
    return refused
  end
  if ARGV[11] ~= '' and digits ~= ARGV[11] then
    return {'version', digits}
  end
  if ARGV[4] ~= '' and not listed(ARGV[10], rec.status) then
    return {'illegal', rec.status}
  end
  version = plus_one(digits)
end
if ARGV[8] ~= '' and not find(ARGV[8], '^[1-9]%d?%d?%d?%d?%d?%d?%d?%d?$') then
  return {'invalid', 'ttl_seconds'}
end

local updated = store_time()
local fields = {'version', version, 'updated_at', updated}
for a, name in ipairs({'status', 'payload', 'result'}) do
  if ARGV[3 + a] ~= '' then
    table.insert(fields, name); table.insert(fields, ARGV[3 + a])
  end
end
if ARGV[7] ~= '' then
  table.insert(fields, 'error'); table.insert(fields, string.sub(ARGV[7], 2))
end
redis.call('HSET', KEYS[1], unpack(fields))
if ARGV[8] ~= '' then
  redis.call('EXPIRE', KEYS[1], ARGV[8])
end
if not rec then
  return {'ok', updated}
end
-- A Lua table cannot hold nil in the middle of a reply; false is sent as nil.
local function unless(sent, value)
  if sent ~= '' or value == nil then
    return false
  end
  return value
end
return {'ok', updated, version, unless(ARGV[4], rec.status), unless(ARGV[5], rec.payload),
  unless(ARGV[6], rec.result), unless(ARGV[7], rec.error), rec.created_at,
  rec.owner_oid or false}
