// Sends each of the bench's four operations to engage and to the peer and compares the
// answers: their shape always, their values where they are deterministic; checks that both
// make the same script calls (Redis's MONITOR: scripts, KEYS and ARGV alike but for the user
// and the time), act on the same Redis state (a like or a sign-in made through one is seen
// through the other) and refuse the same bad tokens.
//
//   node check.mjs --engage http://127.0.0.1:8701 --peer http://127.0.0.1:8702 --fixtures DIR
//
// DIR is engage's fixture directory of bench_seed (item.txt, remarks.txt). Users are minted
// here, with ids of their own, so that the bench's fixtures stay unused.
import { readFileSync } from 'node:fs'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { parseArgs } from 'node:util'
import { createSigner } from 'fast-jwt'
import Redis from 'ioredis'
import { loadScript } from './lib/scripts.mjs'

const { values: opts } = parseArgs({
  options: {
    engage: { type: 'string', default: 'http://127.0.0.1:8701' },
    peer: { type: 'string', default: 'http://127.0.0.1:8702' },
    fixtures: { type: 'string' },
    secret: { type: 'string', default: process.env.ENGAGE_JWT_SECRET ?? 'engage-dev-secret-do-not-use-in-production' },
    redis: { type: 'string', default: 'redis://127.0.0.1:6379' }
  }
})
if (!opts.fixtures) { console.error('--fixtures DIR is required'); process.exit(2) }
const lines = (name) => readFileSync(join(opts.fixtures, name), 'utf8').split('\n').filter(Boolean)
const item = lines('item.txt')[0]
const remark = lines('remarks.txt')[0]

const sign = createSigner({ key: opts.secret, algorithm: 'HS256', expiresIn: 3600_000 })
const base = 7_000_000_000 + (Date.now() % 1_000_000) * 1000
const token = (n) => sign({ sub: String(base + n), role: 'user' })

async function post (server, bearer, query, variables = {}) {
  const headers = { 'Content-Type': 'application/json' }
  if (bearer) headers.Authorization = `Bearer ${bearer}`
  const response = await fetch(`${server}/graphql`, { method: 'POST', headers, body: JSON.stringify({ query, variables }) })
  return { status: response.status, body: await response.json() }
}
const both = (bearer, query, variables) =>
  Promise.all([post(opts.engage, bearer, query, variables), post(opts.peer, bearer, query, variables)])

// The types of a value, its leaves replaced by their type names.
function shape (value) {
  if (Array.isArray(value)) return value.map(shape)
  if (value && typeof value === 'object') return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, shape(v)]))
  return value === null ? 'null' : typeof value
}
const same = (a, b) => JSON.stringify(a) === JSON.stringify(b)
const code = (answer) => answer.body.errors?.[0]?.extensions?.code ?? null

// The script calls a request makes, as Redis's MONITOR shows them: EVALSHA of the scripts
// the peer runs, whose arguments name the user. Each call's user id is written `<user>`.
const luaDir = join(dirname(fileURLToPath(import.meta.url)), '..', '..', 'lua')
const shas = new Map(['remarks_like', 'signin_sign', 'signin_set_zone']
  .map((name) => [loadScript(luaDir, name).sha, name]))
const monitor = await new Redis(opts.redis).monitor()
let seen = []
monitor.on('monitor', (_, args) => {
  if (String(args[0]).toLowerCase() === 'evalsha' && shas.has(args[1])) seen.push(args.slice(1).map(String))
})
async function calls (user, request) {
  seen = []
  const answer = await request()
  await new Promise((resolve) => setTimeout(resolve, 300))
  const id = String(base + user)
  const made = seen.filter((call) => call.some((arg) => arg.includes(id)))
    .map((call) => [shas.get(call[0]), ...call.slice(1).map((arg) => arg.replaceAll(id, '<user>'))])
  return { answer, made }
}
// Two servers' calls alike: the same scripts, keys and arguments, but for times (numbers
// within 10 s of each other: now in ms, seconds into the season).
function sameCalls (a, b) {
  return a.length > 0 && a.length === b.length && a.every((call, i) => call.length === b[i].length &&
    call.every((arg, j) => arg === b[i][j] ||
      (/^[0-9]+$/.test(arg) && /^[0-9]+$/.test(b[i][j]) && Math.abs(Number(arg) - Number(b[i][j])) <= 10_000)))
}

let failed = 0
function expect (what, ok, detail) {
  console.log(`${ok ? 'ok  ' : 'FAIL'} ${what}`)
  if (!ok) {
    failed++
    console.log(`     ${JSON.stringify(detail).slice(0, 1500)}`)
  }
}
function compare (what, engage, peer, { values }) {
  expect(`${what}: same status (${engage.status})`, engage.status === peer.status, { engage: engage.status, peer: peer.status })
  expect(`${what}: same shape`, same(shape(engage.body), shape(peer.body)), { engage: engage.body, peer: peer.body })
  if (values) expect(`${what}: same values`, same(engage.body, peer.body), { engage: engage.body, peer: peer.body })
}

const LIKE = 'mutation($id: ID!) { likeRemark(remarkId: $id) { likeCount changed } }'
const PAGE = 'query($item: ID!) { remarks(itemId: $item, first: 20) { edges { node { ' +
  'id score content createdAt likeCount likedByMe author { id name } } } ' +
  'pageInfo { hasNextPage endCursor } } }'
const SIGN_IN = 'mutation { signIn { streak pointsAwarded alreadySigned } }'
const BOARD = 'query($o: Int!) { leaderboard(first: 20, offset: $o) { total ' +
  'me { rank points } entries { rank points user { id name } } } }'

// likeRemark: a new like through each server, then each like again through the other.
{
  const [a, b] = [token(1), token(2)]
  const { answer: engage, made: engageCalls } = await calls(1, () => post(opts.engage, a, LIKE, { id: remark }))
  const { answer: peer, made: peerCalls } = await calls(2, () => post(opts.peer, b, LIKE, { id: remark }))
  compare('likeRemark, a new like', engage, peer, { values: false })
  expect(`likeRemark: the same script calls (${engageCalls.map((c) => c[0])})`, sameCalls(engageCalls, peerCalls),
    { engage: engageCalls, peer: peerCalls })
  const counts = [engage.body.data?.likeRemark, peer.body.data?.likeRemark]
  expect('likeRemark: both changed, the peer counts one more', counts[0]?.changed && counts[1]?.changed &&
    counts[1].likeCount === counts[0].likeCount + 1, counts)
  const [again, peerAgain] = await Promise.all([post(opts.engage, b, LIKE, { id: remark }), post(opts.peer, a, LIKE, { id: remark })])
  compare('likeRemark, a like made through the other server', again, peerAgain, { values: true })
  expect('likeRemark: neither changes a like the other made', again.body.data?.likeRemark?.changed === false &&
    again.body.data.likeRemark.likeCount === counts[1].likeCount, again.body)
  const [none, peerNone] = await both(a, LIKE, { id: Buffer.from('Remark:12345').toString('base64') })
  compare('likeRemark of no remark', none, peerNone, { values: false })
  expect(`likeRemark of no remark: both ${code(none)}`, code(none) === code(peerNone), { engage: none.body, peer: peerNone.body })
  const [anonymous, peerAnonymous] = await both(null, LIKE, { id: remark })
  expect(`likeRemark without a token: both ${code(anonymous)}`, code(anonymous) === code(peerAnonymous) &&
    anonymous.status === peerAnonymous.status, { engage: anonymous, peer: peerAnonymous })
}

// The remarks page, for a viewer who likes the first remark (the page's like info).
{
  const [engage, peer] = await both(token(1), PAGE, { item })
  compare('remarks page', engage, peer, { values: true })
  const edges = engage.body.data?.remarks?.edges ?? []
  expect('remarks page: 20 remarks, the liked one likedByMe', edges.length === 20 &&
    edges.some((e) => e.node.likedByMe), edges.length)
  const [anonymous, peerAnonymous] = await both(null, PAGE, { item })
  compare('remarks page, anonymous', anonymous, peerAnonymous, { values: true })
}

// signIn: a first sign-in through each server, then again through the other.
{
  const [a, b] = [token(3), token(4)]
  const { answer: engage, made: engageCalls } = await calls(3, () => post(opts.engage, a, SIGN_IN))
  const { answer: peer, made: peerCalls } = await calls(4, () => post(opts.peer, b, SIGN_IN))
  compare('signIn, a first sign-in', engage, peer, { values: true })
  expect(`signIn: the same script calls (${engageCalls.map((c) => c[0])})`, sameCalls(engageCalls, peerCalls),
    { engage: engageCalls, peer: peerCalls })
  const [again, peerAgain] = await Promise.all([post(opts.engage, b, SIGN_IN), post(opts.peer, a, SIGN_IN)])
  compare('signIn, signed in today through the other server', again, peerAgain, { values: true })
  expect('signIn: alreadySigned through the other server', again.body.data?.signIn?.alreadySigned === true, again.body)
}

// The leaderboard page, with a viewer on the board (signed in above) and one off it.
{
  for (const [who, bearer] of [['a viewer on the board', token(3)], ['a viewer off it', token(5)]]) {
    const [engage, peer] = await both(bearer, BOARD, { o: 0 })
    compare(`leaderboard, ${who}`, engage, peer, { values: true })
  }
  const [engage, peer] = await both(token(5), BOARD, { o: 7 })
  compare('leaderboard at offset 7', engage, peer, { values: true })
  expect('leaderboard: 20 entries ranked from offset + 1', engage.body.data?.leaderboard?.entries?.length === 20 &&
    engage.body.data.leaderboard.entries[0].rank === 8, engage.body.data?.leaderboard?.entries?.[0])
}

// Bad tokens: refused by both alike.
{
  const other = createSigner({ key: 'another secret', algorithm: 'HS256', expiresIn: 3600_000 })
  const expired = createSigner({ key: opts.secret, algorithm: 'HS256' })({ sub: String(base + 6), exp: Math.floor(Date.now() / 1000) - 60 })
  const cases = [
    ['malformed', 'not-a-token'],
    ['signed with another secret', other({ sub: String(base + 6) })],
    ['expired', expired],
    ['without exp', createSigner({ key: opts.secret, algorithm: 'HS256' })({ sub: String(base + 6) })]
  ]
  for (const [what, bad] of cases) {
    const [engage, peer] = await both(bad, SIGN_IN)
    expect(`a token ${what}: both ${engage.status} ${code(engage)}`, engage.status === peer.status &&
      code(engage) === code(peer) && code(engage) === 'UNAUTHENTICATED', { engage, peer })
  }
}

monitor.disconnect()
console.log(failed ? `${failed} checks failed` : 'all checks passed')
process.exit(failed ? 1 : 0)
