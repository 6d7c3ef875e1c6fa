// The normalised cache and the rules that keep it right for engage's schema. Each rule names
// what would go wrong without it.
import { InMemoryCache } from '@apollo/client';
import { relayStylePagination } from '@apollo/client/utilities';
import generated from './gql/possible-types';

export function createEngageCache(): InMemoryCache {
  return new InMemoryCache({
    // Which types implement which interfaces (`Node` once every object has a global id),
    // generated from the schema: fragments on an interface match only with this.
    possibleTypes: generated.possibleTypes,
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
      // One calendar per month: `signCalendar` (this month) and `signCalendar(month:)` and
      // the calendar a sign-in answers are the same object.
      SignCalendar: { keyFields: ['month'] },
      // One entry per user, so that the live board, `leaderboard.me` and
      // `leaderboardAroundMe` show the same rank and points. An entry carries no season:
      // read a past season's board (or `Season.winners`) with `fetchPolicy: 'no-cache'`,
      // or it overwrites the current entries of the same users.
      RankEntry: { keyFields: ['user', ['id']] },
      // A job's `id` is unique within its topic only. Once jobs carry a global id (and
      // `jobId` for the per-topic one), `id` alone is the key and this rule can go.
      Job: { keyFields: ['topic', 'id'] },
    },
  });
}
