// engage's Redis keys (src/infra/redis/keys.rs and the features' `impl Keys` blocks):
// `<prefix>{<hash tag>}:<rest>`, with engage's defaults on one Redis node: 4 like shards,
// one points bucket, 1,024 name buckets, PUBLISH.
const LIKE_SHARDS = 4n
const NAME_BUCKETS = 1024n

export class Keys {
  constructor (prefix, { likeShards = LIKE_SHARDS, pointsBuckets = 1 } = {}) {
    this.prefix = prefix
    this.likeShards = BigInt(likeShards)
    this.pointsBuckets = pointsBuckets
    this.publish = 'PUBLISH'
  }

  tagged (tag, rest) { return `${this.prefix}{${tag}}:${rest}` }

  // Remark ids pass 2^53: they stay strings, with BigInt for their arithmetic.
  likesShard (remarkId) { return ((BigInt(remarkId) % this.likeShards) + this.likeShards) % this.likeShards }
  inLikesShard (remarkId, rest) { return this.tagged(`likes:${this.likesShard(remarkId)}`, rest) }
  remarkInfo (remarkId) { return this.inLikesShard(remarkId, `remark:${remarkId}`) }
  likeRelation (remarkId, voterId) { return this.inLikesShard(remarkId, `remark:${remarkId}:voter:${voterId}`) }
  remarkLikers (remarkId) { return this.inLikesShard(remarkId, `remark:${remarkId}:likers`) }
  voteStreamOf (remarkId) { return this.tagged(`likes:${this.likesShard(remarkId)}`, 'events') }
  likeCountChannel (remarkId) { return this.inLikesShard(remarkId, `live:likes:${remarkId}`) }

  ofPointsUser (userId, rest) {
    if (this.pointsBuckets === 1) return this.tagged('points', rest)
    const bucket = ((BigInt(userId) % BigInt(this.pointsBuckets)) + BigInt(this.pointsBuckets)) % BigInt(this.pointsBuckets)
    return this.tagged(`points:${bucket}`, rest)
  }

  signBitmap (user, month) { return this.ofPointsUser(user, `sign:${user}:${month}`) }
  signFrozen (user, month) { return this.ofPointsUser(user, `frozen:${user}:${month}`) }
  signStreak (user) { return this.ofPointsUser(user, `streak:${user}`) }
  signZone (user) { return this.ofPointsUser(user, `zone:${user}`) }
  pointsToday (user, yyyymmdd) { return this.ofPointsUser(user, `daily:${user}:${yyyymmdd}`) }
  seasonBoardOf (season, user) { return this.ofPointsUser(user, `board:${season}`) }
  boardChangesOf (season, user) { return this.ofPointsUser(user, `board:${season}:changes`) }
  seasonRemovedOf (season, user) { return this.ofPointsUser(user, `board:${season}:removed`) }
  pointsStreamOf (user) { return this.ofPointsUser(user, 'events') }
  pointsHoldOf (user) { return this.ofPointsUser(user, 'rebuilding') }
  pointsBalancesOf (user) { return this.ofPointsUser(user, 'balances') }
  boardChannelOf (season, user) { return this.ofPointsUser(user, `live:board:${season}`) }

  // The season board's parts, one per points bucket.
  seasonBoardParts (season) {
    if (this.pointsBuckets === 1) return [this.tagged('points', `board:${season}`)]
    return Array.from({ length: this.pointsBuckets }, (_, b) => this.tagged(`points:${b}`, `board:${season}`))
  }

  userNames (userId) {
    const bucket = ((BigInt(userId) % NAME_BUCKETS) + NAME_BUCKETS) % NAME_BUCKETS
    return this.tagged(`users:${bucket}`, 'names')
  }
}
