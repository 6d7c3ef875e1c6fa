// The Node peer engage is benchmarked beside: Fastify + Mercurius + ioredis answering the
// bench's four operations on engage's Redis data with engage's Lua scripts (see README.md).
//
//   PEER_PORT=8702 PEER_REDIS_PREFIX=engage: PEER_DATABASE=/path/engage.db node server.mjs
//
// PEER_JIT=1 compiles each query with graphql-jit on its first run; PEER_WORKERS=N runs N
// processes sharing the port (node:cluster), one by default.
import cluster from 'node:cluster'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import Database from 'better-sqlite3'
import Fastify from 'fastify'
import Redis from 'ioredis'
import mercurius from 'mercurius'
import { tokenVerifier, Unauthenticated } from './lib/auth.mjs'
import { Keys } from './lib/keys.mjs'
import { Leaderboard } from './lib/leaderboard.mjs'
import { Remarks } from './lib/remarks.mjs'
import { resolvers, schema } from './lib/schema.mjs'
import { loadScript } from './lib/scripts.mjs'
import { SignIn } from './lib/signin.mjs'
import { Users } from './lib/users.mjs'

const env = process.env
const here = dirname(fileURLToPath(import.meta.url))
const config = {
  port: Number(env.PEER_PORT ?? 8702),
  host: env.PEER_HOST ?? '127.0.0.1',
  redisUrl: env.PEER_REDIS_URL ?? 'redis://127.0.0.1:6379',
  prefix: env.PEER_REDIS_PREFIX ?? 'engage:',
  database: env.PEER_DATABASE,
  secret: env.PEER_JWT_SECRET ?? env.ENGAGE_JWT_SECRET ?? 'engage-dev-secret-do-not-use-in-production',
  zone: env.ENGAGE_TIMEZONE ?? 'UTC',
  jit: env.PEER_JIT === '1',
  workers: Math.max(1, Number(env.PEER_WORKERS ?? 1)),
  luaDir: env.PEER_LUA_DIR ?? join(here, '..', '..', 'lua')
}

if (!config.database) {
  console.error('PEER_DATABASE: the path of engage\'s SQLite database is required')
  process.exit(2)
}

if (config.workers > 1 && cluster.isPrimary) {
  for (let i = 0; i < config.workers; i++) cluster.fork()
  cluster.on('exit', (worker, code) => {
    console.error(`worker ${worker.process.pid} exited (${code})`)
    process.exitCode = 1
  })
  const stop = () => { for (const worker of Object.values(cluster.workers)) worker.kill(); process.exit() }
  process.on('SIGTERM', stop)
  process.on('SIGINT', stop)
} else {
  await serve()
}

async function serve () {
  const redis = new Redis(config.redisUrl, { enableAutoPipelining: true, maxRetriesPerRequest: 2 })
  const db = new Database(config.database, { readonly: true, fileMustExist: true })
  db.defaultSafeIntegers(true)
  const keys = new Keys(config.prefix)
  const scripts = {
    like: loadScript(config.luaDir, 'remarks_like'),
    sign: loadScript(config.luaDir, 'signin_sign')
  }
  for (const script of Object.values(scripts)) {
    const sha = await redis.script('LOAD', script.text)
    if (sha !== script.sha) throw new Error(`lua/${script.name}.lua: Redis hashed it ${sha}`)
  }
  const users = new Users(redis, keys, db)
  const features = {
    users,
    remarks: new Remarks(redis, keys, db, users, scripts.like),
    signIn: new SignIn(redis, keys, scripts, config.zone),
    leaderboard: new Leaderboard(redis, keys, users, config.zone)
  }
  const viewerOf = tokenVerifier(config.secret)

  // GraphQL responses with errors, for the bench (per process).
  let errors = 0
  const app = Fastify({ logger: false, keepAliveTimeout: 75_000, bodyLimit: 1 << 20 })
  app.addHook('preHandler', async (request, reply) => {
    if (request.routeOptions.url !== '/graphql') return
    try {
      request.viewer = viewerOf(request.headers.authorization)
    } catch (error) {
      if (!(error instanceof Unauthenticated)) throw error
      reply.code(401).send({ errors: [{ message: error.message, extensions: { code: 'UNAUTHENTICATED' } }] })
      return reply
    }
  })
  app.register(mercurius, {
    schema,
    resolvers: resolvers(features),
    context: (request) => ({ viewer: request.viewer ?? null }),
    jit: config.jit ? 1 : 0,
    path: '/graphql',
    graphiql: false,
    // Errors of an operation that ran are answered 200 with their codes, as engage does.
    errorFormatter: (execution, context) => {
      errors++
      const formatted = mercurius.defaultErrorFormatter(execution, context)
      return { statusCode: execution.data !== undefined ? 200 : formatted.statusCode, response: formatted.response }
    }
  })
  app.get('/readyz', async () => 'ready')
  app.get('/errors', async () => String(errors))
  await app.listen({ port: config.port, host: config.host })
  const stop = async () => {
    await app.close()
    redis.disconnect()
    process.exit(0)
  }
  process.on('SIGTERM', stop)
  process.on('SIGINT', stop)
}
