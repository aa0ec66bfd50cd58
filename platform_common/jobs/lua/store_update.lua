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
local find, byte, sub, match = string.find, string.byte, string.sub, string.match

local kind = redis.call('TYPE', KEYS[1])['ok']
if kind == 'none' then
  return {'missing'}
end
if kind ~= 'hash' then
  return {'malformed', 'record'}
end

-- Python's strict UTF-8 decoder (redis-py decodes every name and value): no overlong
-- form, no surrogate (ED A0..BF), nothing past U+10FFFF, no stray or missing
-- continuation byte. ASCII runs are skipped by find, in C.
local function utf8_ok(s)
  local i = find(s, '[\128-\255]')
  while i do
    local c, c2 = byte(s, i, i + 1)
    local n, lo, hi = 0, 0x80, 0xBF
    if c >= 0xC2 and c <= 0xDF then
      n = 1
    elseif c >= 0xE0 and c <= 0xEF then
      n = 2
      if c == 0xE0 then lo = 0xA0 elseif c == 0xED then hi = 0x9F end
    elseif c >= 0xF0 and c <= 0xF4 then
      n = 3
      if c == 0xF0 then lo = 0x90 elseif c == 0xF4 then hi = 0x8F end
    else
      return false
    end
    if not c2 or c2 < lo or c2 > hi then
      return false
    end
    for j = i + 2, i + n do
      local cj = byte(s, j)
      if not cj or cj < 0x80 or cj > 0xBF then
        return false
      end
    end
    i = find(s, '[\128-\255]', i + n + 1)
  end
  return true
end

local OK, BAD, CHECK = 1, 2, 3
-- What int() and float() read beyond the ASCII forms below (see the header); ASCII text
-- without any of it is judged here. %s is C's isspace: the ASCII spaces they strip.
local PY_EXTRA = '[%s_\128-\255]'
-- The largest count of digits int() reads under any sys.set_int_max_str_digits().
local INT_DIGITS = 640
local MAX_DEPTH = 64
-- Longer JSON is left to Python too, so that an update never holds Redis for long: this
-- scan costs about 0.1 ms per KiB of dense JSON (objects of short fields), where the
-- client's json.loads is much faster, and a document this long is a transfer of its own.
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

-- Index of the first character at or past s[i] that is not json's whitespace. Compact
-- JSON (what the store writes) has none: one byte read, no pattern.
local function skip(s, i)
  local c = byte(s, i)
  if c == 32 or c == 9 or c == 10 or c == 13 then
    local _, e = find(s, '^[ \t\n\r]+', i)
    return e + 1
  end
  return i
end

-- Index past a JSON string opening at s[i], or nil. Like json.loads (strict): no control
-- character inside, escapes \" \\ \/ \b \f \n \r \t and \uXXXX only. A lone surrogate
-- escape is accepted, as json.loads does.
local function string_end(s, i)
  i = i + 1
  while true do
    local _, e = find(s, '^[^"\\%z\1-\31]*', i)
    i = e + 1
    local c = byte(s, i)
    if c == 34 then
      return i + 1
    end
    if c ~= 92 then
      return nil  -- a control character, or the end of the text
    end
    local d = byte(s, i + 1)
    if d == 117 then
      if not find(s, '^%x%x%x%x', i + 2) then
        return nil
      end
      i = i + 6
    elseif d == 34 or d == 92 or d == 47 or d == 98 or d == 102 or d == 110 or d == 114
        or d == 116 then
      i = i + 2
    else
      return nil
    end
  end
end

local WORDS = {[116] = 'true', [102] = 'false', [110] = 'null', [78] = 'NaN',
  [73] = 'Infinity'}  -- json.loads reads NaN and Infinity too

-- Index past a JSON scalar other than a string at s[i], or nil; true second for an
-- integer too long to judge here (see INT_DIGITS). Numbers as json.loads scans them:
-- -?(0|[1-9]digits)(.digits)?([eE][+-]?digits)?
local function scalar_end(s, i)
  local c = byte(s, i)
  local word = WORDS[c]
  if word then
    return sub(s, i, i + #word - 1) == word and i + #word or nil
  end
  if c == 45 and sub(s, i, i + 8) == '-Infinity' then
    return i + 9
  end
  local _, e = find(s, '^-?%d+', i)
  if not e then
    return nil
  end
  local first = c == 45 and i + 1 or i
  if byte(s, first) == 48 then
    e = first  -- "0" is all of it: a digit after it is the next token, and fails there
  end
  local f, x
  if byte(s, e + 1) == 46 then
    _, f = find(s, '^%.%d+', e + 1)
  end
  local m = byte(s, (f or e) + 1)
  if m == 101 or m == 69 then
    _, x = find(s, '^[eE][+-]?%d+', (f or e) + 1)
  end
  if not f and not x and e - i + 1 > INT_DIGITS then
    return nil, true
  end
  return (x or f or e) + 1
end

local VALUE, KEY, FIRST, AFTER = 1, 2, 3, 4

-- json.loads(s) a dict or None (parse_hash's payload and result)? Iterative: a stack of
-- closing brackets and what may come next (FIRST: a value, or the closer of the container
-- just opened: a key first in an object).
local function json_verdict(s)
  if #s > MAX_JUDGED_JSON then
    return CHECK
  end
  local i = skip(s, 1)
  if byte(s, i) ~= 123 then
    -- null, or any other value (or none): not an object.
    return (sub(s, i, i + 3) == 'null' and skip(s, i + 4) == #s + 1) and OK or BAD
  end
  local closers, depth, want = {}, 0, VALUE
  while true do
    local c = byte(s, i)
    if c == 32 or c == 9 or c == 10 or c == 13 then
      i = skip(s, i)
      c = byte(s, i)
    end
    if want == AFTER then
      if depth == 0 then
        return i == #s + 1 and OK or BAD  -- after the top object: whitespace only
      elseif c == 44 then  -- ,
        i, want = i + 1, closers[depth] == 125 and KEY or VALUE
      elseif c == closers[depth] then
        depth, i = depth - 1, i + 1
      else
        return BAD
      end
    elseif want == FIRST and c == closers[depth] then  -- {} or []
      depth, i, want = depth - 1, i + 1, AFTER
    elseif want == KEY or (want == FIRST and closers[depth] == 125) then
      i = c == 34 and string_end(s, i)
      if not i then
        return BAD
      end
      if byte(s, i) ~= 58 then  -- :
        i = skip(s, i)
        if byte(s, i) ~= 58 then
          return BAD
        end
      end
      i, want = i + 1, VALUE
    elseif c == 123 or c == 91 then  -- { [
      depth = depth + 1
      if depth > MAX_DEPTH then
        return CHECK
      end
      closers[depth], i, want = c + 2, i + 1, FIRST  -- } ]
    else
      local too_long
      if c == 34 then
        i = string_end(s, i)
      else
        i, too_long = scalar_end(s, i)
      end
      if too_long then
        return CHECK
      elseif not i then
        return BAD
      end
      want = AFTER
    end
  end
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
  -- One scan when the whole record is ASCII (as the store writes it), else field by field.
  if find(table.concat(flat), '[\128-\255]') then
    for i = 1, #flat do
      if not utf8_ok(flat[i]) then
        return {'malformed', 'record'}
      end
    end
  end
  for _, name in ipairs({'created_at', 'payload', 'status', 'updated_at', 'version'}) do
    if not rec[name] then
      return {'malformed', name}  -- the first missing one, in sorted order
    end
  end
  if not listed(ARGV[9], rec.status) then
    return {'malformed', 'status'}
  end
  local verdict = created_verdict(rec.created_at)
  if verdict ~= OK then
    return refusal('created_at', verdict)
  end
  verdict = json_verdict(rec.payload)
  if verdict ~= OK then
    return refusal('payload', verdict)
  end
  verdict = rec.result and json_verdict(rec.result) or OK
  if verdict ~= OK then
    return refusal('result', verdict)
  end
  verdict = float_verdict(rec.updated_at)
  if verdict ~= OK then
    return refusal('updated_at', verdict)
  end
  local digits
  verdict, digits = version_verdict(rec.version)
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
if ARGV[4] ~= '' then
  table.insert(fields, 'status'); table.insert(fields, ARGV[4])
end
if ARGV[5] ~= '' then
  table.insert(fields, 'payload'); table.insert(fields, ARGV[5])
end
if ARGV[6] ~= '' then
  table.insert(fields, 'result'); table.insert(fields, ARGV[6])
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
