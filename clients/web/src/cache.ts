// The normalised cache and the rules that keep it right for engage's schema. Each rule names
// what would go wrong without it.
import { InMemoryCache } from '@apollo/client';
import { relayStylePagination } from '@apollo/client/utilities';
import generated from './gql/possible-types';

export function createEngageCache(): InMemoryCache {
  return new InMemoryCache({
    // Which types implement which interfaces (`Node`: every object with a global id),
    // generated from the schema: fragments on an interface match only with this.
    possibleTypes: generated.possibleTypes,
    // Every other object is kept by its `id`, Apollo's default: a global id, unique
    // across types.
    typePolicies: {
      Query: {
        fields: {
          // Pages of one list are merged into one list (fetchMore), each list kept apart
          // by the arguments that select it, not by `first`/`after`.
          remarks: relayStylePagination(['itemId']),
          feed: relayStylePagination(),
          myOrders: relayStylePagination(),
          pointsHistory: relayStylePagination(),
          jobs: relayStylePagination(['topic', 'status']),
        },
      },
      // One calendar per month: `calendar` (this month), `calendar(month:)` and the month a
      // sign-in answers are the same object.
      MonthCalendar: { keyFields: ['month'] },
      // The viewer's streak is one object: `streak` and the status a sign-in answers.
      StreakStatus: { keyFields: [] },
      // A board entry is a rank on one board at one moment, with no identity of its own:
      // it stays inside the board, snapshot or `me` that holds it. Keyed by its user, a
      // past season's board (or a stale snapshot) would overwrite the current board's
      // entries of the same users.
      RankEntry: { keyFields: false },
    },
  });
}
