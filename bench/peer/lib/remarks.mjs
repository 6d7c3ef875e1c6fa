// An item's remarks with their likes, and likeRemark, as src/features/remarks does them:
// the page from SQL (remarks joined with their authors, cached 1 s per instance as
// ENGAGE_REMARK_PAGE_CACHE_MS does), the like info of a page in one Redis pipeline, and a
// like by lua/remarks_like.lua with engage's keys and arguments.
import mercurius from 'mercurius'
const { ErrorWithProps } = mercurius
import { evalsha, Status } from './scripts.mjs'
import { globalId, timestampMsOf } from './ids.mjs'
import { userObject } from './users.mjs'

const PAGE_TTL_MS = 1000
const PAGES_KEPT = 10_000
const RELATION_TTL_SECONDS = 10 * 24 * 3600 // ENGAGE_LIKE_RELATION_TTL_DAYS = 10
const LIKERS_KEPT = 20
const CURRENT_LIKE = 'v.voting = 1 AND v.event_order = ' +
  '(SELECT MAX(w.event_order) FROM vote_log w WHERE w.remark_id = v.remark_id AND w.voter_id = v.voter_id)'

const young = (remarkId, now) =>
  now - timestampMsOf(remarkId) < (RELATION_TTL_SECONDS - 3600) * 1000

export class Remarks {
  constructor (redis, keys, db, users, like) {
    Object.assign(this, { redis, keys, users, like })
    this.pages = new Map() // `${item}:${first}:${after}` -> { at, page }
    const list = (n) => Array(n).fill('?').join(', ')
    // A statement per list length, prepared once.
    const prepared = new Map()
    const cached = (sql) => prepared.get(sql) ?? prepared.set(sql, db.prepare(sql)).get(sql)
    this.sql = {
      page: db.prepare(
        'SELECT r.id, r.item_id, r.author_id, r.score, r.content, r.images, r.created_at_ms, ' +
        'r.edited_at_ms, u.name AS author_name, u.avatar_url AS author_avatar_url, u.bio AS author_bio ' +
        'FROM remarks r LEFT JOIN users u ON u.id = r.author_id ' +
        'WHERE r.item_id = ? AND r.deleted_at_ms IS NULL AND r.hidden_at_ms IS NULL AND r.id < ? ' +
        'ORDER BY r.id DESC LIMIT ?'),
      remark: db.prepare('SELECT author_id, deleted_at_ms, hidden_at_ms FROM remarks WHERE id = ?'),
      likes: db.prepare(`SELECT COUNT(*) AS likes FROM vote_log v WHERE v.remark_id = ? AND ${CURRENT_LIKE}`),
      latest: db.prepare('SELECT voting FROM vote_log WHERE remark_id = ? AND voter_id = ? ' +
        'ORDER BY event_order DESC LIMIT 1'),
      counts: (ids) => cached(`SELECT id, like_count FROM remarks WHERE id IN (${list(ids.length)})`)
        .all(...ids.map(BigInt)),
      archived: (voter, ids) => cached(
        `SELECT v.remark_id FROM vote_log v WHERE v.voter_id = ? AND v.remark_id IN (${list(ids.length)}) ` +
        `AND ${CURRENT_LIKE}`).all(BigInt(voter), ...ids.map(BigInt))
    }
  }

  // A page of an item's remarks, newest first: `first` after the cursor `after` (`c<id>`).
  async page (itemId, first, after) {
    const key = `${itemId}:${first}:${after ?? ''}`
    const now = Date.now()
    const cached = this.pages.get(key)
    if (cached && now - cached.at < PAGE_TTL_MS) return cached.page
    const before = after ?? ((1n << 63n) - 1n).toString()
    const rows = this.sql.page.all(BigInt(itemId), BigInt(before), first + 1)
    const more = rows.length > first
    const remarks = rows.slice(0, first).map((row) => {
      const id = row.id.toString()
      const authorId = row.author_id.toString()
      return {
        id,
        node: {
          id: globalId('Remark', id),
          itemId: globalId('Item', row.item_id.toString()),
          score: Number(row.score),
          content: row.content,
          images: JSON.parse(row.images || '[]'),
          createdAt: new Date(Number(row.created_at_ms)).toISOString(),
          editedAt: row.edited_at_ms == null ? null : new Date(Number(row.edited_at_ms)).toISOString()
        },
        authorId,
        author: row.author_name == null ? null : userObject(authorId, row.author_name, row.author_avatar_url, row.author_bio)
      }
    })
    const page = { remarks, more }
    if (this.pages.size >= PAGES_KEPT) this.pages.clear()
    this.pages.set(key, { at: now, page })
    return page
  }

  // { count, likedByMe } of each remark for a viewer (or none): one Redis pipeline; what
  // Redis lacks is read from SQL, as engage reads it.
  async likeInfos (viewer, ids) {
    const pipe = this.redis.pipeline()
    for (const id of ids) {
      pipe.hmget(this.keys.remarkInfo(id), 'likes', 'hydrated')
      if (viewer) pipe.get(this.keys.likeRelation(id, viewer))
    }
    const replies = await pipe.exec()
    const now = Date.now()
    const infos = new Map()
    const missingCounts = []
    const askArchive = []
    let at = 0
    for (const id of ids) {
      const [error, fields] = replies[at++]
      if (error) throw error
      const [likes, hydrated] = fields
      let relation = null
      if (viewer) {
        const [relError, value] = replies[at++]
        if (relError) throw relError
        relation = value
      }
      if (likes == null) missingCounts.push(id)
      let liked = false
      if (relation != null) liked = relation === '1'
      else if (viewer && (likes == null || hydrated != null || !young(id, now))) askArchive.push(id)
      infos.set(id, { likeCount: likes == null ? 0 : Number(likes), likedByMe: liked })
    }
    if (missingCounts.length > 0) {
      for (const row of this.sql.counts(missingCounts)) infos.get(row.id.toString()).likeCount = Number(row.like_count)
    }
    if (viewer && askArchive.length > 0) {
      for (const row of this.sql.archived(viewer, askArchive)) infos.get(row.remark_id.toString()).likedByMe = true
    }
    return infos
  }

  async likeRemark (voter, remarkId) {
    const keys = this.keys
    let known = young(remarkId, Date.now()) ? 'young' : 'unknown'
    for (let attempt = 0; attempt < 4; attempt++) {
      const [status, likes, liked, changed] = await evalsha(this.redis, this.like,
        [keys.remarkInfo(remarkId), keys.likeRelation(remarkId, voter), keys.remarkLikers(remarkId),
          keys.voteStreamOf(remarkId)],
        [voter, remarkId, Date.now(), RELATION_TTL_SECONDS, known, keys.likeCountChannel(remarkId),
          LIKERS_KEPT, keys.publish])
      if (status === Status.OK) {
        return { remarkId: globalId('Remark', remarkId), likeCount: likes, liked: liked === 1, changed: changed === 1 }
      }
      if (status === Status.NOT_FOUND) break
      if (status === Status.MISSING) {
        if (!(await this.rebuildCounter(remarkId))) break
      } else if (status === Status.ASK_ARCHIVE) {
        const row = this.sql.latest.get(BigInt(remarkId), BigInt(voter))
        known = row == null ? 'none' : Number(row.voting) === 1 ? 'liked' : 'unliked'
      } else {
        throw new Error(`lua/remarks_like.lua answered ${status}`)
      }
    }
    throw new ErrorWithProps(`no remark ${remarkId}`, { code: 'NOT_FOUND' })
  }

  // The counter of a remark Redis lacks, from the archive (false: no such remark shown).
  // engage also withdraws a deleted or hidden remark again here; the peer only refuses it.
  async rebuildCounter (remarkId) {
    const remark = this.sql.remark.get(BigInt(remarkId))
    if (!remark || remark.deleted_at_ms != null || remark.hidden_at_ms != null) return false
    const { likes } = this.sql.likes.get(BigInt(remarkId))
    const key = this.keys.remarkInfo(remarkId)
    await this.redis.pipeline().hsetnx(key, 'likes', likes.toString())
      .hset(key, 'author', remark.author_id.toString(), 'hydrated', 1).exec()
    return true
  }
}
