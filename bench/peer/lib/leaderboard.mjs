// A page of the current season's board as src/features/leaderboard reads it on one Redis
// node (one part): ZCARD, the page by ZREVRANGE WITHSCORES and the viewer's rank and score,
// in one pipeline; names through the user directory.
import mercurius from 'mercurius'
const { ErrorWithProps } = mercurius
import { dateIn, monthId, startOfIn } from './clock.mjs'
import { globalId } from './ids.mjs'
import { placeholder } from './users.mjs'

const SCORE_TIME_UNIT = 4_194_304
const pointsOf = (score) => Math.floor(Number(score) / SCORE_TIME_UNIT)
const MONTHS = ['January', 'February', 'March', 'April', 'May', 'June', 'July', 'August',
  'September', 'October', 'November', 'December']

export class Leaderboard {
  constructor (redis, keys, users, serverZone = 'UTC') {
    Object.assign(this, { redis, keys, users, serverZone })
    if (keys.pointsBuckets !== 1) throw new Error('the peer reads a board of one part (one points bucket)')
  }

  season (now) {
    const today = dateIn(this.serverZone, now)
    const next = today.m === 12 ? { y: today.y + 1, m: 1, d: 1 } : { y: today.y, m: today.m + 1, d: 1 }
    return {
      month: monthId(today),
      info: {
        id: globalId('Season', monthId(today)),
        name: `${MONTHS[today.m - 1]} ${today.y}`,
        beginsAt: new Date(startOfIn(this.serverZone, { y: today.y, m: today.m, d: 1 })).toISOString(),
        endsAt: new Date(startOfIn(this.serverZone, next)).toISOString(),
        current: true
      }
    }
  }

  async page (viewer, first, offset) {
    if (!(first >= 1 && first <= 100)) {
      throw new ErrorWithProps(`first must be between 1 and 100, got ${first}`, { code: 'BAD_USER_INPUT' })
    }
    if (!(offset >= 0 && offset <= 1_000_000_000)) {
      throw new ErrorWithProps(`offset must be between 0 and 1000000000, got ${offset}`, { code: 'BAD_USER_INPUT' })
    }
    const { month, info } = this.season(Date.now())
    const [board] = this.keys.seasonBoardParts(month)
    const pipe = this.redis.pipeline().zcard(board).zrevrange(board, offset, offset + first - 1, 'WITHSCORES')
    if (viewer) pipe.zrevrank(board, viewer).zscore(board, viewer)
    const replies = await pipe.exec()
    for (const [error] of replies) if (error) throw error
    const total = replies[0][1]
    const flat = replies[1][1]
    const rows = []
    for (let i = 0; i < flat.length; i += 2) rows.push({ userId: flat[i], points: pointsOf(flat[i + 1]) })
    let me = null
    if (viewer && replies[2][1] != null && replies[3][1] != null) {
      me = { userId: viewer, rank: replies[2][1] + 1, points: pointsOf(replies[3][1]) }
    }
    const ids = rows.map((r) => r.userId)
    if (me) ids.unshift(me.userId)
    const users = await this.users.findMany(ids)
    const entry = (r, rank) => ({ rank, points: r.points, user: users.get(r.userId) ?? placeholder(r.userId) })
    return {
      season: info,
      me: me && entry(me, me.rank),
      entries: rows.map((r, i) => entry(r, offset + i + 1)),
      total
    }
  }
}
