// An example app on the kit: an item's remarks with live like counts, a like button and a
// refresh of one remark, the viewer's sign-in calendar with a sign-in button, and the live
// leaderboard with the viewer's own rank. Plain DOM, so that what the kit does is all there
// is to read.
//
// URL parameters: `api` (default http://127.0.0.1:8000), `item` (an item id), `token` (a
// bearer token; else the one saved under `engage.token` in localStorage), `pageSize`
// (remarks per page, default 10).
import type { Subscription } from 'rxjs';
import {
  createEngageClient,
  errorCode,
  followLikeCounts,
  ItemRemarksDocument,
  LeaderboardChangedDocument,
  MyRankChangedDocument,
  refreshRemark,
  setLiked,
  CalendarDocument,
  DayState,
  signIn,
  ViewerDocument,
  type BoardEntryFragment,
  type CalendarMonthFragment,
  type StreakFieldsFragment,
  type RemarkCardFragment,
} from '../src/index';

const params = new URLSearchParams(location.search);
const api = (params.get('api') ?? 'http://127.0.0.1:8000').replace(/\/$/, '');
const itemId = params.get('item');
const token = params.get('token') ?? localStorage.getItem('engage.token');
const pageSize = Number(params.get('pageSize') ?? 10);

const $ = <T extends HTMLElement = HTMLElement>(id: string) => document.getElementById(id) as T;

const { apollo } = createEngageClient({
  url: `${api}/graphql`,
  getToken: () => token,
  onSocket: (state) => {
    $('socket').dataset.state = state;
    $('socket').textContent = state === 'connected' ? 'live' : 'reconnecting';
  },
});

function element(tag: string, props: Record<string, string> = {}, ...children: (Node | string)[]) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(props)) {
    if (key === 'class') node.className = value;
    else if (key.startsWith('data-') || key.startsWith('aria-')) node.setAttribute(key, value);
    else (node as unknown as Record<string, string>)[key] = value;
  }
  node.append(...children);
  return node;
}

function showError(error: unknown) {
  const box = $('error');
  box.hidden = false;
  box.textContent = `${errorCode(error) ?? 'NETWORK'}: ${error instanceof Error ? error.message : String(error)}`;
}

// The viewer, to mark them on the board.
let viewerId: string | undefined;
apollo.query({ query: ViewerDocument }).then(({ data }) => {
  viewerId = data?.viewer?.id;
  $('viewer').textContent = data?.viewer ? `signed in as ${data.viewer.name}` : 'not signed in';
  document.body.dataset.viewerId = viewerId ?? '';
}, showError);

// Remarks, with live counts for the remarks on screen.
function remarkRow(remark: RemarkCardFragment) {
  const button = element('button', { class: 'like', 'aria-pressed': String(remark.likedByMe) },
    remark.likedByMe ? 'Liked' : 'Like');
  button.addEventListener('click', async () => {
    (button as HTMLButtonElement).disabled = true;
    try {
      await setLiked(apollo, remark.id, !remark.likedByMe);
    } catch (error) {
      showError(error);
    } finally {
      (button as HTMLButtonElement).disabled = false;
    }
  });
  // The live counts carry no `likedByMe`: a like from another device shows on a refresh.
  const refresh = element('button', { class: 'refresh', title: 'Refresh this remark' }, '↻');
  refresh.addEventListener('click', () => refreshRemark(apollo, remark.id).catch(showError));
  return element('li', { class: 'remark', 'data-remark-id': remark.id },
    element('span', { class: 'author' }, `${remark.author.name} ${'★'.repeat(remark.score)}`),
    element('span', { class: 'likes' },
      element('span', { class: 'count' }, String(remark.likeCount)), button, refresh),
    element('span', { class: 'content' }, remark.content));
}

if (itemId) {
  const remarks = apollo.watchQuery({ query: ItemRemarksDocument, variables: { itemId, first: pageSize } });
  let live: Subscription | undefined;
  let liveIds = '';
  let endCursor: string | null | undefined;
  remarks.subscribe(({ data, dataState, error }) => {
    if (error) return showError(error);
    if (dataState !== 'complete') return;
    $('item-name').textContent = data.item?.name ?? 'Unknown item';
    const nodes = data.remarks.edges.map((edge) => edge.node);
    $('remarks').replaceChildren(...nodes.map(remarkRow));
    endCursor = data.remarks.pageInfo.endCursor;
    $('more').hidden = !data.remarks.pageInfo.hasNextPage;
    const ids = nodes.map((remark) => remark.id).slice(0, 100);
    if (ids.join() !== liveIds) {
      live?.unsubscribe();
      liveIds = ids.join();
      live = ids.length ? followLikeCounts(apollo, ids) : undefined;
    }
  });
  $('more').addEventListener('click', () => {
    remarks.fetchMore({ variables: { after: endCursor } }).catch(showError);
  });
} else {
  $('remarks').replaceChildren(element('li', { class: 'muted' }, 'Add ?item=ID to the URL.'));
}

// What each day's state is called, for its title.
const DAY_TITLES: Record<DayState, string> = {
  [DayState.Signed]: 'signed',
  [DayState.MadeUp]: 'made up',
  [DayState.Frozen]: 'frozen',
  [DayState.Missed]: 'missed',
  [DayState.Future]: 'to come',
  [DayState.BeforeJoining]: 'before joining',
};

// The sign-in calendar of this month, and the streak.
function renderCalendar(calendar: CalendarMonthFragment, streak: StreakFieldsFragment) {
  $('month').textContent = calendar.month;
  // `today` is a `YYYY-MM-DD` of the viewer's zone, in the month shown.
  const today = Number(streak.today.slice(8, 10));
  $('calendar').replaceChildren(...calendar.days.map((state, index) =>
    element('span', {
      class: index + 1 === today ? 'day today' : 'day',
      'data-day': String(index + 1),
      'data-state': state,
      'data-signed': String(state === DayState.Signed || state === DayState.MadeUp),
      // A day kept by a streak freeze is neither signed nor missed: it is drawn apart
      // (style.css), and says so to a pointer and a screen reader.
      title: DAY_TITLES[state],
    }, String(index + 1))));
  $('streak').textContent = `streak ${streak.current}, ${streak.makeUpsLeft} make-ups left`;
  $<HTMLButtonElement>('sign-in').disabled = streak.signedToday;
}

if (token) {
  apollo.watchQuery({ query: CalendarDocument, variables: {} }).subscribe(({ data, dataState, error }) => {
    if (error) return showError(error);
    if (dataState === 'complete') renderCalendar(data.calendar, data.streak);
  });
} else {
  $<HTMLButtonElement>('sign-in').disabled = true;
}
$('sign-in').addEventListener('click', () => signIn(apollo).catch(showError));

// The live leaderboard: each snapshot rendered as it comes (its entries are its own, kept
// with it in the cache), and the viewer's own entry, which may be off the board shown.
function boardRow(entry: BoardEntryFragment) {
  return element('li', { class: entry.user.id === viewerId ? 'me' : '', 'data-user-id': entry.user.id },
    element('span', {}, `${entry.rank}. ${entry.user.name}`),
    element('span', { class: 'points' }, String(entry.points)));
}

apollo.subscribe({ query: LeaderboardChangedDocument, variables: { top: 10 } }).subscribe(({ data, error }) => {
  if (error) return showError(error);
  const snapshot = data?.leaderboardChanged;
  if (!snapshot) return;
  $('season').textContent = snapshot.season.name;
  $('board').replaceChildren(...snapshot.entries.map(boardRow));
});

if (token) {
  apollo.subscribe({ query: MyRankChangedDocument }).subscribe(({ data, error }) => {
    if (error) return showError(error);
    const entry = data?.myRankChanged;
    if (!entry) return;
    $('me').dataset.rank = String(entry.rank);
    $('me').textContent = `You: rank ${entry.rank}, ${entry.points} ${entry.points === 1 ? 'point' : 'points'}`;
  });
}
