// Daily sign-in: the mutation, and the calendar it changes.
import type { ApolloClient } from '@apollo/client';
import { SignInDocument } from './gql/graphql';

/**
 * Signs the viewer in for today. The answer carries this month's calendar, which Apollo
 * writes into the cached calendar of that month: the calendars on screen show it at once.
 */
export async function signIn(apollo: ApolloClient) {
  const { data } = await apollo.mutate({ mutation: SignInDocument });
  return data?.signIn;
}
