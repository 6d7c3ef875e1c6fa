// The web kit in headless Chromium against the real server binary (built beforehand by
// `cargo build`): the example app, built by `vite build`, served from another origin that
// ENGAGE_CORS_ORIGINS allows.
//
//   cargo build && cd clients/web && npm ci && npm run build && npm test
//
// The server runs with the kit's manifest and ENGAGE_TRUSTED_DOCUMENTS_ONLY, so every
// request of the page must be a trusted document, then without the manifest, where the
// kit falls back to APQ. Environment: ENGAGE_BIN, CARGO_TARGET_DIR, REDIS_URL, CHROMIUM.
// Screenshots go to clients/web/test/screenshots/.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createReadStream, existsSync, mkdirSync, readFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { extname, join, normalize, resolve } from 'node:path';
import { chromium } from 'playwright-core';
import { Engage, freePort } from './engage.mjs';

const kit = resolve(import.meta.dirname, '..');
const dist = join(kit, 'example/dist');
const manifestPath = join(kit, 'persisted-documents.json');
const manifest = JSON.parse(readFileSync(manifestPath, 'utf8'));
const screenshots = join(import.meta.dirname, 'screenshots');

/** The manifest's hash of an operation, by name. */
function hashOf(operationName) {
  const found = Object.entries(manifest)
    .find(([, text]) => new RegExp(`(query|mutation|subscription) ${operationName}\\b`).test(text));
  assert.ok(found, `${operationName} is in the manifest`);
  return found[0];
}

let engage;
let site;
let origin;
let browser;
let page;
/** Every GraphQL request the page sent over HTTP, and its answer, in order. */
const requests = [];
/**
 * The payloads of the `connection_init` and `subscribe` messages the page sent over
 * WebSockets.
 */
const inits = [];
const subscribes = [];
const seed = {};

/** Serves the built example (a static server: what any host of built files does). */
function serveExample() {
  const types = { '.html': 'text/html', '.js': 'text/javascript', '.css': 'text/css' };
  return createServer((request, response) => {
    const path = normalize(new URL(request.url, 'http://x').pathname).replace(/^\/+/, '');
    const file = join(dist, path && existsSync(join(dist, path)) ? path : 'index.html');
    response.setHeader('Content-Type', types[extname(file)] ?? 'application/octet-stream');
    createReadStream(file).pipe(response);
  });
}

async function screenshot(name) {
  const path = join(screenshots, name);
  await page.screenshot({ path, fullPage: true });
  console.log(`screenshot: ${path}`);
}

/** Waits until `ready()` holds, failing after a few seconds. */
async function until(ready, what) {
  const deadline = Date.now() + 5000;
  while (!ready()) {
    if (Date.now() > deadline) throw new Error(`${what}: not within 5 s`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** The server's settings while the page is tested: the kit's documents, and only those. */
const trustedOnly = () => ({
  ENGAGE_CORS_ORIGINS: origin,
  ENGAGE_TRUSTED_DOCUMENTS: manifestPath,
  ENGAGE_TRUSTED_DOCUMENTS_ONLY: 'true',
});

const text = (selector) => page.textContent(selector);
const remark = (index) => `#remarks .remark[data-remark-id="${seed.remarkIds[index]}"]`;

/**
 * Another user likes the remark of this index (which none liked before) by the trusted
 * LikeRemark's hash; the page must show its count of 1 within a few seconds.
 */
async function likeByAnotherUser(userId, index) {
  const fan = await engage.devToken(userId, 'user', `Fan ${userId}`);
  await engage.post(fan, {
    operationName: 'LikeRemark',
    variables: { remarkId: seed.remarkIds[index] },
    extensions: { persistedQuery: { version: 1, sha256Hash: hashOf('LikeRemark') } },
  });
  await page.waitForFunction((selector) => document.querySelector(selector)?.textContent === '1',
    `${remark(index)} .count`, { timeout: 5000 });
}

/** The date `offset` days from a `YYYY-MM-DD` date. */
function dayFrom(date, offset) {
  const day = new Date(`${date}T00:00:00Z`);
  day.setUTCDate(day.getUTCDate() + offset);
  return day.toISOString().slice(0, 10);
}

/**
 * A user who signed the day before yesterday (a make-up, which may come before the first
 * sign-in), missed yesterday, bought a streak freeze with points, and signs in today: the
 * sign-in spends the freeze on yesterday. A make-up reaches only this month's days: on a
 * month's first two days the server's clock runs ahead (see `Engage.start`).
 */
async function seedFrozenDay(admin) {
  const token = await engage.devToken(62, 'user', 'Frida Frost');
  const { streak } = await engage.post(token, { query: '{ streak { today } }' });
  seed.frost = { token, today: streak.today, frozen: dayFrom(streak.today, -1) };
  const before = dayFrom(streak.today, -2);
  assert.equal(before.slice(0, 7), streak.today.slice(0, 7),
    `the server's today, ${streak.today}, leaves no day before yesterday in its month: ` +
    'is the binary built with `--features test-clock`?');
  await engage.post(token, { query: 'mutation($d: Date!) { makeUpSignIn(date: $d) { date } }', variables: { d: before } });
  const { viewer } = await engage.post(token, { query: '{ viewer { id } }' });
  await engage.post(admin, {
    query: 'mutation($u: ID!) { awardPoints(userId: $u, type: LEARNING, points: 50, idempotencyKey: "frost") { awarded } }',
    variables: { u: viewer.id },
  });
  await engage.post(token, { query: 'mutation { buyStreakFreeze(idempotencyKey: "frost") { freezesHeld } }' });
  await engage.post(token, { query: 'mutation { signIn { date } }' });
  seed.frost.seeded = true;
}

before(async () => {
  assert.ok(existsSync(join(dist, 'index.html')), 'build the example first: npm run build');
  mkdirSync(screenshots, { recursive: true });
  const sitePort = await freePort();
  origin = `http://127.0.0.1:${sitePort}`;
  site = serveExample();
  await new Promise((r) => site.listen(sitePort, '127.0.0.1', r));

  // Seeded with documents of its own (not trusted ones), so before the manifest is enforced.
  engage = await Engage.create();
  await engage.start({ ENGAGE_CORS_ORIGINS: origin });
  const admin = await engage.devToken(1, 'admin', 'Ada Admin');
  const created = await engage.post(admin, { query: 'mutation { createItem(input: { name: "Harbour Noodle Bar" }) { id } }' });
  seed.itemId = created.createItem.id;
  seed.remarkIds = [];
  for (const [userId, name, content] of [
    [11, 'Mei Lin', 'Best hand-pulled noodles on the harbour.'],
    [12, 'Omar Haddad', 'Broth is rich, queue is long, worth it.'],
    [13, 'Sofia Rossi', 'Friendly staff, spicy oil on every table.'],
  ]) {
    const token = await engage.devToken(userId, 'user', name);
    const { createRemark } = await engage.post(token, {
      query: 'mutation($itemId: ID!, $content: String!) { createRemark(input: { itemId: $itemId, score: 5, content: $content }) { id } }',
      variables: { itemId: seed.itemId, content },
    });
    // Oldest first: the page lists the newest first.
    seed.remarkIds.unshift(createRemark.id);
  }
  seed.viewer = await engage.devToken(61, 'user', 'Vera Viewer');
  await seedFrozenDay(admin);
  await engage.stop();
  await engage.start(trustedOnly());

  browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
  page = await (await browser.newContext({ viewport: { width: 1280, height: 800 } })).newPage();
  page.on('pageerror', (error) => console.error('page error:', error));
  page.on('console', (message) => {
    // Not the browser's line for each 4xx: PERSISTED_QUERY_NOT_FOUND is expected here.
    if (['warning', 'error'].includes(message.type()) && !message.text().startsWith('Failed to load resource')) {
      console.log(`page ${message.type()}: ${message.text()}`);
    }
  });
  page.on('response', async (response) => {
    const request = response.request();
    if (!request.url().startsWith(`${engage.base}/graphql`) || request.method() !== 'POST') return;
    requests.push({ body: request.postDataJSON(), status: response.status(), answer: await response.json().catch(() => null) });
  });
  page.on('websocket', (socket) => socket.on('framesent', ({ payload }) => {
    const message = JSON.parse(payload);
    if (message.type === 'connection_init') inits.push(message.payload);
    if (message.type === 'subscribe') subscribes.push(message.payload);
  }));
});

after(async () => {
  await browser?.close();
  await engage?.dispose();
  site?.close();
});

test('the example lists the remarks page by page, sending only trusted documents by hash', async () => {
  await page.goto(`${origin}/?api=${engage.base}&item=${seed.itemId}&token=${seed.viewer}&pageSize=2`);
  await page.waitForSelector(remark(1));
  assert.equal(await text('#item-name'), 'Harbour Noodle Bar');
  assert.equal(await page.locator('#remarks .remark').count(), 2);
  // The next page is merged into the list (the cache's pagination policy), not put instead.
  await page.click('#more:not([hidden])');
  await page.waitForSelector(remark(2));
  assert.equal(await page.locator('#remarks .remark').count(), 3);
  assert.equal(await page.isHidden('#more'), true);
  assert.equal(await text(`${remark(0)} .count`), '0');
  await page.waitForSelector('#socket[data-state="connected"]');
  await screenshot('example-initial.png');

  assert.ok(requests.length >= 3, JSON.stringify(requests));
  for (const { body, answer } of requests) {
    assert.equal(body.query, undefined, `${body.operationName} is sent by hash alone`);
    assert.ok(manifest[body.extensions.persistedQuery.sha256Hash], `${body.operationName} is a listed hash`);
    assert.equal(answer.errors, undefined, JSON.stringify(answer.errors));
  }
  // Over the socket the text travels, the manifest's exact text (the live counts, the
  // board and the viewer's rank).
  await until(() => subscribes.length >= 3, 'three subscriptions');
  for (const { query } of subscribes) assert.ok(Object.values(manifest).includes(query), query);
});

test('a click on like shows the mutation\'s answer from the normalised cache', async () => {
  const listed = requests.filter((r) => r.body.operationName === 'ItemRemarks').length;
  await page.click(`${remark(0)} .like`);
  // `likedByMe` comes only from the mutation's answer, never from the live counts.
  await page.waitForSelector(`${remark(0)} .like[aria-pressed="true"]`);
  assert.equal(await text(`${remark(0)} .count`), '1');
  assert.ok(requests.some((r) => r.body.operationName === 'LikeRemark'));
  assert.equal(requests.filter((r) => r.body.operationName === 'ItemRemarks').length, listed, 'no refetch');

  await page.click(`${remark(0)} .like`);
  await page.waitForSelector(`${remark(0)} .like[aria-pressed="false"]`);
  assert.equal(await text(`${remark(0)} .count`), '0');
});

test('a like by another user shows up live', async () => {
  const started = Date.now();
  await likeByAnotherUser(71, 1);
  console.log(`like by another user on the page in ${Date.now() - started} ms`);
  assert.equal(await page.getAttribute(`${remark(1)} .like`, 'aria-pressed'), 'false');
});

test('a like from the viewer\'s other device shows on a refresh of the remark by node(id)', async () => {
  const listed = requests.filter((r) => r.body.operationName === 'ItemRemarks').length;
  await engage.post(seed.viewer, {
    operationName: 'LikeRemark',
    variables: { remarkId: seed.remarkIds[1] },
    extensions: { persistedQuery: { version: 1, sha256Hash: hashOf('LikeRemark') } },
  });
  // The count is live; whether the viewer likes it is not.
  await page.waitForFunction((selector) => document.querySelector(selector)?.textContent === '2',
    `${remark(1)} .count`, { timeout: 5000 });
  assert.equal(await page.getAttribute(`${remark(1)} .like`, 'aria-pressed'), 'false');

  await page.click(`${remark(1)} .refresh`);
  await page.waitForSelector(`${remark(1)} .like[aria-pressed="true"]`);
  const refreshed = requests.filter((r) => r.body.operationName === 'RemarkById').at(-1);
  assert.deepEqual(refreshed.body.variables, { id: seed.remarkIds[1] });
  assert.equal(refreshed.answer.data.node.__typename, 'Remark');
  assert.equal(requests.filter((r) => r.body.operationName === 'ItemRemarks').length, listed, 'no refetch of the list');
});

test('signing in marks today in the calendar and puts the viewer on the live board', async () => {
  await page.waitForSelector('#calendar .day.today[data-signed="false"]');
  const viewerId = await page.getAttribute('body', 'data-viewer-id');
  assert.ok(viewerId);
  const calendars = requests.filter((r) => r.body.operationName === 'Calendar').length;
  await page.click('#sign-in');
  await page.waitForSelector('#calendar .day.today[data-signed="true"]');
  assert.equal(await page.isDisabled('#sign-in'), true);
  assert.match(await text('#streak'), /^streak 1,/);
  // The month and the streak came with the sign-in's answer.
  assert.equal(requests.filter((r) => r.body.operationName === 'Calendar').length, calendars, 'no refetch');
  await page.waitForSelector(`#board li.me[data-user-id="${viewerId}"]`, { timeout: 5000 });
  const points = await text(`#board li[data-user-id="${viewerId}"] .points`);
  assert.notEqual(points, '0');
  // The viewer's own entry, followed apart from the board, agrees with it.
  const rank = (await text(`#board li[data-user-id="${viewerId}"] span`)).split('.')[0];
  await page.waitForSelector(`#me[data-rank="${rank}"]`, { timeout: 5000 });
  assert.equal(await text('#me'), `You: rank ${rank}, ${points} ${points === '1' ? 'point' : 'points'}`);
  await screenshot('example-after-sign-in.png');
});

test('an error reaches the page with its code as the kit types it', async () => {
  const other = await page.context().newPage();
  try {
    await other.goto(`${origin}/?api=${engage.base}&item=not-an-id&token=${seed.viewer}`);
    await other.waitForSelector('#error:not([hidden])');
    assert.match(await other.textContent('#error'), /^BAD_USER_INPUT: /);
  } finally {
    await other.close();
  }
});

test('after a server restart the socket reconnects with the token and the counts stay live', async () => {
  const connections = inits.length;
  await engage.stop();
  await page.waitForSelector('#socket[data-state="closed"]');
  await engage.start(trustedOnly());
  await page.waitForSelector('#socket[data-state="connected"]', { timeout: 15_000 });
  assert.ok(inits.length > connections);
  for (const payload of inits) assert.deepEqual(payload, { Authorization: `Bearer ${seed.viewer}` });

  await likeByAnotherUser(72, 2);
});

test('against a server without the manifest the kit falls back to APQ', async () => {
  await engage.stop();
  await engage.start({ ENGAGE_CORS_ORIGINS: origin });
  requests.length = 0;
  await page.reload();
  await page.waitForSelector(`${remark(0)} .like[aria-pressed="false"]`);
  await page.waitForSelector('#calendar .day.today[data-signed="true"]');
  await page.waitForSelector('#viewer:text("signed in as Vera Viewer")');
  assert.equal(await page.isHidden('#error'), true);
  // Each query: its hash alone, unknown to this server, then its text, which the server
  // stores. Storing three at once exceeds the user's burst: the kit waits the `retryAfter`
  // of a RATE_LIMITED answer and sends again.
  for (const name of ['Viewer', 'ItemRemarks', 'Calendar']) {
    const sent = requests.filter((r) => r.body.operationName === name);
    const [first, last] = [sent[0], sent.at(-1)];
    assert.equal(first.body.query, undefined, name);
    assert.equal(first.answer.errors[0].extensions.code, 'PERSISTED_QUERY_NOT_FOUND', name);
    assert.equal(last.body.query, manifest[last.body.extensions.persistedQuery.sha256Hash], name);
    assert.equal(last.answer.errors, undefined, `${name}: ${JSON.stringify(last.answer.errors)}`);
  }
  const limited = requests.filter((r) => r.answer?.errors?.[0]?.extensions?.code === 'RATE_LIMITED');
  console.log(`RATE_LIMITED answers waited out: ${limited.map((r) => r.body.operationName).join(', ') || 'none'}`);

  // Stored by the server now: the next load goes by hash alone.
  requests.length = 0;
  await page.reload();
  await page.waitForSelector(remark(1));
  await page.waitForSelector('#calendar .day.today');
  assert.deepEqual(requests.map((r) => [r.body.query, r.answer.errors]).filter(([query, errors]) => query || errors), []);
  await screenshot('example-apq.png');
});

test('a day kept by a streak freeze shows as frozen in the calendar, apart from signed and missed days', async () => {
  assert.ok(seed.frost.seeded, 'the frozen day was seeded');
  const other = await page.context().newPage();
  try {
    await other.goto(`${origin}/?api=${engage.base}&token=${seed.frost.token}`);
    const frozenDay = Number(seed.frost.frozen.slice(8, 10));
    const day = (n) => `#calendar .day[data-day="${n}"]`;
    await other.waitForSelector(`${day(frozenDay)}[data-state="FROZEN"]`);
    assert.equal(await other.getAttribute(day(frozenDay - 1), 'data-state'), 'MADE_UP');
    await other.waitForSelector(`${day(frozenDay + 1)}.today[data-state="SIGNED"]`);
    assert.equal(await other.getAttribute(day(frozenDay), 'title'), 'frozen');
    assert.equal(await other.getAttribute(day(frozenDay), 'data-signed'), 'false');
    assert.match(await other.textContent('#streak'), /^streak 3,/);
    // Drawn apart from the signed days and from a plain day.
    const background = (selector) => other.$eval(selector, (element) => getComputedStyle(element).backgroundColor);
    const frozen = await background(day(frozenDay));
    assert.notEqual(frozen, await background(day(frozenDay + 1)));
    if (frozenDay > 2) assert.notEqual(frozen, await background(day(frozenDay - 2)));
    assert.match(await other.$eval(day(frozenDay), (element) => getComputedStyle(element, '::after').content), /❄/);
    await other.screenshot({ path: join(screenshots, 'example-frozen-day.png'), fullPage: true });
  } finally {
    await other.close();
  }
});
