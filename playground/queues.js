// The queues page: every topic of the delay queue with its live counts, pause and resume,
// limits, a topic's jobs per state (dead ones with requeue) and a job's progress and history.
//
// Everything it shows comes from the admin part of the API, so it needs an admin token: typed
// into the token box (kept for this tab only, in sessionStorage), or the playground's saved
// one. Counts are polled every second; a selected topic also follows `jobChanged`, so its
// lists and the open job change as soon as a job does.

const TOKEN_KEY = 'engage.adminToken';
let token = sessionStorage.getItem(TOKEN_KEY) || localStorage.getItem('engage.token') || '';
const httpUrl = new URL('/graphql', location.href);
const wsUrl = new URL(httpUrl);
wsUrl.protocol = httpUrl.protocol === 'https:' ? 'wss:' : 'ws:';
const POLL_MS = 1000;

const $ = (selector, root = document) => root.querySelector(selector);
const state = { topic: null, job: null, stopWatching: null, socket: 'connecting', refused: false };

function setText(element, text) {
  if (element.textContent !== text) element.textContent = text;
}

function showError(text) {
  setText($('#message'), text || '');
}

/// The socket's state, unless the API refused the token: then `unauthorized`, whatever the
/// socket (which may serve an anonymous connection) says.
function showStatus() {
  const status = state.refused ? 'unauthorized' : state.socket;
  const element = $('#status');
  element.dataset.status = status;
  setText(element, status);
}

function setStatus(status) {
  state.socket = status;
  showStatus();
}

async function gql(query, variables = {}) {
  const response = await fetch(httpUrl, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', ...(token ? { Authorization: 'Bearer ' + token } : {}) },
    body: JSON.stringify({ query, variables }),
  });
  const body = await response.json();
  if (body.errors) {
    const codes = body.errors.map((e) => e.extensions?.code);
    if (codes.includes('UNAUTHENTICATED') || codes.includes('FORBIDDEN')) {
      state.refused = true;
      showStatus();
      throw new Error('This page needs an admin token: paste one above.');
    }
    throw new Error(body.errors.map((e) => e.message).join('\n'));
  }
  if (state.refused) {
    state.refused = false;
    showStatus();
  }
  return body.data;
}

/// Runs an action from a button, showing what went wrong instead of throwing.
async function act(action) {
  try {
    showError('');
    await action();
    await refresh();
  } catch (error) {
    showError(error.message);
  }
}

function cell(text, className) {
  const td = document.createElement('td');
  td.textContent = text ?? '';
  if (className) td.className = className;
  return td;
}

function button(text, name, onClick) {
  const b = document.createElement('button');
  b.type = 'button';
  b.textContent = text;
  b.name = name;
  b.addEventListener('click', (event) => {
    event.stopPropagation();
    act(onClick);
  });
  return b;
}

const time = (at) => (at ? new Date(at).toISOString().replace('T', ' ').slice(0, 19) + ' UTC' : '');

// --- Topics ---------------------------------------------------------------------------

const TOPICS = `query Topics { topics { name paused perSecond concurrency
  counts { delayed ready running done dead paused } } }`;

function limitInput(name, value) {
  const input = document.createElement('input');
  input.className = 'limit';
  input.name = name;
  input.type = 'number';
  input.min = '1';
  input.placeholder = 'none';
  input.value = value ?? '';
  return input;
}

function topicRow(topic) {
  const row = document.createElement('tr');
  row.dataset.topic = topic.name;
  row.dataset.paused = String(topic.paused);
  row.append(cell(topic.name, 'name'));
  for (const key of ['delayed', 'ready', 'running', 'done', 'dead', 'paused']) {
    row.append(cell(String(topic.counts[key]), `n count-${key}`));
  }
  const perSecond = limitInput('perSecond', topic.perSecond);
  const concurrency = limitInput('concurrency', topic.concurrency);
  const limits = (input) => {
    const td = document.createElement('td');
    td.append(input);
    return td;
  };
  row.append(limits(perSecond), limits(concurrency));
  const actions = document.createElement('td');
  const number = (input) => (input.value === '' ? null : Number(input.value));
  actions.append(
    topic.paused
      ? button('Resume', 'resume', () => gql('mutation($t: String!) { resumeTopic(topic: $t) { paused } }', { t: topic.name }))
      : button('Pause', 'pause', () => gql('mutation($t: String!) { pauseTopic(topic: $t) { paused } }', { t: topic.name })),
    ' ',
    button('Set limits', 'limits', () => gql(
      'mutation($t: String!, $p: Int, $c: Int) { setTopicLimits(topic: $t, perSecond: $p, concurrency: $c) { name } }',
      { t: topic.name, p: number(perSecond), c: number(concurrency) },
    )),
  );
  row.append(actions);
  row.addEventListener('click', () => select(topic.name));
  return row;
}

/// Updates the rows in place (an input being typed into keeps its value and focus).
function renderTopics(topics) {
  const body = $('#topics');
  if (topics.length === 0) {
    body.innerHTML = '<tr><td colspan="10" class="muted">No topics yet.</td></tr>';
    return;
  }
  const existing = new Map([...body.querySelectorAll('tr[data-topic]')].map((row) => [row.dataset.topic, row]));
  const rows = topics.map((topic) => {
    let row = existing.get(topic.name);
    if (!row || row.dataset.paused !== String(topic.paused)) return topicRow(topic);
    for (const key of Object.keys(topic.counts)) setText($(`.count-${key}`, row), String(topic.counts[key]));
    return row;
  });
  rows.forEach((row) => row.classList.toggle('selected', row.dataset.topic === state.topic));
  body.replaceChildren(...rows);
}

// --- A topic's jobs ---------------------------------------------------------------------

const JOBS = `query Jobs($topic: String!, $status: JobStatus!) {
  jobs(topic: $topic, status: $status, first: 50) { edges { node {
    jobId status attempts maxAttempts runs nextRunAt lastError } } } }`;

async function renderJobs() {
  if (!state.topic) return;
  const topic = state.topic;
  const status = $('#state').value;
  const data = await gql(JOBS, { topic, status });
  if (topic !== state.topic || status !== $('#state').value) return;
  const rows = data.jobs.edges.map(({ node: job }) => {
    const row = document.createElement('tr');
    row.dataset.jobId = job.jobId;
    row.append(cell(job.jobId), cell(job.status), cell(`${job.attempts}/${job.maxAttempts}`, 'n'),
      cell(String(job.runs), 'n'), cell(time(job.nextRunAt)), cell(job.lastError));
    const actions = document.createElement('td');
    if (job.status === 'DEAD') {
      actions.append(button('Requeue', 'requeue', () => gql(
        'mutation($t: String!, $id: ID!) { requeueDeadJob(topic: $t, id: $id) { jobId } }', { t: topic, id: job.jobId })));
    }
    row.append(actions);
    row.addEventListener('click', () => openJob(job.jobId));
    return row;
  });
  if (rows.length === 0) {
    const row = document.createElement('tr');
    row.append(cell(`No ${status.toLowerCase()} jobs.`, 'muted'));
    rows.push(row);
  }
  $('#jobs').replaceChildren(...rows);
}

// --- One job ------------------------------------------------------------------------------

const JOB = `query Job($topic: String!, $id: ID!) { job(topic: $topic, id: $id) {
  jobId status attempts maxAttempts priority runs nextRunAt createdAt startedAt finishedAt
  lastError progress result repeat { everySeconds cron timeZone limit endsAt }
  history { at state attempt error } } }`;

async function renderJob() {
  if (!state.job) return;
  const { topic, id } = state.job;
  const { job } = await gql(JOB, { topic, id });
  if (state.job?.id !== id) return;
  $('#job').hidden = false;
  setText($('#job-id'), `${id} (${topic})`);
  const fields = $('#job-fields');
  if (!job) {
    fields.replaceChildren(Object.assign(document.createElement('tr'), { textContent: 'No such job any more.' }));
    return;
  }
  const repeat = job.repeat
    ? (job.repeat.cron ? `cron "${job.repeat.cron}" in ${job.repeat.timeZone}` : `every ${job.repeat.everySeconds} s`)
      + (job.repeat.limit ? `, ${job.repeat.limit} runs` : '') + (job.repeat.endsAt ? `, until ${time(job.repeat.endsAt)}` : '')
    : 'no';
  const pairs = [
    ['State', job.status], ['Attempts', `${job.attempts} of ${job.maxAttempts}`], ['Priority', job.priority],
    ['Repeats', repeat], ['Runs', job.runs], ['Next run', time(job.nextRunAt)], ['Created', time(job.createdAt)],
    ['Started', time(job.startedAt)], ['Finished', time(job.finishedAt)], ['Last error', job.lastError],
    ['Result', job.result == null ? '' : JSON.stringify(job.result)],
  ];
  fields.replaceChildren(...pairs.map(([name, value]) => {
    const row = document.createElement('tr');
    row.dataset.field = name.toLowerCase().replace(' ', '-');
    row.append(cell(name, 'muted'), cell(String(value ?? '')));
    return row;
  }));
  setText($('#job-progress'), job.progress == null ? 'none' : JSON.stringify(job.progress, null, 2));
  $('#history').replaceChildren(...job.history.map((event) => {
    const row = document.createElement('tr');
    row.append(cell(time(event.at)), cell(event.state), cell(String(event.attempt), 'n'), cell(event.error));
    return row;
  }));
}

function openJob(id) {
  state.job = { topic: state.topic, id };
  act(renderJob);
}

// --- Live ---------------------------------------------------------------------------------

let client = null;

function connect() {
  client = new GraphQLWsClient(wsUrl.toString(), {
    connectionParams: () => (token ? { Authorization: 'Bearer ' + token } : {}),
    onStatus: setStatus,
  });
}

let pending = null;
/// Many changes in a burst refresh once.
function soon() {
  if (!pending) pending = setTimeout(() => { pending = null; refresh().catch((e) => showError(e.message)); }, 100);
}

function select(topic) {
  if (state.topic === topic) return;
  state.topic = topic;
  state.job = null;
  $('#job').hidden = true;
  $('#detail').hidden = false;
  setText($('#detail-topic'), topic);
  state.stopWatching?.();
  state.stopWatching = client.subscribe(
    { query: 'subscription Watch($topic: String!) { jobChanged(topic: $topic) { jobId status } }', variables: { topic } },
    { next: soon, error: (errors) => showError(errors.map((e) => e.message).join('\n')) },
  );
  act(async () => {});
}

async function refresh() {
  const data = await gql(TOPICS);
  renderTopics(data.topics);
  await renderJobs();
  await renderJob();
}

$('#state').addEventListener('change', () => act(async () => {}));
$('#requeue-all').addEventListener('click', () => act(() =>
  gql('mutation($t: String!) { requeueDeadJobs(topic: $t) }', { t: state.topic })));
$('#login').addEventListener('submit', (event) => {
  event.preventDefault();
  token = $('#token').value.trim();
  state.refused = false;
  sessionStorage.setItem(TOKEN_KEY, token);
  $('#token').value = '';
  // The socket authenticates once, at connection_init: a new token needs a new one.
  client?.close();
  connect();
  const topic = state.topic;
  state.topic = null;
  if (topic) select(topic);
  act(async () => {});
});

connect();
act(async () => {});
setInterval(() => {
  if (!document.hidden && !state.refused) refresh().catch((e) => showError(e.message));
}, POLL_MS);
