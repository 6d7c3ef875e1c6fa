// End-to-end: the live dashboard, the queues page and the playground in headless Chromium against the real
// server binary (built beforehand by `cargo build`), real Redis and a SQLite file of its own.
//
//   cargo build && (cd e2e && npm ci && node --test)
//
// Environment: ENGAGE_BIN (default: $CARGO_TARGET_DIR or ../target, then debug/engage),
// REDIS_URL (default redis://127.0.0.1:6379), CHROMIUM (default /usr/bin/chromium).
// Screenshots go to e2e/screenshots/.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, execFileSync } from 'node:child_process';
import { mkdtempSync, mkdirSync, openSync, readFileSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { createServer as createHttpServer } from 'node:http';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { randomUUID } from 'node:crypto';
import { chromium } from 'playwright-core';

const here = dirname(fileURLToPath(import.meta.url));
const targetDir = process.env.CARGO_TARGET_DIR || resolve(here, '../target');
const binary = process.env.ENGAGE_BIN || join(targetDir, 'debug/engage');
const redisUrl = process.env.REDIS_URL || 'redis://127.0.0.1:6379';
const screenshots = join(here, 'screenshots');
/// The promise of the issue: numbers on the page change within one second of a mutation.
const LIVE_WITHIN_MS = 1000;

const workDir = mkdtempSync(join(tmpdir(), 'engage-e2e-'));
const redisPrefix = `engage-e2e:${randomUUID()}:`;
let port;
let base;
let server;
let browser;
let page;
/// The job callback the queue calls: it fails jobs whose body says `fail` while `failing`, and
/// reports a body's `progress` before it answers.
const hook = { failing: true, port: 0, server: null, token: null };

function freePort() {
  return new Promise((resolvePort, reject) => {
    const probe = createServer();
    probe.once('error', reject);
    probe.listen(0, '127.0.0.1', () => {
      const { port } = probe.address();
      probe.close(() => resolvePort(port));
    });
  });
}

/// The binary's environment: dev mode (no ENGAGE_JWT_SECRET), this run's port, database
/// and Redis prefix (the server's and `engage seed-demo`'s alike).
function serverEnv() {
  const env = { ...process.env };
  delete env.ENGAGE_JWT_SECRET;
  return Object.assign(env, {
    ENGAGE_BIND: `127.0.0.1:${port}`,
    DATABASE_URL: `sqlite://${join(workDir, 'engage.db')}`,
    REDIS_URL: redisUrl,
    ENGAGE_REDIS_PREFIX: redisPrefix,
    ENGAGE_SHUTDOWN_GRACE_SECONDS: '2',
    ENGAGE_CALLBACK_HOSTS: `127.0.0.1:${hook.port}`,
    RUST_LOG: env.RUST_LOG || 'warn',
  });
}

/// Starts the binary and waits until it is ready.
async function startServer() {
  const env = serverEnv();
  const log = openSync(join(workDir, 'server.log'), 'a');
  server = spawn(binary, ['serve'], { env, stdio: ['ignore', log, log] });
  const exited = new Promise((_, reject) =>
    server.once('exit', (code) => reject(new Error(`server exited with ${code}:\n${serverLog()}`))),
  );
  const deadline = Date.now() + 30_000;
  while (Date.now() < deadline) {
    const ready = await Promise.race([
      fetch(`${base}/readyz`).then((r) => r.ok, () => false),
      exited,
    ]);
    if (ready) return;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`server not ready within 30 s:\n${serverLog()}`);
}

async function stopServer() {
  if (!server || server.exitCode !== null) return;
  const exited = new Promise((r) => server.once('exit', r));
  server.kill('SIGTERM');
  await exited;
}

function serverLog() {
  try {
    return readFileSync(join(workDir, 'server.log'), 'utf8').slice(-4000);
  } catch {
    return '';
  }
}

async function gql(token, query, variables = {}) {
  const response = await fetch(`${base}/graphql`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', ...(token ? { Authorization: `Bearer ${token}` } : {}) },
    body: JSON.stringify({ query, variables }),
  });
  const body = await response.json();
  assert.equal(body.errors, undefined, `${query}: ${JSON.stringify(body.errors)}`);
  return body.data;
}

async function devToken(userId, role = 'user', name = undefined) {
  const response = await fetch(`${base}/dev/token`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ userId, role, name }),
  });
  assert.equal(response.status, 200);
  return (await response.json()).token;
}

async function startHook() {
  hook.server = createHttpServer(async (request, response) => {
    let body = '';
    for await (const chunk of request) body += chunk;
    const data = JSON.parse(body || '{}');
    try {
      if (data.progress) {
        await gql(hook.token, `mutation($t: String!, $id: ID!, $l: String!, $p: JSON!) {
          reportJobProgress(topic: $t, id: $id, leaseToken: $l, progress: $p) { jobId } }`, {
          t: request.headers['x-engage-job-topic'], id: request.headers['x-engage-job-id'],
          l: request.headers['x-engage-lease'], p: data.progress,
        });
      }
    } catch (error) {
      console.warn('progress not reported:', error.message);
    }
    if (data.fail && hook.failing) {
      response.writeHead(500).end('failing on purpose');
      return;
    }
    response.writeHead(200, { 'Content-Type': 'application/json' }).end('{"ok":true}');
  });
  await new Promise((resolveListen) => hook.server.listen(0, '127.0.0.1', resolveListen));
  hook.port = hook.server.address().port;
}

async function screenshot(name) {
  const path = join(screenshots, name);
  await page.screenshot({ path });
  console.log(`screenshot: ${path}`);
}

/// Runs `mutation` and waits until `read` (evaluated in the page) differs from `before`,
/// failing unless that happens within LIVE_WITHIN_MS of the mutation's start.
async function expectLiveChange(description, read, arg, mutation) {
  const before = await page.evaluate(read, arg);
  const started = Date.now();
  await mutation();
  const remaining = Math.max(1, LIVE_WITHIN_MS - (Date.now() - started));
  // Polled from here rather than by a predicate built in the page: the page's
  // Content-Security-Policy forbids evaluating strings there, as it should.
  const deadline = Date.now() + remaining;
  let after = before;
  while (after === before) {
    if (Date.now() > deadline) {
      throw new Error(`${description}: the page did not change within ${LIVE_WITHIN_MS} ms (still ${before})`);
    }
    await new Promise((resolve) => setTimeout(resolve, 10));
    after = await page.evaluate(read, arg);
  }
  console.log(`${description}: ${before} -> ${after} in ${Date.now() - started} ms`);
  return after;
}

const likeCountOf = (remarkId) =>
  document.querySelector(`#ticker .row[data-remark-id="${remarkId}"] .count`)?.textContent ?? null;
const boardPointsOf = (userId) =>
  document.querySelector(`#board .row[data-user-id="${userId}"] .points`)?.textContent ?? null;
const remainingStock = () => document.querySelector('#stock .remaining').textContent;

const seed = {};

before(async () => {
  mkdirSync(screenshots, { recursive: true });
  port = await freePort();
  base = `http://127.0.0.1:${port}`;
  await startHook();
  await startServer();

  // Seed through the API: an item, three remarks with a few likes, a voucher on sale, and
  // the first points of the season.
  const admin = await devToken(1, 'admin', 'Ada Admin');
  seed.itemId = (await gql(admin, 'mutation { createItem(input: { name: "Harbour Noodle Bar" }) { id } }')).createItem.id;
  const authors = [
    [11, 'Mei Lin', 'Best hand-pulled noodles on the harbour.'],
    [12, 'Omar Haddad', 'Broth is rich, queue is long, worth it.'],
    [13, 'Sofia Rossi', 'Friendly staff, spicy oil on every table.'],
  ];
  seed.remarkIds = [];
  for (const [userId, name, content] of authors) {
    const token = await devToken(userId, 'user', name);
    const remark = await gql(token, 'mutation($itemId: ID!, $content: String!) { createRemark(input: { itemId: $itemId, score: 5, content: $content }) { id } }',
      { itemId: seed.itemId, content });
    seed.remarkIds.push(remark.createRemark.id);
    await gql(token, 'mutation { signIn { streak } }');
  }
  for (const userId of [21, 22, 23]) {
    const token = await devToken(userId, 'user', `Fan ${userId}`);
    await gql(token, 'mutation($id: ID!) { likeRemark(remarkId: $id) { likeCount } }', { id: seed.remarkIds[0] });
  }
  const now = Date.now();
  seed.voucherId = (await gql(admin, `mutation($itemId: ID!, $begins: DateTime!, $ends: DateTime!) {
      createVoucher(input: { itemId: $itemId, title: "Half-price noodles", stock: 50,
        beginsAt: $begins, endsAt: $ends, payWithinSeconds: 900 }) { id } }`,
    { itemId: seed.itemId, begins: new Date(now - 3600_000).toISOString(), ends: new Date(now + 86400_000).toISOString() },
  )).createVoucher.id;

  browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
  // A fresh context is a fresh profile: no saved token, no saved GraphiQL tabs.
  const context = await browser.newContext({ viewport: { width: 1600, height: 900 } });
  page = await context.newPage();
  page.on('pageerror', (error) => console.error('page error:', error));
});

after(async () => {
  await browser?.close();
  await stopServer();
  hook.server?.close();
  // Remove this run's Redis keys (only those under its own prefix) and its database.
  try {
    const keys = execFileSync('redis-cli', ['-u', redisUrl, '--scan', '--pattern', `${redisPrefix}*`], { encoding: 'utf8' })
      .split('\n').filter(Boolean);
    for (let i = 0; i < keys.length; i += 500) {
      execFileSync('redis-cli', ['-u', redisUrl, 'unlink', ...keys.slice(i, i + 500)]);
    }
  } catch (error) {
    console.warn(`could not remove the Redis keys under ${redisPrefix}: ${error.message}`);
  }
  rmSync(workDir, { recursive: true, force: true });
});

test('the dashboard shows the board, the like ticker and the stock, and follows changes within a second', async () => {
  await page.goto(`${base}/dashboard?item=${encodeURIComponent(seed.itemId)}`);
  await page.waitForSelector('#status[data-status="live"]');
  await page.waitForSelector(`#ticker .row[data-remark-id="${seed.remarkIds[0]}"]`);
  await page.waitForFunction(() => document.querySelectorAll('#board .row').length >= 3);
  await page.waitForFunction(() => document.querySelector('#stock .remaining').textContent === '50');
  assert.equal(await page.evaluate(likeCountOf, seed.remarkIds[0]), '3');
  await screenshot('dashboard-initial.png');

  const fan = await devToken(31, 'user', 'Fan 31');
  assert.equal(await expectLiveChange('like ticker after likeRemark', likeCountOf, seed.remarkIds[1],
    () => gql(fan, 'mutation($id: ID!) { likeRemark(remarkId: $id) { likeCount } }', { id: seed.remarkIds[1] })), '1');

  const newcomer = await devToken(41, 'user', 'Nia Newcomer');
  const { viewer } = await gql(newcomer, '{ viewer { id } }');
  const points = await expectLiveChange('board after signIn', boardPointsOf, viewer.id,
    () => gql(newcomer, 'mutation { signIn { pointsAwarded } }'));
  assert.notEqual(points, null);

  const buyer = await devToken(51, 'user', 'Bo Buyer');
  assert.equal(await expectLiveChange('stock after seckill', remainingStock, undefined,
    () => gql(buyer, 'mutation($id: ID!) { seckillVoucher(voucherId: $id) { status } }', { id: seed.voucherId })), '49');
  await screenshot('dashboard-after-updates.png');
});

test('the dashboard reconnects by itself when the server restarts, then follows changes again', async () => {
  await page.waitForSelector('#status[data-status="live"]');
  await stopServer();
  await page.waitForSelector('#status[data-status="reconnecting"]', { timeout: 5000 });
  await screenshot('dashboard-reconnecting.png');
  await startServer();
  await page.waitForSelector('#status[data-status="live"]', { timeout: 15_000 });

  const fan = await devToken(32, 'user', 'Fan 32');
  assert.equal(await expectLiveChange('like ticker after the restart', likeCountOf, seed.remarkIds[2],
    () => gql(fan, 'mutation($id: ID!) { likeRemark(remarkId: $id) { likeCount } }', { id: seed.remarkIds[2] })), '1');
  const late = await devToken(42, 'user', 'Lee Latecomer');
  const { viewer } = await gql(late, '{ viewer { id } }');
  await expectLiveChange('board after a signIn after the restart', boardPointsOf, viewer.id,
    () => gql(late, 'mutation { signIn { pointsAwarded } }'));
  await screenshot('dashboard-after-restart.png');
});

test('the playground runs a saved example with the token from its dev token button', async () => {
  await page.goto(`${base}/`);
  await page.waitForSelector('.graphiql-container');
  await page.waitForSelector('button[data-example="01_hello"]');
  // Grouped by feature in the Examples sidebar.
  const groups = await page.$$eval('.examples h3', (headings) => headings.map((h) => h.textContent));
  assert.deepEqual(groups.slice(0, 3), ['Getting started', 'Items', 'Remarks & likes']);

  await page.fill('#user-id', '7');
  await page.click('#mint');
  await page.waitForFunction(() => document.getElementById('token').value.length > 20);
  await page.waitForSelector('.graphiql-container');

  // The viewer the minted token names, as the service answers it (an opaque id).
  const { viewer } = await gql(await page.inputValue('#token'), '{ viewer { id } }');

  await page.click('button[data-example="01_hello"]');
  await page.waitForFunction(() => document.querySelector('.graphiql-query-editor')?.textContent.includes('query Hello'));
  await page.click('.graphiql-execute-button');
  await page.waitForFunction((viewerId) => {
    const result = document.querySelector('.result-window')?.textContent || '';
    return result.includes('"__typename": "Query"') && result.includes(`"id": "${viewerId}"`);
  }, viewer.id, { timeout: 5000 });
  await screenshot('playground-hello.png');

  // A subscription through GraphiQL's WebSocket transport.
  await page.click('button[data-example="04_server_time"]');
  // The tab takes the operation's name once GraphiQL has parsed the new text; running
  // before that would still name the previous tab's operation.
  await page.waitForFunction(() => document.querySelector('.graphiql-tab-active')?.textContent.includes('ServerTime'));
  await page.click('.graphiql-execute-button');
  // A DateTime: UTC with milliseconds, as toISOString writes it.
  await page.waitForFunction(() => /"serverTime": "\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z"/
    .test(document.querySelector('.result-window')?.textContent || ''), null, { timeout: 5000 });
  await screenshot('playground-subscription.png');
});

test('the queues page shows live counts, pauses, sets limits, requeues a dead job and shows a job', async () => {
  const admin = await devToken(1, 'admin', 'Ada Admin');
  hook.token = admin;
  const topic = 'e2e-hooks';
  const schedule = (input) => gql(admin, 'mutation($input: ScheduleJobInput!) { scheduleJob(input: $input) { jobId } }', {
    input: { topic, delaySeconds: 0, callbackUrl: `http://127.0.0.1:${hook.port}/run`, ...input },
  });
  await schedule({ id: 'broken-1', data: { fail: true }, maxAttempts: 1 });
  await schedule({ id: 'with-progress', data: { progress: { percent: 50, step: 'resize' } } });
  await schedule({ id: 'nightly', data: {}, delaySeconds: 3600, repeat: { cron: '30 2 * * *', timeZone: 'Europe/Berlin' } });
  const counts = async () => (await gql(admin, 'query($t: String!) { topic(name: $t) { counts { dead done } } }', { t: topic })).topic.counts;
  for (let i = 0; i < 100 && (await counts()).dead < 1; i++) await new Promise((r) => setTimeout(r, 100));

  // Without a token the page shows nothing and says why.
  await page.goto(`${base}/queues`);
  await page.waitForSelector('#status[data-status="unauthorized"]');
  assert.match(await page.textContent('#message'), /admin token/);
  assert.equal(await page.$(`#topics tr[data-topic="${topic}"]`), null);

  await page.fill('#token', admin);
  await page.click('#use-token');
  const row = `#topics tr[data-topic="${topic}"]`;
  await page.waitForSelector(row);
  await page.waitForSelector('#status[data-status="live"]');
  await page.waitForFunction((selector) => document.querySelector(`${selector} .count-dead`)?.textContent === '1', row);

  // A selected topic follows jobChanged: a job that dies shows at once.
  await page.click(`${row} .name`);
  await page.waitForSelector('#jobs tr[data-job-id="broken-1"]');
  const deadCount = (selector) => document.querySelector(`${selector} .count-dead`)?.textContent ?? null;
  assert.equal(await expectLiveChange('dead count after a job died', deadCount, row,
    () => schedule({ id: 'broken-2', data: { fail: true }, maxAttempts: 1 })), '2');
  await page.waitForSelector('#jobs tr[data-job-id="broken-2"]');
  await screenshot('queues-dead-jobs.png');

  // Pause and resume, as the API reads it back.
  await page.click(`${row} button[name="pause"]`);
  await page.waitForSelector(`${row}[data-paused="true"]`);
  assert.equal((await gql(admin, 'query($t: String!) { topic(name: $t) { paused } }', { t: topic })).topic.paused, true);
  await page.click(`${row} button[name="resume"]`);
  await page.waitForSelector(`${row}[data-paused="false"]`);

  // Limits.
  await page.fill(`${row} input[name="concurrency"]`, '3');
  await page.click(`${row} button[name="limits"]`);
  await page.waitForFunction(() => !document.getElementById('message').textContent);
  for (let i = 0; i < 50; i++) {
    const { topic: t } = await gql(admin, 'query($t: String!) { topic(name: $t) { concurrency } }', { t: topic });
    if (t.concurrency === 3) break;
    assert.ok(i < 49, 'concurrency set from the page');
    await new Promise((r) => setTimeout(r, 100));
  }

  // Requeue a dead job; its callback answers now, so it is done.
  hook.failing = false;
  const doneBefore = (await counts()).done;
  await page.click('#jobs tr[data-job-id="broken-1"] button[name="requeue"]');
  await page.waitForFunction(() => !document.querySelector('#jobs tr[data-job-id="broken-1"]'));
  for (let i = 0; i < 50 && (await counts()).done <= doneBefore; i++) await new Promise((r) => setTimeout(r, 100));
  assert.ok((await counts()).done > doneBefore, 'the requeued job ran');

  // A job's progress and history.
  await page.selectOption('#state', 'DONE');
  await page.waitForSelector('#jobs tr[data-job-id="with-progress"]');
  await page.click('#jobs tr[data-job-id="with-progress"]');
  await page.waitForSelector('#job:not([hidden])');
  await page.waitForFunction(() => document.getElementById('job-progress').textContent.includes('resize'));
  const states = await page.$$eval('#history tr td:nth-child(2)', (cells) => cells.map((c) => c.textContent));
  assert.deepEqual(states, ['DELAYED', 'RUNNING', 'DONE']);

  // A repeating job shows its series and next run.
  await page.selectOption('#state', 'DELAYED');
  await page.click('#jobs tr[data-job-id="nightly"]');
  await page.waitForFunction(() => document.querySelector('#job-fields tr[data-field="repeats"]')?.textContent.includes('30 2 * * *'));
  assert.match(await page.textContent('#job-fields tr[data-field="repeats"]'), /Europe\/Berlin/);
  await screenshot('queues-job.png');
});

test('after engage seed-demo, /dashboard with no parameters shows the most active item, its voucher and the boards', async () => {
  const output = execFileSync(binary, ['seed-demo', '--users', '12'], { env: serverEnv(), encoding: 'utf8' });
  assert.match(output, new RegExp(`http://127\\.0\\.0\\.1:${port}/dashboard`), output);

  await page.goto(`${base}/dashboard`);
  await page.waitForSelector('#status[data-status="live"]');
  // The seeded flagship: every demo user reviewed it, and it carries the voucher on sale
  // (100 in stock; the earlier test's voucher has 50).
  await page.waitForFunction(() => document.querySelectorAll('#ticker .row').length >= 3);
  await page.waitForFunction(() => document.querySelector('#stock .total').textContent === '100');
  assert.equal(await page.textContent('#item-name'), 'Harbour Noodle Bar');
  assert.equal(await page.textContent('#voucher-title'), 'Half-price noodles');
  await page.waitForFunction(() => document.querySelectorAll('#board .row').length >= 3);
  await screenshot('dashboard-seeded.png');

  // The second board the seed made: this week's steps.
  await page.goto(`${base}/dashboard?board=steps`);
  await page.waitForSelector('#status[data-status="live"]');
  await page.waitForFunction(() => document.querySelectorAll('#board .row').length >= 3);
  assert.match(await page.textContent('#season'), /^Steps this week · \d{4}-W\d\d$/);
  await screenshot('dashboard-seeded-steps.png');
});
