// signIn as src/features/signin does it: the user's zone from Redis (a first sign-in asks
// lua/signin_sign.lua to record it, with the day it signs), then that script with engage's keys and
// arguments and its default rules (daily caps in the user's day): SIGN_IN 1 point, milestones 7,14,30,50,100,180,365 with
// the bonuses 7:10, 14:20, 28:40, at most 2 freezes; seasons and daily totals in
// ENGAGE_TIMEZONE (UTC unless set).
import mercurius from 'mercurius'
const { ErrorWithProps } = mercurius
import { evalsha, Status } from './scripts.mjs'
import {
  compareDates, dateIn, dateOfDayNumber, dayBefore, dayNumber, epochDay, isoDate, monthId,
  previousMonth, startOfIn, validZone
} from './clock.mjs'

const DAILY_TTL_SECONDS = 2 * 24 * 3600
const BITMAP_TTL_SECONDS = 400 * 24 * 3600
const BASE_POINTS = 1
const FREEZES_MAX = 2
const MILESTONES = [7, 14, 30, 50, 100, 180, 365]
const BONUSES = [[7, 10], [14, 20], [28, 40]]
const bonusAt = (days) => BONUSES.filter(([at]) => at <= days).reduce((best, b) => (!best || b[0] > best[0] ? b : best), null)?.[1] ?? 0
const MILESTONE_LIST = MILESTONES.map((days) => `${days}:${bonusAt(days)}`).join(',')
const EVERY = MILESTONES[MILESTONES.length - 1]
const EVERY_POINTS = bonusAt(EVERY)
const HOLD_WAIT_MS = 5000

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms))

export class SignIn {
  constructor (redis, keys, scripts, serverZone = 'UTC') {
    Object.assign(this, { redis, keys, scripts, serverZone })
  }

  // The user's zone: { zone, previous, from, recorded }.
  async zoneOf (user, claim) {
    const [zone, previous, from] = await this.redis.hmget(this.keys.signZone(user), 'zone', 'previous', 'from', 'changed_ms')
    if (zone && validZone(zone)) {
      return {
        zone,
        previous: previous && validZone(previous) ? previous : null,
        from: from && Number(from) > 0 ? dateOfDayNumber(Number(from)) : null,
        recorded: true
      }
    }
    return { zone: claim && validZone(claim) ? claim : this.serverZone, previous: null, from: null, recorded: false }
  }

  // The user's day: the old zone's date until the new zone's first day begins.
  todayAt ({ zone, previous, from }, now) {
    if (previous && from && now < startOfIn(zone, from)) {
      const old = dateIn(previous, now)
      const last = dayBefore(from)
      return compareDates(old, last) < 0 ? old : last
    }
    return dateIn(zone, now)
  }

  async signIn (user, claim) {
    let zone = await this.zoneOf(user, claim)
    const started = Date.now()
    for (;;) {
      const now = Date.now()
      const today = this.todayAt(zone, now)
      const month = monthId(today)
      const previous = previousMonth(today)
      const serverToday = dateIn(this.serverZone, now)
      const season = monthId(serverToday)
      const seasonSeconds = Math.max(0, Math.floor((now - startOfIn(this.serverZone, { y: serverToday.y, m: serverToday.m, d: 1 })) / 1000))
      const k = this.keys
      const reply = await evalsha(this.redis, this.scripts.sign, [
        k.signBitmap(user, month), k.signBitmap(user, monthId(previous)),
        k.signBitmap(user, monthId(previousMonth(previous))), k.signStreak(user),
        k.signFrozen(user, month), k.signFrozen(user, monthId(previous)),
        k.pointsToday(user, dayNumber(today)), k.seasonBoardOf(season, user),
        k.pointsStreamOf(user), k.pointsHoldOf(user), k.boardChangesOf(season, user),
        k.pointsBalancesOf(user), k.seasonRemovedOf(season, user), k.signZone(user)
      ], [
        user, month, today.d, epochDay(today), now, seasonSeconds, season,
        k.boardChannelOf(season, user), DAILY_TTL_SECONDS, BITMAP_TTL_SECONDS, BASE_POINTS,
        MILESTONE_LIST, EVERY, EVERY_POINTS, FREEZES_MAX, `signin:${user}:${isoDate(today)}`,
        dayNumber(today), k.publish, dayNumber(today),
        // The first zone, recorded by the script (engage's archive then writes it to SQL). A
        // zone from the token differing from the server's: engage checks the server day's
        // points first (a cap counted them), which the peer's users never have.
        ...(zone.recorded ? ['', '', 0, 0] : [zone.zone, '', 0, now])
      ])
      const [status, streak, awarded] = reply
      if (status === Status.HELD) {
        if (Date.now() - started > HOLD_WAIT_MS) {
          throw new ErrorWithProps('points are being rebuilt; try again shortly', { code: 'UNAVAILABLE' })
        }
        await sleep(20)
        continue
      }
      if (status === Status.MOVED) {
        zone = await this.zoneOf(user, claim)
        continue
      }
      return {
        date: isoDate(today),
        streak,
        pointsAwarded: status === Status.ALREADY ? 0 : awarded,
        alreadySigned: status === Status.ALREADY
      }
    }
  }
}
