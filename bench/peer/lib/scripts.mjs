// engage's Lua scripts, as engage sends them: build.rs replaces each line
// `-- @include name.lua` with lua/include/name.lua (expanded in turn, each file once per
// script, a repeat leaving an empty line) and joins the lines with "\n". The same text has
// the same SHA-1, so the peer's EVALSHA runs the very script engage loaded.
import { createHash } from 'node:crypto'
import { readFileSync } from 'node:fs'
import { join } from 'node:path'

// Rust's `str::lines`: no empty last line after a final newline, "\r\n" as "\n".
function lines (text) {
  if (text === '') return []
  const parts = text.split('\n')
  if (text.endsWith('\n')) parts.pop()
  return parts.map((line) => (line.endsWith('\r') ? line.slice(0, -1) : line))
}

function expand (luaDir, source, included) {
  return lines(source).map((line) => {
    const trimmed = line.trim()
    if (!trimmed.startsWith('-- @include ')) return line
    const name = trimmed.slice('-- @include '.length).trim()
    if (included.includes(name)) return ''
    included.push(name)
    return expand(luaDir, readFileSync(join(luaDir, 'include', name), 'utf8'), included)
  }).join('\n')
}

// How many KEYS and ARGV the script's header names (`KEYS[n] name: ...`): the peer's calls
// are checked against them, so that a script that gained a key or an argument fails the
// peer's first call instead of running with the old ones.
function arity (text, table) {
  let most = 0
  for (const match of text.matchAll(new RegExp(`^\\s*${table}\\[(\\d+)\\]`, 'gm'))) {
    most = Math.max(most, Number(match[1]))
  }
  return most
}

export function loadScript (luaDir, stem) {
  const text = expand(luaDir, readFileSync(join(luaDir, `${stem}.lua`), 'utf8'), [])
  return {
    name: stem,
    text,
    sha: createHash('sha1').update(text).digest('hex'),
    keys: arity(text, 'KEYS'),
    args: arity(text, 'ARGV')
  }
}

// Runs a script by EVALSHA, loading it again if Redis forgot it (a restart, SCRIPT FLUSH).
export async function evalsha (redis, script, keys, args) {
  if (keys.length !== script.keys || args.length !== script.args) {
    throw new Error(`lua/${script.name}.lua takes ${script.keys} keys and ${script.args} arguments, ` +
      `not ${keys.length} and ${args.length}`)
  }
  try {
    return await redis.evalsha(script.sha, keys.length, ...keys, ...args)
  } catch (error) {
    if (!String(error.message).startsWith('NOSCRIPT')) throw error
    await redis.script('LOAD', script.text)
    return redis.evalsha(script.sha, keys.length, ...keys, ...args)
  }
}

// lua/include/status.lua's vocabulary.
export const Status = {
  OK: 0, ALREADY: 1, MISSING: -1, ASK_ARCHIVE: -2, NOT_YET: -3, ENDED: -4, TAKEN: -5,
  SOLD_OUT: -6, NOT_FOUND: -7, OVER_LIMIT: -8, HELD: -9, MOVED: -10
}
