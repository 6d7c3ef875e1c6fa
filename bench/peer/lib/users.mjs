// Users' names as engage's UserDirectory finds them (src/features/users): its memory first
// (300 s, 100,000 kept), then the name cards Redis holds (`{users:<id mod 1024>}:names`,
// JSON `[name, avatarUrl, bio]`), then SQL; a user found nowhere shows as `user<id>`.
import { globalId } from './ids.mjs'

const RECORD_TTL_MS = 300_000
const RECORDS_KEPT = 100_000

export function userObject (id, name, avatarUrl = null, bio = null) {
  return { id: globalId('User', id), name, avatarUrl, bio }
}

export const placeholder = (id) => userObject(id, `user${id}`)

export class Users {
  constructor (redis, keys, db) {
    this.redis = redis
    this.keys = keys
    this.records = new Map() // id -> { user, at }
    const prepared = new Map() // a statement per list length
    this.select = (ids) => {
      let statement = prepared.get(ids.length)
      if (!statement) {
        statement = db.prepare(`SELECT id, name, avatar_url, bio FROM users WHERE id IN (${ids.map(() => '?').join(', ')})`)
        prepared.set(ids.length, statement)
      }
      return statement.all(...ids.map(BigInt))
    }
  }

  remember (id, user, now) {
    if (this.records.size >= RECORDS_KEPT) this.records.delete(this.records.keys().next().value)
    this.records.set(id, { user, at: now })
  }

  // A map of id -> user object for the ids found.
  async findMany (ids) {
    const now = Date.now()
    const found = new Map()
    const unknown = []
    for (const id of ids) {
      const hit = this.records.get(id)
      if (hit && now - hit.at < RECORD_TTL_MS) found.set(id, hit.user)
      else if (!found.has(id)) unknown.push(id)
    }
    if (unknown.length === 0) return found
    const pipe = this.redis.pipeline()
    for (const id of unknown) pipe.hget(this.keys.userNames(id), id)
    const cards = await pipe.exec()
    const missing = []
    unknown.forEach((id, i) => {
      const [error, card] = cards[i]
      let parsed = null
      if (!error && card) {
        try { parsed = JSON.parse(card) } catch {}
      }
      if (Array.isArray(parsed) && typeof parsed[0] === 'string') {
        const user = userObject(id, parsed[0], parsed[1] ?? null, parsed[2] ?? null)
        this.remember(id, user, now)
        found.set(id, user)
      } else {
        missing.push(id)
      }
    })
    if (missing.length > 0) {
      for (const row of this.select(missing)) {
        const id = row.id.toString()
        const user = userObject(id, row.name, row.avatar_url, row.bio)
        this.remember(id, user, now)
        found.set(id, user)
      }
    }
    return found
  }
}
