// The real `engage serve` binary for a browser test: dev mode (no ENGAGE_JWT_SECRET, so
// `/dev/token` mints tokens), a SQLite file and a Redis prefix of its own, restartable with
// other settings on the same port and data. The pattern of e2e/dashboard.test.mjs.

import { spawn, execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, openSync, readFileSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { randomUUID } from 'node:crypto';

const repo = resolve(import.meta.dirname, '../../..');
const binary = process.env.ENGAGE_BIN
  || join(process.env.CARGO_TARGET_DIR || join(repo, 'target'), 'debug/engage');
const redisUrl = process.env.REDIS_URL || 'redis://127.0.0.1:6379';

export function freePort() {
  return new Promise((done, fail) => {
    const probe = createServer().once('error', fail);
    probe.listen(0, '127.0.0.1', () => {
      const { port } = probe.address();
      probe.close(() => done(port));
    });
  });
}

function clockAhead(now) {
  if (now.getUTCDate() > 2) return {};
  return { ENGAGE_TEST_CLOCK_AT: new Date(now.getTime() + 2 * 86_400_000).toISOString() };
}

export class Engage {
  static async create() {
    const engage = new Engage();
    engage.port = await freePort();
    engage.base = `http://127.0.0.1:${engage.port}`;
    return engage;
  }

  workDir = mkdtempSync(join(tmpdir(), 'engage-kit-'));
  prefix = `engage-kit:${randomUUID()}:`;
  process = null;

  /**
   * Starts the server with these extra settings and waits until it is ready. On a month's
   * first two days (UTC) its clock runs two days ahead (`ENGAGE_TEST_CLOCK_AT`, read by a
   * build with the `test-clock` feature): a make-up reaches only this month's days, and the
   * streak-freeze test makes up the day before yesterday. Ahead, never behind, so that the
   * tokens it mints are not expired already by the system clock.
   */
  async start(settings = {}) {
    const env = { ...process.env };
    delete env.ENGAGE_JWT_SECRET;
    Object.assign(env, {
      ENGAGE_BIND: `127.0.0.1:${this.port}`,
      DATABASE_URL: `sqlite://${join(this.workDir, 'engage.db')}`,
      REDIS_URL: redisUrl,
      ENGAGE_REDIS_PREFIX: this.prefix,
      ENGAGE_SHUTDOWN_GRACE_SECONDS: '1',
      // No load balancer to drain from: stop at once.
      ENGAGE_DRAIN_SECONDS: '0',
      RUST_LOG: env.RUST_LOG || 'warn',
      ...clockAhead(new Date()),
      ...settings,
    });
    if (!existsSync(binary)) {
      throw new Error(`no engage binary at ${binary}: run \`cargo build --features test-clock\` (with the same CARGO_TARGET_DIR) or set ENGAGE_BIN`);
    }
    const log = openSync(join(this.workDir, 'server.log'), 'a');
    const server = spawn(binary, ['serve'], { env, stdio: ['ignore', log, log] });
    this.process = server;
    const exited = new Promise((_, fail) =>
      server.once('exit', (code) => fail(new Error(`engage exited with ${code}:\n${this.log()}`))));
    const deadline = Date.now() + 30_000;
    while (Date.now() < deadline) {
      if (await Promise.race([fetch(`${this.base}/readyz`).then((r) => r.ok, () => false), exited])) return;
      await new Promise((r) => setTimeout(r, 100));
    }
    throw new Error(`engage not ready within 30 s:\n${this.log()}`);
  }

  async stop() {
    const server = this.process;
    if (!server || server.exitCode !== null) return;
    const exited = new Promise((r) => server.once('exit', r));
    server.kill('SIGTERM');
    await exited;
  }

  log() {
    try {
      return readFileSync(join(this.workDir, 'server.log'), 'utf8').slice(-4000);
    } catch {
      return '';
    }
  }

  async devToken(userId, role = 'user', name = undefined) {
    const response = await fetch(`${this.base}/dev/token`, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ userId, role, name }),
    });
    if (!response.ok) throw new Error(`/dev/token answered ${response.status}`);
    return (await response.json()).token;
  }

  /** One GraphQL request; `body` is `{ query }` or `{ extensions: { persistedQuery } }`. */
  async post(token, body) {
    const response = await fetch(`${this.base}/graphql`, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json', ...(token ? { Authorization: `Bearer ${token}` } : {}) },
      body: JSON.stringify(body),
    });
    const answer = await response.json();
    if (answer.errors) throw new Error(`${JSON.stringify(body)}: ${JSON.stringify(answer.errors)}`);
    return answer.data;
  }

  /** Stops the server and removes its data: its database and its own Redis keys only. */
  async dispose() {
    await this.stop();
    try {
      const keys = execFileSync('redis-cli', ['-u', redisUrl, '--scan', '--pattern', `${this.prefix}*`], { encoding: 'utf8' })
        .split('\n').filter(Boolean);
      for (let i = 0; i < keys.length; i += 500) {
        execFileSync('redis-cli', ['-u', redisUrl, 'unlink', ...keys.slice(i, i + 500)]);
      }
    } catch (error) {
      console.warn(`could not remove the Redis keys under ${this.prefix}: ${error.message}`);
    }
    rmSync(this.workDir, { recursive: true, force: true });
  }
}
