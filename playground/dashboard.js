// The live dashboard: the season's top 10 (or any board's, `?board=key`), a like ticker for an item's most liked remarks
// and a voucher's remaining stock, all pushed over `graphql-transport-ws`.
//
// URL query: `?item=ID` (URL-encoded; default: the most active item, `mostActiveItem`),
// `?voucher=ID` (default: the item's voucher on sale now, else its newest),
// `?token=…` (default: the playground's saved token; the subscriptions used here need none).

const params = new URLSearchParams(location.search);
// The item shown: the one asked for, else the most active (read once, shared by the ticker
// and the stock).
let itemPromise = null;
function shownItemId() {
  if (!itemPromise) {
    const asked = params.get('item');
    itemPromise = asked
      ? Promise.resolve(asked)
      : query('{ mostActiveItem { id } }').then((data) => data.mostActiveItem?.id ?? null);
    // A failed read (the server not up yet) is tried again by the next caller.
    itemPromise.catch(() => { itemPromise = null; });
  }
  return itemPromise;
}
// Any board by its key (`?board=weekly`); the season's board without one.
const boardKey = params.get('board');
const token = params.get('token') || localStorage.getItem('engage.token') || '';
const httpUrl = new URL('/graphql', location.href);
const wsUrl = new URL(httpUrl);
wsUrl.protocol = httpUrl.protocol === 'https:' ? 'wss:' : 'ws:';
const authorization = token ? { Authorization: 'Bearer ' + token } : {};

const $ = (selector, root = document) => root.querySelector(selector);

async function query(text, variables) {
  const response = await fetch(httpUrl, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', ...authorization },
    body: JSON.stringify({ query: text, variables }),
  });
  const body = await response.json();
  if (body.errors) console.warn('engage:', body.errors);
  return body.data || {};
}

// Briefly highlights a row whose number changed.
function flash(row) {
  row.classList.remove('changed');
  void row.offsetWidth;
  row.classList.add('changed');
  setTimeout(() => row.classList.remove('changed'), 50);
}

function setText(element, text) {
  if (element.textContent !== text) element.textContent = text;
}

const number = new Intl.NumberFormat('en');

const client = new GraphQLWsClient(wsUrl.toString(), {
  connectionParams: () => authorization,
  onStatus: (status) => {
    const element = $('#status');
    element.dataset.status = status;
    setText(element, status);
  },
});

// --- Leaderboard: one snapshot replaces the rows; rows are keyed by user so that a
// changed score flashes in place.
function renderBoard(snapshot) {
  setText($('#season'), snapshot.season.name);
  const board = $('#board');
  const previous = new Map([...board.querySelectorAll('.row')].map((row) => [row.dataset.userId, row]));
  const rows = snapshot.entries.map((entry) => {
    let row = previous.get(entry.user.id);
    if (!row) {
      row = document.createElement('li');
      row.className = 'row';
      row.dataset.userId = entry.user.id;
      row.innerHTML = '<span class="rank"></span><span class="name"></span><span class="points"></span>';
    }
    const points = number.format(entry.points);
    const changed = row.isConnected && $('.points', row).textContent !== points;
    row.dataset.rank = entry.rank;
    setText($('.rank', row), String(entry.rank));
    setText($('.name', row), entry.user.name);
    setText($('.points', row), points);
    if (changed || !previous.has(entry.user.id)) flash(row);
    return row;
  });
  if (rows.length === 0) {
    board.innerHTML = '<li class="empty">No points yet this season.</li>';
  } else {
    board.replaceChildren(...rows);
  }
}

if (boardKey) {
  // A board's page as the season's snapshot: its title and period, its scores as points.
  client.subscribe(
    {
      query: `subscription Board($key: String!) { boardChanged(key: $key, top: 10) {
        board { title } period records { rank score user { id name } } } }`,
      variables: { key: boardKey },
    },
    {
      next: (data) => {
        const page = data.boardChanged;
        renderBoard({
          season: { name: `${page.board.title} · ${page.period}` },
          entries: page.records.map((record) => ({ ...record, points: record.score })),
        });
      },
    },
  );
} else {
  client.subscribe(
    {
      query: `subscription Board { leaderboardChanged(top: 10) {
        season { id name } entries { rank points user { id name } } } }`,
    },
    { next: (data) => renderBoard(data.leaderboardChanged) },
  );
}

client.subscribe(
  { query: 'subscription Clock { serverTime(everySeconds: 1) }' },
  {
    next: (data) => {
      const time = new Date(data.serverTime);
      setText($('#clock'), time.toLocaleTimeString('en-GB', { hour12: false }));
    },
  },
);

// --- Like ticker: the item's most liked remarks (the cached list, topped up with the
// newest remarks while the cache is still empty), re-sorted as counts arrive.
const likeCounts = new Map();

function renderTicker() {
  const ticker = $('#ticker');
  const rows = [...ticker.querySelectorAll('.row')];
  rows.sort((a, b) => likeCounts.get(b.dataset.remarkId) - likeCounts.get(a.dataset.remarkId));
  for (const row of rows) {
    const count = number.format(likeCounts.get(row.dataset.remarkId));
    const cell = $('.count', row);
    if (cell.textContent !== count) {
      cell.textContent = count;
      flash(row);
    }
  }
  if (rows.some((row, i) => ticker.children[i] !== row)) ticker.replaceChildren(...rows);
}

async function startTicker() {
  const itemId = await shownItemId();
  if (!itemId) {
    setText($('#item-name'), 'no remarks yet');
    return;
  }
  const data = await query(
    `query Ticker($itemId: ID!) {
      item(id: $itemId) { name }
      recommendedRemarks(itemId: $itemId, first: 6) { id content likeCount author { name } }
      remarks(itemId: $itemId, first: 20) { edges { node { id content likeCount author { name } } } }
    }`,
    { itemId },
  );
  setText($('#item-name'), data.item ? data.item.name : `item ${itemId} not found`);
  const byId = new Map();
  for (const remark of [...(data.recommendedRemarks || []), ...(data.remarks?.edges || []).map((e) => e.node)]) {
    if (!byId.has(remark.id)) byId.set(remark.id, remark);
  }
  const remarks = [...byId.values()].sort((a, b) => b.likeCount - a.likeCount).slice(0, 6);
  if (remarks.length === 0) return;
  const ticker = $('#ticker');
  ticker.replaceChildren(
    ...remarks.map((remark) => {
      likeCounts.set(remark.id, remark.likeCount);
      const row = document.createElement('li');
      row.className = 'row';
      row.dataset.remarkId = remark.id;
      row.innerHTML = '<span class="content"><span class="author"></span><span class="text"></span></span><span class="count"></span>';
      $('.author', row).textContent = remark.author.name;
      $('.text', row).textContent = remark.content;
      $('.count', row).textContent = number.format(remark.likeCount);
      return row;
    }),
  );
  client.subscribe(
    {
      query: `subscription Likes($ids: [ID!]!) { likeCountChanged(remarkIds: $ids) { remarkId likeCount } }`,
      variables: { ids: remarks.map((remark) => remark.id) },
    },
    {
      next: (data) => {
        likeCounts.set(data.likeCountChanged.remarkId, data.likeCountChanged.likeCount);
        renderTicker();
      },
    },
  );
}

// --- Voucher stock.
async function startStock() {
  const voucherId = params.get('voucher');
  let voucher = null;
  if (voucherId) {
    voucher = (await query('query V($id: ID!) { voucher(id: $id) { id title stock remaining } }', { id: voucherId })).voucher;
  } else {
    const itemId = await shownItemId();
    const vouchers = itemId
      ? (await query('query Vs($itemId: ID!) { vouchers(itemId: $itemId) { id title stock remaining beginsAt endsAt } }', { itemId })).vouchers || []
      : [];
    // The one on sale now (begun, not ended, not sold out), else the newest.
    const now = Date.now();
    const onSale = (v) => Date.parse(v.beginsAt) <= now && now < Date.parse(v.endsAt) && v.remaining > 0;
    voucher = vouchers.find(onSale) || vouchers[0] || null;
  }
  const panel = $('#stock');
  if (!voucher) {
    setText($('#voucher-title'), 'no voucher on sale');
    return;
  }
  setText($('#voucher-title'), voucher.title);
  setText($('.total', panel), number.format(voucher.stock));
  const show = (remaining) => {
    setText($('.remaining', panel), number.format(remaining));
    panel.dataset.soldOut = String(remaining === 0);
    $('.bar div', panel).style.width = `${voucher.stock ? (100 * remaining) / voucher.stock : 0}%`;
  };
  show(voucher.remaining);
  client.subscribe(
    {
      query: 'subscription Stock($id: ID!) { voucherStockChanged(voucherId: $id) { voucherId remaining } }',
      variables: { id: voucher.id },
    },
    { next: (data) => show(data.voucherStockChanged.remaining) },
  );
}

// The first reads go over HTTP; if the server is not up yet, try again until it is.
async function retrying(start) {
  for (let delay = 1000; ; delay = Math.min(2 * delay, 10000)) {
    try {
      return await start();
    } catch (error) {
      console.warn('engage: retrying in', delay, 'ms:', error);
      await new Promise((resolve) => setTimeout(resolve, delay));
    }
  }
}

retrying(startTicker);
retrying(startStock);
