// Daily sign-in: the mutation, and the calendar it changes.
import type { ApolloClient } from '@apollo/client';
import { SignCalendarDocument, SignInDocument } from './gql/graphql';

/** Signs the viewer in for today; the cached calendar of this month shows it once done. */
export async function signIn(apollo: ApolloClient) {
  const { data } = await apollo.mutate({
    mutation: SignInDocument,
    // NEXT SCHEMA: this goes once the operation selects `signIn { calendar { ... } }`,
    // which Apollo normalises into the cached calendar (keyed by month). Until then the
    // answer carries no calendar, so the calendars on screen are fetched again.
    refetchQueries: [SignCalendarDocument],
    awaitRefetchQueries: true,
  });
  return data?.signIn;
}
